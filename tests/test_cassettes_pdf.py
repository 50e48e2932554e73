"""fetch of PDFs replayed from a cassette (issue 24): the binary body kept as base64 reads as
it did live, MAX_PAGES and all, and a scan answers PARTIAL naming why."""

from __future__ import annotations

import math
from pathlib import Path

from csp_web.cli.cassette import Cassette, Exchange
from csp_web.config import Config
from specialists.formats import Limits
from specialists.formats.pdf import read_pdf
from specialists.web.pages.loading import document_words
from tests.test_cassettes import _exchange, _replay
from tests.web.pdf_support import PDF_TYPE, fixture

HOST = "papers.example.org"
REPORT, SCAN = f"https://{HOST}/report.pdf", f"https://{HOST}/scan.pdf"


def _pdf(url: str, body: bytes) -> Exchange:
    return Exchange("GET", url, (), b"", 200, (("content-type", PDF_TYPE),), body)


async def test_a_recorded_pdf_replays_its_pages_and_a_scan_its_cause(
    config: Config, tmp_path: Path
) -> None:
    report, scan = fixture("lo_02_serif_title"), fixture("scanned")
    document = read_pdf(report, Limits(max_pages=1))
    markdown = document.markdown
    cassette = Cassette(
        [
            _exchange(f"https://{HOST}/robots.txt", b"", status=404),
            _pdf(REPORT, report),
            _pdf(SCAN, scan),
        ]
    )
    text = (
        f"> TASK REQ:fetch {REPORT} IN:WEB OUT:CONTENT\n> MAX_PAGES 1\n>\n"
        f'< STATUS OK\n< SCOPE [{HOST}]\n< DATA {{{{re:"# .*"}}}}\n< TITLE "{document.title}"\n'
        f"< PUBLISHED {document.published}\n< LANG {document.lang}\n"
        f"< WORD_COUNT {document_words(markdown)}\n< PAGES 3\n< PAGES_READ 1\n"
        f"< CACHED false\n< URL {REPORT}\n< FILE_KEY {{{{re:fk_[a-z0-9]+}}}}\n"
        f"< CONTENT_LENGTH {len(markdown)}\n< TOKENS {math.ceil(len(markdown) / 4)}\n"
        f'< TRUNCATED false\n< CITE {REPORT} "{document.title}"\n<\n'
        f"> TASK REQ:fetch {SCAN} IN:WEB OUT:CONTENT\n>\n"
        f'< STATUS PARTIAL\n< SCOPE [{HOST}]\n< DATA ""\n< ERROR no_text_layer:scanned\n'
        f"< PUBLISHED {{{{re:[0-9-]+}}}}\n< LANG en-US\n< WORD_COUNT 0\n< PAGES 1\n< CACHED false\n"
        f"< URL {SCAN}\n< FILE_KEY {{{{re:fk_[a-z0-9]+}}}}\n< CONTENT_LENGTH 0\n< TOKENS 0\n"
        f'< TRUNCATED false\n< CITE {SCAN} ""\n<\n'
    )
    assert await _replay(text, cassette, config, tmp_path) == []
