"""XLSX and CSV as Markdown tables (specialists.formats.sheet), on real and hostile files."""

from __future__ import annotations

import pytest

from specialists.formats import Limits, Unreadable, unreadable_sheets
from specialists.formats._markdown import cell
from specialists.formats._zip import RATIO_FLOOR_BYTES
from specialists.formats.sheet import MAX_COLUMNS, read_csv, read_xlsx, sniff_delimiter
from tests.web.documents_support import BILLION_LAUGHS, declare_size, fixture, rezip

LEDGER = """\
## Orders

| Date | Item | Qty | Price | Total |
| --- | --- | --- | --- | --- |
| 2026-10-05 | Base stone \\| granite | 3 | 140.5 | 421.5 |
| 2026-10-19 | Transport<br>two trips | 2 | 47.5 | 95 |

## Notes

| Topic | Note |
| --- | --- |
| Quarry | Open weekdays only |"""

SHEET = "xl/worksheets/sheet1.xml"
_NS = 'xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"'


def test_a_workbook_reads_as_one_table_per_sheet_under_its_name() -> None:
    document = read_xlsx(fixture("ledger.xlsx"), Limits())
    assert document.markdown == LEDGER
    assert (document.title, document.author, document.published, document.cut) == (
        "Stone Ledger",
        "Ada Marsh",
        "2026-10-03T09:15:00Z",
        False,
    )


def test_a_csv_delimiter_is_sniffed_and_its_cells_escaped() -> None:
    document = read_csv(fixture("ledger.csv"), Limits())
    assert document.markdown == (
        "| Date | Item | Qty | Price |\n"
        "| --- | --- | --- | --- |\n"
        "| 2026-10-05 | Base stone \\| granite | 3 | 140,5 |\n"
        "| 2026-10-19 | Transport<br>two trips | 2 | 47,5 |"
    )


@pytest.mark.parametrize(
    ("data", "first"),
    [
        ("Ort,Menge\nKöln,3\n".encode("cp1252"), "Köln"),  # not UTF-8: windows-1252
        ("Ort,Menge\nKöln,3\n".encode(), "Köln"),
        (b"\xef\xbb\xbfOrt,Menge\nK\xc3\xb6ln,3\n", "Köln"),  # BOM, not a cell
        ("Ort,Menge\nKöln,3\n".encode("utf-16"), "Köln"),
    ],
)
def test_csv_bytes_are_decoded_by_bom_then_utf8_then_windows_1252(data: bytes, first: str) -> None:
    lines = read_csv(data, Limits()).markdown.splitlines()
    assert lines[0] == "| Ort | Menge |"
    assert lines[2] == f"| {first} | 3 |"


def test_a_committed_windows_1252_csv_reads() -> None:
    assert "| München | 5 |" in read_csv(fixture("cp1252.csv"), Limits()).markdown


def _csv(rows: int) -> bytes:
    return ("a,b\n" + "".join(f"{n},{n * 2}\n" for n in range(1, rows))).encode()


@pytest.mark.parametrize("reader", ["csv", "xlsx"])
def test_max_rows_shows_n_rows_and_says_how_many_more_were_left_out(reader: str) -> None:
    limits = Limits(max_rows=3)
    if reader == "csv":
        exact, over = read_csv(_csv(3), limits), read_csv(_csv(4), limits)
    else:  # the first sheet only, its table and the line under it
        exact, over = read_xlsx(_xlsx(3), limits), read_xlsx(_xlsx(4), limits)
    exact_table = exact.markdown.split("\n\n## Notes")[0].removeprefix("## Orders\n\n")
    over_blocks = over.markdown.split("\n\n## Notes")[0].removeprefix("## Orders\n\n")
    assert (exact.cut, exact_table) == (False, "| a | b |\n| --- | --- |\n| 1 | 2 |\n| 2 | 4 |")
    assert over.cut
    assert over_blocks == f"{exact_table}\n\n_(1 more row left out: max_rows 3)_"


def test_max_chars_is_met_at_n_and_cut_at_n_minus_one_on_a_whole_row() -> None:
    whole = read_csv(fixture("ledger.csv"), Limits()).markdown
    assert read_csv(fixture("ledger.csv"), Limits(max_chars=len(whole))).cut is False
    cut = read_csv(fixture("ledger.csv"), Limits(max_chars=len(whole) - 1))
    assert cut.cut
    assert cut.markdown == whole.rsplit("\n", 1)[0]


