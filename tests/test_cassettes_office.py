"""fetch of office documents and feeds replayed from a cassette (issue 24): a DOCX's binary
body, kept as base64, reads as it did live with its fields; a feed's entries too."""

from __future__ import annotations

import math
from pathlib import Path

from csp_web.cli.cassette import Cassette, Exchange
from csp_web.config import Config
from specialists.formats import Limits
from specialists.formats.docx import read_docx
from specialists.formats.feed import read_feed
from specialists.web.pages.documents import DOCX
from specialists.web.pages.loading import document_words
from tests.test_cassettes import _exchange, _replay
from tests.web.documents_support import fixture

HOST = "harbour.example.org"
MINUTES, FEED = f"https://{HOST}/minutes.docx", f"https://{HOST}/feed.xml"


def _served(url: str, content_type: str, body: bytes) -> Exchange:
    return Exchange("GET", url, (), b"", 200, (("content-type", content_type),), body)


def _reply(url: str, markdown: str, fields: str, title: str) -> str:
    return (
        f"< STATUS OK\n< SCOPE [{HOST}]\n"
        '< DATA {{re:"# .*"}}\n'
        f'< TITLE "{title}"\n{fields}'
        f"< WORD_COUNT {document_words(markdown)}\n< CACHED false\n< URL {url}\n"
        f"< FILE_KEY {{{{re:fk_[a-z0-9]+}}}}\n< CONTENT_LENGTH {len(markdown)}\n"
        f"< TOKENS {math.ceil(len(markdown) / 4)}\n< TRUNCATED false\n"
        f'< CITE {url} "{title}"\n<\n'
    )


async def test_a_recorded_docx_and_feed_replay_their_markdown_and_fields(
    config: Config, tmp_path: Path
) -> None:
    minutes, feed = fixture("minutes.docx"), fixture("rss2.xml")
    document, entries = read_docx(minutes, Limits()), read_feed(feed, Limits())
    cassette = Cassette(
        [
            _exchange(f"https://{HOST}/robots.txt", b"", status=404),
            _served(MINUTES, DOCX, minutes),
            _served(FEED, "text/xml; charset=utf-8", feed),
        ]
    )
    declared = "< AUTHOR Tomas Reyes\n< PUBLISHED 2026-09-14T16:40:00Z\n< LANG en-GB\n"
    feed_fields = (
        "< AUTHOR board@harbour.example (Tomas Reyes)\n"
        "< PUBLISHED 2026-11-27T09:00:00Z\n< LANG en-gb\n"
    )
    text = (
        f"> TASK REQ:fetch {MINUTES} IN:WEB OUT:CONTENT\n> MAX_CHARS 50000\n>\n"
        + _reply(MINUTES, document.markdown, declared, "Harbour Board Minutes")
        + f"> TASK REQ:fetch {FEED} IN:WEB OUT:CONTENT\n> MAX_CHARS 50000\n>\n"
        + _reply(FEED, entries.markdown, feed_fields, "Harbour Notes")
    )
    assert await _replay(text, cassette, config, tmp_path) == []
