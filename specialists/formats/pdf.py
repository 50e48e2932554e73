"""PDF → Markdown: the text layer, page by page, with headings where the font size says so.

    document = read_pdf(data, Limits(max_pages=20))

Read with pypdfium2 (PDFium, Chromium's PDF engine; Apache-2.0 / BSD-3): bench/formats.py
measured it about 20 and 35 times faster than pypdf and pdfminer.six on the fixtures, with the
same word accuracy (docs/documents.md has the figures). Each page's text comes from PDFium in
reading order, one line per text line (two columns read as two), and per line the font size of
its characters and where it sits:

- the body size is the size most characters have; a short line set at least ``HEADING_RATIO``
  larger is a heading, ``#`` for the largest heading size, ``##`` and ``###`` for the next two;
  the lines of one heading wrapped over several are joined;
- body lines join into paragraphs, split where the gap between lines is wider than the usual
  line step; a word hyphenated at a line end (PDFium marks its soft hyphen) is joined again;
- pages are separated by a marker line ``<!-- page N -->`` (``document.PAGE_MARKER``);
- a page PDFium cannot load (a page object that is none, a /Count past the page tree) is the
  line ``<!-- page N unreadable -->`` (``document.UNREADABLE_PAGE``) and the rest still read,
  as a viewer shows the pages it can; when none of the pages read loads, the file is
  ``Unreadable("corrupt_document", "pdf:pages_unreadable")``.

No text on any page (a scan) answers ``no_text="scanned"`` (``"max_pages"`` when only the pages
read have none); a PDF that needs a password ``no_text="encrypted"`` (one with an owner
password only opens, as any viewer opens it). OCR is out of scope. A file PDFium cannot parse
raises ``Unreadable("corrupt_document", "pdf:damaged")``, as the office readers name a
file they cannot parse.
"""

from __future__ import annotations

import collections
import ctypes
import itertools
import re
import statistics
from collections.abc import Iterator
from dataclasses import dataclass

import pypdfium2
import pypdfium2.raw as pdfium_c

from ._markdown import inert
from .document import PAGE_MARKER, UNREADABLE_PAGE, Document, Limits, Unreadable

# A heading's font is this much above the body's: LaTeX's \subsection is \large, 12 pt over 11.
HEADING_RATIO = 1.08
HEADING_MAX_WORDS = 24  # a longer line in a large font is a callout or a lead, not a heading
HEADING_LEVELS = 3
HEADING_WRAP_GAP = 0.5  # two lines of one heading size further apart are two headings
PARAGRAPH_GAP = 1.4  # a line step this many times the usual one starts a paragraph
_SOFT_HYPHENS = ("\ufffe", "\x02", "\u00ad")  # PDFium's marks for a hyphen it knows is soft
_SOFT_HYPHEN = re.compile("[" + "".join(_SOFT_HYPHENS) + "]")
_PASSWORD_ERROR = 4  # FPDF_ERR_PASSWORD
_FILE_NAME = re.compile(r"\.(?:html?|pdf|docx?|odt|tex|txt|rtf|indd|pptx?)$", re.I)
_UNESCAPE = re.compile(r"\\([\[\]<\\])")  # undoes ``inert``: a title is no Markdown
_SAMPLE = 12  # characters at each end of a line whose size is read: enough for a median


@dataclass(frozen=True)
class Line:
    """One text line of a page: its text, its font size and its vertical extent (PDF units,
    y upwards). ``size`` is 0 where PDFium could not say."""

    text: str
    size: float
    top: float
    bottom: float


def read_pdf(data: bytes, limits: Limits) -> Document:
    """The Markdown of the first ``limits.max_pages`` pages of ``data`` (see the module's
    docstring). Raises Unreadable(corrupt_document) for bytes PDFium cannot open."""
    try:
        pdf = pypdfium2.PdfDocument(data)
    except pypdfium2.PdfiumError as exc:
        if getattr(exc, "err_code", None) == _PASSWORD_ERROR:
            return Document("", pages_read=0, no_text="encrypted")
        raise Unreadable("corrupt_document", "pdf:damaged") from exc
    try:
        return _read(pdf, limits)
    finally:
        pdf.close()


