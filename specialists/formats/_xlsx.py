"""The rows of an XLSX workbook's sheets, streamed: a lean SpreadsheetML reader.

Why not openpyxl: its read-only mode yields a filler row for every row number skipped, so
one cell at row 1,000,000 costs a million rows of work, per sheet (and its declared
dimension pads every row to the width it claims). Here rows without cells cost nothing and
columns are placed by their reference, so the work is linear in the sheet's XML. It reads
what a table shows: shared and inline strings, numbers, booleans, errors, cached formula
results, and dates (a number under a date format, 1900 or 1904 based).

Parts are parsed by defusedxml (entities and external references refused); the zip was
judged and screened by ``_zip.open_office`` before.
"""

from __future__ import annotations

import datetime as dt
import io
import posixpath
import re
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import iterparse

from ._xml import optional_xml, parse_xml
from ._zip import MAX_UNPACKED_BYTES, optional_member, read_member
from .document import Unreadable

MAIN = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
RELS = "http://schemas.openxmlformats.org/package/2006/relationships"
DOC_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
# ECMA-376 Part 1 §18.8.30: the built-in number formats that show dates and times.
BUILTIN_DATES = frozenset({*range(14, 23), *range(45, 48)})
_QUOTED = re.compile(r'"[^"]*"|\[[^\]]*\]|\\.')  # literal text and [colours]: not date codes
_DATE_CODES = re.compile(r"[dmyhs]", re.I)
_COLUMN = re.compile(r"[A-Z]{1,3}")
_EPOCH_1900 = dt.datetime(1899, 12, 30)  # serial 60 is Lotus's 29 Feb 1900: see _date
_EPOCH_1904 = dt.datetime(1904, 1, 1)


@dataclass(frozen=True)
class Workbook:
    """What the sheets need: shared strings, which styles show dates, the date system."""

    strings: list[str]
    date_styles: frozenset[int]
    epoch: dt.datetime


def sheets(archive: zipfile.ZipFile) -> Iterator[tuple[str, Iterator[dict[int, str]]]]:
    """Each worksheet's name and its rows, a row being its non-empty cells' texts by
    column (0-based). Raises ``Unreadable("corrupt_document")`` for a broken workbook."""
    workbook_path = _office_document(archive)
    root = _part(archive, workbook_path)
    if root.tag != f"{{{MAIN}}}workbook":
        raise Unreadable("corrupt_document", "xlsx:not_a_workbook")
    rels = _relations(archive, workbook_path)
    book = Workbook(
        strings=_shared_strings(archive, rels),
        date_styles=_date_styles(archive, rels),
        epoch=_EPOCH_1904 if _is_1904(root) else _EPOCH_1900,
    )
    listed = [
        (sheet.get("name", ""), target[1])
        for sheet in root.iter(f"{{{MAIN}}}sheet")
        if (target := rels.get(sheet.get(f"{{{DOC_REL}}}id", ""), ("", "")))[0].endswith(
            "/worksheet"
        )
    ]
    _judge_reads(archive, [path for _, path in listed])
    for name, path in listed:
        yield name, _rows(archive, path, book)


def _judge_reads(archive: zipfile.ZipFile, paths: list[str]) -> None:
    """Refuse sheets that would parse more than ``MAX_UNPACKED_BYTES`` of XML in all: the
    zip's budget counts each member once, but a thousand sheets may name one part (a
    thousandfold parse of a small file)."""
    sizes = {info.filename: info.file_size for info in archive.infolist()}
    if sum(sizes.get(path, 0) for path in paths) > MAX_UNPACKED_BYTES:
        raise Unreadable("too_large", "xlsx:unpacked_size")


def _part(archive: zipfile.ZipFile, name: str) -> ET.Element:
    data = read_member(archive, name, "xlsx")
    if data is None:
        raise Unreadable("corrupt_document", "xlsx:missing_part")
    return parse_xml(data, "xlsx")


def _office_document(archive: zipfile.ZipFile) -> str:
    for kind, target in _relations(archive, "").values():
        if kind.endswith("/officeDocument"):
            return target
    return "xl/workbook.xml"


def _relations(archive: zipfile.ZipFile, source: str) -> dict[str, tuple[str, str]]:
    """A part's relationships: id to (type, target path in the zip)."""
    folder, name = posixpath.split(source)
    data = read_member(archive, posixpath.join(folder, "_rels", f"{name}.rels"), "xlsx")
    if data is None:
        return {}
    found = {}
    for rel in parse_xml(data, "xlsx").iter(f"{{{RELS}}}Relationship"):
        target = rel.get("Target", "")
        path = target[1:] if target.startswith("/") else posixpath.join(folder, target)
        found[rel.get("Id", "")] = (rel.get("Type", ""), posixpath.normpath(path))
    return found


def _is_1904(workbook: ET.Element) -> bool:
    props = workbook.find(f"{{{MAIN}}}workbookPr")
    return props is not None and props.get("date1904", "false").lower() in ("1", "true")


def _target(rels: dict[str, tuple[str, str]], kind: str) -> str | None:
    return next((path for rel, path in rels.values() if rel.endswith(f"/{kind}")), None)


