"""What a document reader gives back, and the bounds it works within.

Every reader in this package is a pure function ``read_<format>(data: bytes, limits: Limits)
-> Document``: it turns one downloaded file into the Markdown that fetch pages through like any
HTML page's, or raises ``Unreadable`` naming why it cannot. Readers do no I/O of their own; the
web specialist runs them in a worker process bounded in time and memory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The line between two pages of a paged document's Markdown (an HTML comment: invisible when the
# Markdown is rendered, unlikely in any text, and it says which page follows); fetch cuts a
# snapshot read with more pages at the marker of the first page past MAX_PAGES.
PAGE_MARKER = "<!-- page {} -->"
# What stands in a paged document's Markdown for a page its reader could not load (a page
# object PDFium refuses, a /Count past the page tree): the rest of the document still reads,
# and fetch answers PARTIAL naming these pages. A reader's text never spells it: PDF text is
# ``_markdown.inert``, which backslashes its ``<``.
UNREADABLE_PAGE = "<!-- page {} unreadable -->"
# The same for a workbook's sheet (numbered from 1 in the workbook's order) that is damaged:
# under its ``## name``, the other sheets read. Cells are escaped (``_markdown.cell``).
UNREADABLE_SHEET = "<!-- sheet {} unreadable -->"


@dataclass(frozen=True)
class Limits:
    """How much of a document a reader may turn into text.

    ``max_pages`` bounds the PDF pages read (fetch's MAX_PAGES); ``max_rows`` bounds the rows of
    each sheet or CSV; ``max_entries`` bounds a feed's entries; ``max_chars`` bounds the
    Markdown produced, past which a reader stops and says it was cut. ``base_url`` is the URL
    the document was read from: a relative link in a DOCX or ODT is made absolute against it
    (http/https only); without it relative links are dropped.
    """

    max_pages: int = 200
    max_rows: int = 1_000
    max_entries: int = 200
    max_chars: int = 5_000_000
    base_url: str | None = None


@dataclass(frozen=True)
class Document:
    """One document as Markdown.

    ``pages`` is the number of pages the document has (PDF) or None where pages mean nothing;
    ``pages_read`` how many of them the Markdown holds. ``cut`` says the Markdown stops short of
    the document (a limit was met). ``no_text`` names why a document that parsed holds no text
    (``encrypted``, ``scanned``), None when it holds some; fetch answers it as PARTIAL with
    ``ERROR no_text_layer``.
    """

    markdown: str
    title: str | None = None
    pages: int | None = None
    pages_read: int | None = None
    author: str | None = None
    published: str | None = None
    lang: str | None = None
    cut: bool = False
    no_text: str | None = None


class Unreadable(Exception):
    """The bytes are not a readable document of the format asked (corrupt, a zip bomb, a
    billion-laughs feed): ``code`` is a catalogue code (``too_large``, ``unsupported_content``)
    and ``detail`` says what was wrong."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}:{detail}")
        self.code = code
        self.detail = detail


def unreadable_pages(markdown: str) -> list[int]:
    """The numbers (from 1) of the pages ``markdown`` marks as unreadable, in order."""
    return [int(number) for number in _marked(UNREADABLE_PAGE).findall(markdown)]


def unreadable_sheets(markdown: str) -> list[int]:
    """The numbers (from 1) of the sheets ``markdown`` marks as unreadable, in order."""
    return [int(number) for number in _marked(UNREADABLE_SHEET).findall(markdown)]


def _marked(marker: str) -> re.Pattern[str]:
    return re.compile("^" + re.escape(marker).replace(r"\{\}", r"(\d+)") + "$", re.M)