def _read(pdf: pypdfium2.PdfDocument, limits: Limits) -> Document:
    pages = len(pdf)
    read = min(pages, limits.max_pages)
    lines = [_page_lines(pdf, number) for number in range(read)]
    if read and all(page is None for page in lines):
        raise Unreadable("corrupt_document", "pdf:pages_unreadable")
    markdown, cut = _markdown(lines, limits.max_chars)
    info = pdf.get_metadata_dict(skip_empty=True)
    has_text = any(line.text.strip() for page in _loaded(lines) for line in page)
    return Document(
        markdown,
        title=_title(info.get("Title"), markdown),
        pages=pages,
        pages_read=read,
        author=info.get("Author") or None,
        published=_date(info.get("CreationDate", "")),
        lang=_lang(pdf),
        cut=cut or read < pages,
        no_text=None if has_text else _why_no_text(read, pages),
    )


def _page_lines(pdf: pypdfium2.PdfDocument, number: int) -> list[Line] | None:
    """The text lines of page ``number`` (from 0), None when PDFium cannot load the page or
    its text (the object is no page, the page tree is shorter than its /Count)."""
    try:
        page = pdf[number]
    except pypdfium2.PdfiumError:
        return None
    try:
        textpage = page.get_textpage()
    except pypdfium2.PdfiumError:
        page.close()
        return None
    try:
        return list(_lines(textpage))
    finally:
        textpage.close()
        page.close()


def _loaded(pages: list[list[Line] | None]) -> list[list[Line]]:
    return [lines for lines in pages if lines is not None]


def _lines(textpage: pypdfium2.PdfTextPage) -> Iterator[Line]:
    """The page's text lines with their sizes; PDFium's generated line breaks count as
    characters, so an offset into the text is a character index (when the lengths agree)."""
    count = textpage.count_chars()
    text = textpage.get_text_range(0, count) if count else ""
    aligned = len(text) == count
    at = 0
    for raw in text.split("\r\n"):
        for part in raw.replace("\r", "\n").split("\n"):
            if aligned and part.strip():
                yield _measured(textpage, part, at)
            elif part.strip():
                yield Line(part, 0.0, 0.0, 0.0)
            at += len(part) + 1
        at += 1


def _measured(textpage: pypdfium2.PdfTextPage, text: str, at: int) -> Line:
    sizes, tops, bottoms = [], [], []
    for offset in _sampled(text):
        sizes.append(pdfium_c.FPDFText_GetFontSize(textpage.raw, at + offset))
        left, right, bottom, top = (ctypes.c_double() for _ in range(4))
        refs = (ctypes.byref(left), ctypes.byref(right), ctypes.byref(bottom), ctypes.byref(top))
        if pdfium_c.FPDFText_GetCharBox(textpage.raw, at + offset, *refs):
            tops.append(top.value)
            bottoms.append(bottom.value)
    size = statistics.median(sizes) if sizes else 0.0
    return Line(text, round(size * 2) / 2, max(tops, default=0.0), min(bottoms, default=0.0))


def _sampled(text: str) -> Iterator[int]:
    """The offsets of the first and last ``_SAMPLE`` visible characters of a line: the last
    ones reach the lower line when PDFium joined a word hyphenated across two."""
    picked = [i for i, c in enumerate(text) if not c.isspace()]
    return iter(picked if len(picked) <= 2 * _SAMPLE else picked[:_SAMPLE] + picked[-_SAMPLE:])


def _markdown(pages: list[list[Line] | None], max_chars: int) -> tuple[str, bool]:
    """Every page's Markdown, a marker line before each page after the first, and for a page
    that would not load (None) the line saying so; cut at ``max_chars`` (True when cut)."""
    body = _body_size(_loaded(pages))
    levels = _heading_levels(_loaded(pages), body)
    parts: list[str] = []
    length = 0
    for number, lines in enumerate(pages, start=1):
        if number > 1:
            parts.append(PAGE_MARKER.format(number))
        if lines is None:
            parts.append(UNREADABLE_PAGE.format(number))
        else:
            parts.extend(_blocks(lines, body, levels))
        length = sum(len(part) + 2 for part in parts)
        if length > max_chars:
            return "\n\n".join(parts)[:max_chars], True
    return "\n\n".join(parts), False


def _body_size(pages: list[list[Line]]) -> float:
    weights: collections.Counter[float] = collections.Counter()
    for lines in pages:
        for line in lines:
            weights[line.size] += len(line.text)
    return weights.most_common(1)[0][0] if weights else 0.0