def _shared_strings(archive: zipfile.ZipFile, rels: dict[str, tuple[str, str]]) -> list[str]:
    path = _target(rels, "sharedStrings")
    if path is None or path not in archive.namelist():
        return []
    return [_string(item) for item in _part(archive, path).iter(f"{{{MAIN}}}si")]


def _string(item: ET.Element) -> str:
    """A rich or plain string's text, without its phonetic guides (``rPh``)."""
    texts = []
    for kid in item:
        if kid.tag == f"{{{MAIN}}}t":
            texts.append(kid.text or "")
        elif kid.tag == f"{{{MAIN}}}r":
            texts.extend(t.text or "" for t in kid.iter(f"{{{MAIN}}}t"))
    return "".join(texts)


def _date_styles(archive: zipfile.ZipFile, rels: dict[str, tuple[str, str]]) -> frozenset[int]:
    """The indexes of the cell styles (``cellXfs``) whose number format shows a date."""
    path = _target(rels, "styles")
    root = optional_xml(optional_member(archive, path, "xlsx"), "xlsx")
    if root is None:  # none, or damaged: numbers show as numbers
        return frozenset()
    custom = {
        fmt.get("numFmtId", ""): fmt.get("formatCode", "") for fmt in root.iter(f"{{{MAIN}}}numFmt")
    }
    xfs = root.find(f"{{{MAIN}}}cellXfs")
    styles = [] if xfs is None else xfs.findall(f"{{{MAIN}}}xf")
    return frozenset(i for i, xf in enumerate(styles) if _shows_date(xf.get("numFmtId"), custom))


def _shows_date(format_id: str | None, custom: dict[str, str]) -> bool:
    if format_id is None or not format_id.isdecimal() or len(format_id) > 9:
        return False
    if format_id in custom:
        return bool(_DATE_CODES.search(_QUOTED.sub("", custom[format_id])))
    return int(format_id) in BUILTIN_DATES


def _rows(archive: zipfile.ZipFile, path: str, book: Workbook) -> Iterator[dict[int, str]]:
    """A sheet's rows as they stream from its XML, each row's element freed once read."""
    data = read_member(archive, path, "xlsx")
    if data is None:
        raise Unreadable("corrupt_document", "xlsx:missing_part")
    try:
        for _, element in iterparse(io.BytesIO(data), events=("end",)):
            if element.tag == f"{{{MAIN}}}row":
                yield _cells(element, book)
                element.clear()
    except DefusedXmlException:
        raise Unreadable("too_large", "xlsx:xml_entities") from None
    except (ET.ParseError, LookupError):  # LookupError: a declared encoding no codec has
        raise Unreadable("corrupt_document", "xlsx:malformed_xml") from None


def _cells(row: ET.Element, book: Workbook) -> dict[int, str]:
    cells: dict[int, str] = {}
    column = -1
    for cell in row.iterfind(f"{{{MAIN}}}c"):
        column = _column(cell.get("r"), column + 1)
        text = _value(cell, book)
        if text:
            cells[column] = text
    return cells


def _column(ref: str | None, next_column: int) -> int:
    """The 0-based column of a cell reference (``"AB12"``); the next one when it has none."""
    match = _COLUMN.match(ref or "")
    if match is None:
        return next_column
    number = 0
    for letter in match.group():
        number = number * 26 + ord(letter) - 64
    return number - 1


def _value(cell: ET.Element, book: Workbook) -> str:
    kind = cell.get("t", "n")
    if kind == "inlineStr":
        inline = cell.find(f"{{{MAIN}}}is")
        return "" if inline is None else _string(inline)
    raw = cell.findtext(f"{{{MAIN}}}v") or ""
    if kind == "s":
        index = int(raw) if raw.isdecimal() and len(raw) < 10 else -1
        return book.strings[index] if 0 <= index < len(book.strings) else ""
    if kind == "b":
        return "TRUE" if raw == "1" else "FALSE"
    if kind != "n" or not raw:
        return raw  # str (a formula's text), e (an error such as #DIV/0!), d (ISO date)
    style = cell.get("s", "0")
    if style.isdecimal() and len(style) < 10 and int(style) in book.date_styles:
        return _date(raw, book.epoch) or raw
    return _number(raw)


def _number(raw: str) -> str:
    """A number as Excel shows it by default: integers whole, 15 significant digits."""
    if raw.lstrip("-").isdecimal():
        return raw
    try:
        return format(float(raw), ".15g")
    except ValueError:
        return raw


def _date(raw: str, epoch: dt.datetime) -> str | None:
    try:
        serial = float(raw)
        if epoch == _EPOCH_1900 and 0 < serial < 60:
            serial += 1  # Excel counts a 29 Feb 1900 that never was: before it, a day less
        moment = epoch + dt.timedelta(days=serial)
    except (ValueError, OverflowError):
        return None
    moment = (moment + dt.timedelta(microseconds=500_000)).replace(microsecond=0)
    if 0 <= serial < 1:
        return moment.time().isoformat()  # a time of day without a date
    return moment.date().isoformat() if moment.time() == dt.time() else moment.isoformat()
