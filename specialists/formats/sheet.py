"""Spreadsheets as Markdown tables: XLSX (each sheet under its heading) and CSV.

XLSX is read by openpyxl (MIT) in read-only mode: it streams each sheet's XML instead of
building the workbook, so memory stays bounded by a row, and it turns Excel's date serials
and number formats into values (what a lean hand-written reader would have to redo). Cached
formula results are shown, as Excel shows them. Rows past ``limits.max_rows`` and columns
past ``MAX_COLUMNS`` are left out, and a line under the table says how many.

CSV bytes are decoded by a small rule (a pure package cannot use csp_web's charset module):
a byte order mark, else UTF-8 when the bytes are valid UTF-8, else windows-1252, the WHATWG
default for undeclared text. The dialect (delimiter, quoting) is sniffed from the first
``SNIFF_CHARS``.
"""

from __future__ import annotations

import codecs
import csv
import datetime as dt
import io
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import openpyxl
from defusedxml import DefusedXmlException

from ._dates import iso_utc
from ._markdown import cell, fit
from ._zip import open_zip
from .document import Document, Limits, Unreadable

MAX_COLUMNS = 100  # wider rows are data dumps no reader scans in Markdown; the rest is named
EXCEL_MAX_ROWS = 1_048_576  # a row number past Excel's own limit is a lie meant to spin us
SNIFF_CHARS = 16 * 1024  # enough lines to tell a dialect; csv.Sniffer is slow on more
_BOMS = (
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


@dataclass(frozen=True)
class Table:
    """One sheet's shown rows and what was left out of it."""

    rows: list[list[str]]
    rows_left: int
    wider: bool  # some row held a value past MAX_COLUMNS


def read_xlsx(data: bytes, limits: Limits) -> Document:
    """Each worksheet of an XLSX workbook as ``## name`` and a Markdown table.

    Raises ``Unreadable``: ``too_large`` for a zip bomb, ``corrupt_document`` for bytes that
    are not a readable workbook.
    """
    open_zip(data, "XLSX")
    blocks: list[str] = []
    cut = False
    try:
        with warnings.catch_warnings():  # openpyxl warns of styles it cannot read: not ours
            warnings.simplefilter("ignore")
            book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
            for sheet in book.worksheets:
                table = _table(_rows_of(sheet), limits)
                blocks.append(f"## {' '.join(sheet.title.split())}")
                blocks.extend(_render(table, limits))
                cut = cut or table.rows_left > 0 or table.wider
            title = book.properties.title
            author = book.properties.creator
            created = book.properties.created
    except Unreadable:
        raise
    except DefusedXmlException:
        raise Unreadable("too_large", "XLSX declares XML entities: refused") from None
    except Exception as exc:  # openpyxl's errors on damaged parts are of any type
        raise Unreadable("corrupt_document", f"XLSX is not readable ({exc!r})") from None
    markdown, over = fit(blocks, limits.max_chars)
    return Document(
        markdown=markdown,
        title=(title or "").strip() or None,
        author=(author or "").strip() or None,
        published=iso_utc(created.isoformat()) if isinstance(created, dt.datetime) else None,
        cut=cut or over,
    )


def read_csv(data: bytes, limits: Limits) -> Document:
    """A CSV file as one Markdown table (its first row as the header).

    Raises ``Unreadable("corrupt_document")`` when the text does not split into rows (a
    quoted field left open past the csv module's field limit).
    """
    text = _decode(data)
    try:
        dialect: type[csv.Dialect] | csv.Dialect = csv.Sniffer().sniff(
            text[:SNIFF_CHARS], delimiters=",;\t|"
        )
    except csv.Error:  # one column, or too little to tell: the standard dialect
        dialect = csv.excel
    try:
        table = _table(csv.reader(io.StringIO(text, newline=""), dialect), limits)
    except csv.Error as exc:
        raise Unreadable("corrupt_document", f"CSV does not split into rows ({exc})") from None
    markdown, over = fit(_render(table, limits), limits.max_chars)
    return Document(markdown=markdown, cut=over or table.rows_left > 0 or table.wider)


def _decode(data: bytes) -> str:
    for bom, codec in _BOMS:
        if data.startswith(bom):
            return data.decode(codec, errors="replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


def _table(rows: Iterable[Iterable[object]], limits: Limits) -> Table:
    """The first ``limits.max_rows`` rows holding a value, as cell texts, and how many more
    such rows follow (read to the end: linear in the sheet)."""
    shown: list[list[str]] = []
    rows_left = 0
    wider = False
    for row in rows:
        texts = [_text(value) for value in row]
        if not any(texts):
            continue
        if len(texts) > MAX_COLUMNS:
            wider = wider or any(texts[MAX_COLUMNS:])
            texts = texts[:MAX_COLUMNS]
        if len(shown) < limits.max_rows:
            shown.append(texts)
        else:
            rows_left += 1
    return Table(_trim(shown), rows_left, wider)


def _trim(rows: list[list[str]]) -> list[list[str]]:
    """Rows cut to the last column holding a value in any row, padded to that width."""
    width = max((i + 1 for row in rows for i, text in enumerate(row) if text), default=0)
    return [(row + [""] * width)[:width] for row in rows]


def _render(table: Table, limits: Limits) -> list[str]:
    blocks = [_markdown_table(table.rows)] if table.rows else ["_(no cells)_"]
    if table.rows_left:
        blocks.append(f"_({table.rows_left} more rows left out: max_rows {limits.max_rows})_")
    if table.wider:
        blocks.append(f"_(columns past {MAX_COLUMNS} left out)_")
    return blocks


def _markdown_table(rows: list[list[str]]) -> str:
    lines = _lines(rows)
    header = next(lines)
    rule = "|" + " --- |" * len(rows[0])
    return "\n".join([header, rule, *lines])


def _lines(rows: list[list[str]]) -> Iterator[str]:
    for row in rows:
        yield "| " + " | ".join(cell(text) for text in row) + " |"


def _text(value: object) -> str:
    """A cell's value as Excel would show it by default."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float):
        return format(value, ".15g")  # Excel shows 15 significant digits: 0.1+0.2 is 0.3
    if isinstance(value, dt.datetime):
        return value.date().isoformat() if value.time() == dt.time() else value.isoformat()
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    return str(value)


def _rows_of(sheet: object) -> Iterable[Iterable[object]]:
    """A worksheet's values row by row, within Excel's own bounds: its declared dimension
    (which a hostile file may set to a million columns) is not trusted, and one column past
    MAX_COLUMNS is read so that a value there is seen and its loss reported."""
    rows: Iterable[Iterable[object]] = sheet.iter_rows(  # type: ignore[attr-defined]
        max_row=EXCEL_MAX_ROWS, max_col=MAX_COLUMNS + 1, values_only=True
    )
    return rows