def _heading_levels(pages: list[list[Line]], body: float) -> dict[float, int]:
    """Heading font sizes to Markdown levels: the largest is 1; past HEADING_LEVELS, all 3."""
    sizes = {line.size for lines in pages for line in lines if _is_heading(line, body)}
    return {size: min(rank, HEADING_LEVELS) for rank, size in enumerate(sorted(sizes)[::-1], 1)}


def _is_heading(line: Line, body: float) -> bool:
    return (
        body > 0
        and line.size >= body * HEADING_RATIO
        and len(line.text.split()) <= HEADING_MAX_WORDS
    )


def _blocks(lines: list[Line], body: float, levels: dict[float, int]) -> list[str]:
    """One page's headings and paragraphs, in order."""
    step = _usual_step(lines)
    blocks: list[str] = []
    current: list[Line] = []
    for line in lines:
        if current and _breaks(current[-1], line, body, step):
            blocks.append(_block(current, levels))
            current = []
        current.append(line)
    if current:
        blocks.append(_block(current, levels))
    return [block for block in blocks if block.strip("# ")]


def _usual_step(lines: list[Line]) -> float:
    steps = [a.bottom - b.bottom for a, b in itertools.pairwise(lines)]
    steps = [s for s in steps if s > 0]
    return statistics.median(steps) if steps else 0.0


def _breaks(previous: Line, line: Line, body: float, step: float) -> bool:
    """Whether ``line`` starts a new block after ``previous``: a change of font size class
    (heading or body), a heading size change, or a gap wider than the usual step."""
    if previous.text.endswith(_SOFT_HYPHENS):
        return False
    if _is_heading(previous, body) or _is_heading(line, body):
        gap = previous.bottom - line.top  # a wrapped heading's leading is under half its size
        return previous.size != line.size or gap > previous.size * HEADING_WRAP_GAP
    gap = previous.bottom - line.bottom
    return step > 0 and gap > step * PARAGRAPH_GAP


def _block(lines: list[Line], levels: dict[float, int]) -> str:
    text = inert(_joined(lines))  # a page's text is text: never a link (javascript:...)
    level = levels.get(lines[0].size)
    return f"{'#' * level} {text}" if level else text


def _joined(lines: list[Line]) -> str:
    """The lines' text as one, a word hyphenated at a line end joined again (PDFium joins
    most itself, leaving its soft-hyphen mark inside the line)."""
    text = ""
    for line in lines:
        part = " ".join(line.text.split())
        if text.endswith(_SOFT_HYPHENS):
            text = text[:-1] + part
        elif text:
            text += " " + part
        else:
            text = part
    return _SOFT_HYPHEN.sub("", text)


def _why_no_text(read: int, pages: int) -> str:
    """``scanned`` when no page has text, ``max_pages`` when none of the pages read has (the
    text may start past them: a cover, a blank page)."""
    return "scanned" if read == pages else "max_pages"


def _title(declared: str | None, markdown: str) -> str | None:
    """The document info's title, unless it is empty or a file name (what many printers
    write); else the first heading."""
    if declared and declared.strip() and not _FILE_NAME.search(declared.strip()):
        return " ".join(declared.split())
    heading = re.search(r"^#{1,6} (.+)$", markdown, re.M)
    return _UNESCAPE.sub(r"\1", heading.group(1)) if heading else None


def _date(stamp: str) -> str | None:
    """``D:YYYYMMDD...`` (PDF 1.7 §7.9.4) as ``YYYY-MM-DD``; None when it is not one."""
    match = re.match(r"(?:D:)?(\d{4})(\d{2})(\d{2})", stamp)
    if match is None:
        return None
    year, month, day = match.groups()
    if not ("01" <= month <= "12" and "01" <= day <= "31"):
        return None
    return f"{year}-{month}-{day}"


def _lang(pdf: pypdfium2.PdfDocument) -> str | None:
    """The catalog's /Lang (a BCP 47 tag), None when absent."""
    size = pdfium_c.FPDFCatalog_GetLanguage(pdf.raw, None, 0)
    if size <= 2:
        return None
    buffer = (ctypes.c_ushort * (size // 2))()
    pdfium_c.FPDFCatalog_GetLanguage(pdf.raw, buffer, size)
    tag = bytes(buffer)[: size - 2].decode("utf-16-le", errors="replace").strip()
    return tag or None