def test_columns_past_the_bound_are_left_out_and_said() -> None:
    wide = ",".join(str(n) for n in range(MAX_COLUMNS + 5)) + "\n"
    exact = ",".join(str(n) for n in range(MAX_COLUMNS)) + "\n"
    assert read_csv(exact.encode() * 2, Limits()).cut is False
    document = read_csv(wide.encode() * 2, Limits())
    assert document.cut
    assert document.markdown.splitlines()[0].count(" | ") == MAX_COLUMNS - 1
    assert document.markdown.endswith(f"_(columns past {MAX_COLUMNS} left out)_")


@pytest.mark.parametrize(
    ("text", "escaped"),
    [
        ("a|b", "a\\|b"),
        ("a\\|b", "a\\\\\\|b"),  # the backslash is escaped too, so the pipe stays escaped
        ("line one\r\nline two\nthree", "line one<br>line two<br>three"),
        ("  spaced \t out  ", "spaced out"),
        ("C:\\path", "C:\\path"),
    ],
)
def test_cells_are_escaped_for_markdown_tables(text: str, escaped: str) -> None:
    assert cell(text) == escaped


def test_a_huge_csv_is_read_in_one_pass_and_bounded() -> None:
    data = _csv(200_000)  # 2.5 MB
    document = read_csv(data, Limits(max_rows=10))
    assert document.markdown.endswith("_(199990 more rows left out: max_rows 10)_")


def test_an_open_quote_running_past_the_field_limit_is_corrupt() -> None:
    data = b'a,b\n1,"' + b"x" * 200_000 + b"\n"
    with pytest.raises(Unreadable) as caught:
        read_csv(data, Limits())
    assert caught.value.code == "corrupt_document"


def test_a_row_numbered_far_down_costs_nothing_for_the_rows_between() -> None:
    far = '<row r="999999999"><c r="A999999999" t="inlineStr"><is><t>far</t></is></c></row>'
    document = read_xlsx(_xlsx(2, extra=far), Limits())
    assert document.markdown.startswith(
        "## Orders\n\n| a | b |\n| --- | --- |\n| 1 | 2 |\n| far |  |"
    )


def test_a_declared_dimension_of_every_column_is_not_trusted() -> None:
    data = _xlsx(2, dimension="A1:XFD1048576")
    assert read_xlsx(data, Limits()).markdown.startswith(
        "## Orders\n\n| a | b |\n| --- | --- |\n| 1 | 2 |\n\n"
    )


def test_every_kind_of_cell_reads_as_excel_shows_it() -> None:
    # Style 1 of the ledger's workbook is its yyyy-mm-dd date format.
    cells = (
        '<c r="A2" t="b"><v>1</v></c><c r="B2" t="e"><v>#DIV/0!</v></c>'
        '<c r="C2" t="str"><f>A1</f><v>text of a formula</v></c><c r="D2" s="1"><v>46300.5</v></c>'
        '<c r="E2"><v>0.30000000000000004</v></c><c r="F2" t="s"><v>5</v></c>'
        '<c r="G2" t="s"><v>99999</v></c><c r="H2" s="1"><v>1</v></c>'
    )
    extra = f'<row r="2">{cells}</row>'
    document = read_xlsx(_xlsx(1, extra=extra), Limits())
    row = document.markdown.split("\n")[4]
    assert row == (
        "| TRUE | #DIV/0! | text of a formula | 2026-10-05T12:00:00 | 0.3 | "
        "Base stone \\| granite |  | 1900-01-01 |"
    )


def test_a_cell_past_the_last_shown_column_is_said_to_be_left_out() -> None:
    far = '<row r="2"><c r="XFD2" t="inlineStr"><is><t>far right</t></is></c></row>'
    document = read_xlsx(_xlsx(1, extra=far), Limits())
    assert document.cut
    assert "far right" not in document.markdown
    assert f"_(columns past {MAX_COLUMNS} left out)_" in document.markdown


def test_an_xlsx_zip_bomb_is_too_large() -> None:
    fill = b"<x>" + b"0" * (2 * RATIO_FLOOR_BYTES) + b"</x>"
    with pytest.raises(Unreadable) as caught:
        read_xlsx(rezip(fixture("ledger.xlsx"), {"xl/fill.xml": fill}), Limits())
    assert caught.value.code == "too_large"


def test_an_xlsx_whose_directory_lies_about_a_sheet_is_corrupt() -> None:
    with pytest.raises(Unreadable) as caught:
        read_xlsx(declare_size(fixture("ledger.xlsx"), SHEET, 50), Limits())
    assert caught.value.code == "corrupt_document"


