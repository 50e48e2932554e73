"""Spreadsheets as Markdown tables: XLSX (each sheet under its heading) and CSV.

XLSX rows stream from ``_xlsx`` (a lean reader, linear in the sheet's XML; why not openpyxl
is said there); cached formula results are shown, as Excel shows them. Rows past
``limits.max_rows`` and columns past ``MAX_COLUMNS`` are left out, and a line under the
table says so (how many rows: the rest of the sheet is still read, to count them).

CSV bytes are decoded by a small rule (a pure package cannot use csp_web's charset module):
a byte order mark, else UTF-8 when the bytes are valid UTF-8, else windows-1252, the WHATWG
default for undeclared text. The delimiter is sniffed from the first lines; quoting is RFC
4180's (``"``, doubled inside a field).
"""

from __future__ import annotations

import codecs
import csv
import io
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ._dates import iso_utc
from ._markdown import cell, fit, left_out
from ._props import properties
from ._xlsx import sheets
from ._zip import open_office, optional_member
from .document import UNREADABLE_SHEET, Document, Limits, Unreadable

MAX_COLUMNS = 100  # wider rows are data dumps no reader scans in Markdown; the rest is named
SNIFF_CHARS = 16 * 1024  # enough lines to tell the delimiter
SNIFF_LINES = 50
DELIMITERS = (",", ";", "\t", "|")
_QUOTED = re.compile(r'"[^"]*"')
_BOMS = (
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


@dataclass(frozen=True)
class Table:
    """One sheet's shown rows (cell texts, all of one width) and what was left out."""

    rows: list[list[str]]
    rows_left: int
    wider: bool  # some row held a value past MAX_COLUMNS


def read_xlsx(data: bytes, limits: Limits) -> Document:
    """Each worksheet of an XLSX workbook as ``## name`` and a Markdown table; a damaged
    sheet as ``## name`` and ``UNREADABLE_SHEET``, when another sheet reads.

    Raises ``Unreadable``: ``too_large`` for a zip or entity bomb, ``unsupported_content``
    for an external entity, ``corrupt_document`` for bytes that are not a readable workbook.
    """
    archive = open_office(data, "xlsx")
    blocks: list[str] = []
    cut = False
    damaged: list[Unreadable] = []
    listed = 0
    for listed, (name, rows) in enumerate(sheets(archive), start=1):
        blocks.append(f"## {' '.join(name.split()) or 'Sheet'}")
        try:
            table = _table(rows, limits)
        except Unreadable as exc:  # this sheet's part is damaged: the others still read
            if exc.code != "corrupt_document":
                raise
            damaged.append(exc)
            blocks.append(UNREADABLE_SHEET.format(listed))
            continue
        blocks.extend(_render(table, limits))
        cut = cut or table.rows_left > 0 or table.wider
    if damaged and len(damaged) == listed:
        raise damaged[0]
    fields = properties(optional_member(archive, "docProps/core.xml", "xlsx"), "xlsx")
    markdown, over = fit(blocks, limits.max_chars)
    return Document(
        markdown=markdown,
        title=fields.get("title"),
        author=fields.get("creator"),
        published=iso_utc(fields.get("created", "")),
        lang=fields.get("language"),
        cut=cut or over,
    )


def read_csv(data: bytes, limits: Limits) -> Document:
    """A CSV file as one Markdown table (its first row as the header).

    Raises ``Unreadable("corrupt_document")`` when the text does not split into rows (a
    quoted field left open past the csv module's field limit).
    """
    text = _decode(data)
    rows = csv.reader(io.StringIO(text, newline=""), delimiter=sniff_delimiter(text))
    try:
        table = _table(_by_column(rows), limits)
    except csv.Error:
        raise Unreadable("corrupt_document", "csv:malformed") from None
    markdown, over = fit(_render(table, limits), limits.max_chars)
    return Document(markdown=markdown, cut=over or table.rows_left > 0 or table.wider)


def sniff_delimiter(text: str) -> str:
    """The delimiter of a CSV text: of ``DELIMITERS``, the one found the same number of times
    (and most often) on most of the first lines, quoted fields aside; ``,`` when none is.

    Linear in ``SNIFF_CHARS``: ``csv.Sniffer``'s patterns backtrack, and 16 KiB of ``,"``
    kept it busy for seconds.
    """
    lines = _QUOTED.sub("", text[:SNIFF_CHARS]).splitlines()[:SNIFF_LINES]
    best, best_score = ",", (0, 0)
    for delimiter in DELIMITERS:
        counts = Counter(line.count(delimiter) for line in lines if line.strip())
        if not counts:
            break
        count, lines_agreeing = max(counts.items(), key=lambda item: (item[1], item[0]))
        score = (lines_agreeing, count) if count else (0, 0)
        if score > best_score:
            best, best_score = delimiter, score
    return best


def _decode(data: bytes) -> str:
    for bom, codec in _BOMS:
        if data.startswith(bom):
            return data.decode(codec, errors="replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


def _by_column(rows: Iterable[list[str]]) -> Iterator[dict[int, str]]:
    for row in rows:
        yield {column: text for column, text in enumerate(row) if text.strip()}


def _table(rows: Iterable[dict[int, str]], limits: Limits) -> Table:
    """The first ``limits.max_rows`` rows holding a value, and how many more such rows
    follow (read to the end: linear in the sheet)."""
    shown: list[dict[int, str]] = []
    rows_left = 0
    wider = False
    for row in rows:
        if not row:
            continue
        if len(shown) >= limits.max_rows:
            rows_left += 1
            continue
        if max(row) >= MAX_COLUMNS:
            wider = True
            row = {column: text for column, text in row.items() if column < MAX_COLUMNS}
        if row:
            shown.append(row)
    width = max((column + 1 for row in shown for column in row), default=0)
    return Table([[row.get(i, "") for i in range(width)] for row in shown], rows_left, wider)


def _render(table: Table, limits: Limits) -> list[str]:
    blocks = [_markdown_table(table.rows)] if table.rows else ["_(no cells)_"]
    if table.rows_left:
        blocks.append(left_out(table.rows_left, ("row", "rows"), "max_rows", limits.max_rows))
    if table.wider:
        blocks.append(f"_(columns past {MAX_COLUMNS} left out)_")
    return blocks


def _markdown_table(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(cell(text) for text in row) + " |" for row in rows]
    lines.insert(1, "|" + " --- |" * len(rows[0]))
    return "\n".join(lines)