def test_a_billion_laughs_sheet_is_too_large() -> None:
    with pytest.raises(Unreadable) as caught:
        read_xlsx(rezip(fixture("ledger.xlsx"), {SHEET: BILLION_LAUGHS}), Limits())
    assert caught.value.code == "too_large"


BROKEN = b"<worksheet><sheetData><row><c"
SHEET_2 = "xl/worksheets/sheet2.xml"


@pytest.mark.parametrize("damage", ["truncated", "not_a_zip", "every_sheet_broken", "a_docx"])
def test_damaged_workbooks_are_corrupt_not_a_crash(damage: str) -> None:
    data = fixture("ledger.xlsx")
    damaged = {
        "truncated": data[: len(data) - 100],
        "not_a_zip": b"Date,Item\n1,2\n",
        "every_sheet_broken": rezip(data, {SHEET: BROKEN, SHEET_2: BROKEN}),
        "a_docx": fixture("report.docx"),
    }[damage]
    with pytest.raises(Unreadable) as caught:
        read_xlsx(damaged, Limits())
    assert caught.value.code == "corrupt_document"


def _xlsx(rows: int, *, extra: str = "", dimension: str | None = None) -> bytes:
    """The ledger workbook with its first sheet replaced by ``a,b`` and ``rows - 1`` rows of
    numbers (inline strings and numbers, as a hand-written sheet holds them)."""
    cells = ['<row r="1"><c r="A1" t="inlineStr"><is><t>a</t></is></c>']
    cells.append('<c r="B1" t="inlineStr"><is><t>b</t></is></c></row>')
    for n in range(1, rows):
        r = n + 1
        cells.append(f'<row r="{r}"><c r="A{r}"><v>{n}</v></c><c r="B{r}"><v>{n * 2}</v></c></row>')
    dim = f'<dimension ref="{dimension}"/>' if dimension else ""
    sheet = f"<worksheet {_NS}>{dim}<sheetData>{''.join(cells)}{extra}</sheetData></worksheet>"
    return rezip(fixture("ledger.xlsx"), {SHEET: sheet.encode()})


@pytest.mark.parametrize(
    ("text", "delimiter"),
    [
        ("a,b,c\n1,2,3\n", ","),
        ("a;b;c\n1,5;2,5;3\n", ";"),
        ("a\tb\n1\t2\n", "\t"),
        ("a|b\n1|2\n", "|"),
        ('name,quote\nx,"a;b;c;d"\ny,"e;f;g;h"\n', ","),  # quoted fields do not vote
        ("one column\nno delimiter\n", ","),
        ("", ","),
    ],
)
def test_the_delimiter_is_the_one_lines_agree_on(text: str, delimiter: str) -> None:
    assert sniff_delimiter(text) == delimiter


def test_a_csv_full_of_quote_delimiter_pairs_does_not_backtrack() -> None:
    # csv.Sniffer spent seconds here; the reader now reads it as any CSV (the last
    # field's quote is open to the end: the rows it holds are what the text says).
    document = read_csv(b',"\n' * 6000, Limits(max_rows=2))
    assert document.cut


@pytest.mark.parametrize(
    "part", [{SHEET: BROKEN}, {SHEET: b""}], ids=["malformed_xml", "empty_part"]
)
def test_a_damaged_sheet_is_marked_and_the_other_sheets_read(part: dict[str, bytes]) -> None:
    document = read_xlsx(rezip(fixture("ledger.xlsx"), part), Limits())
    whole = read_xlsx(fixture("ledger.xlsx"), Limits()).markdown
    assert (
        document.markdown
        == "## Orders\n\n<!-- sheet 1 unreadable -->\n\n" + whole[whole.index("## Notes") :]
    )
    assert unreadable_sheets(document.markdown) == [1]


@pytest.mark.parametrize(
    "part", ["docProps/core.xml", "xl/styles.xml"], ids=["core_properties", "styles"]
)
def test_a_damaged_optional_part_of_a_workbook_is_read_without_it(part: str) -> None:
    """Properties give TITLE and AUTHOR, styles which numbers are dates: without them the
    cells still read (a date as its serial number)."""
    document = read_xlsx(
        rezip(fixture("ledger.xlsx"), {part: b"<cp:coreProperties><dc:"}), Limits()
    )
    assert "| Quarry | Open weekdays only |" in document.markdown
    assert unreadable_sheets(document.markdown) == []
