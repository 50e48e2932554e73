"""A document's own text never becomes a link in its Markdown (issue 24 review): a cell, a feed
summary or title holding ``[x](javascript:...)`` or ``<javascript:...>`` shows as text; only a
reader's own links (http(s) URLs it checked) are links."""

from __future__ import annotations

import io
import zipfile
from html import escape

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specialists.formats import Limits, Unreadable, _xlsx
from specialists.formats._markdown import cell, inert, label
from specialists.formats.docx import read_odt
from specialists.formats.feed import read_feed
from specialists.formats.pdf import read_pdf
from specialists.formats.sheet import read_csv, read_xlsx
from tests.web.documents_support import fixture, rezip
from tests.web.pdf_support import _pdf

SCRIPT_LINK = "[click](javascript:alert(1))"
AUTOLINK = "<javascript:alert(1)>"


def test_a_csv_cell_holding_link_markup_shows_it_as_text() -> None:
    data = f"name,note\nx,{SCRIPT_LINK}\ny,{AUTOLINK}\n".encode()
    assert read_csv(data, Limits()).markdown == (
        "| name | note |\n| --- | --- |\n"
        "| x | \\[click\\](javascript:alert(1)) |\n"
        "| y | \\<javascript:alert(1)> |"
    )


def test_a_feed_summary_or_unlinked_title_holding_link_markup_shows_it_as_text() -> None:
    data = (
        '<rss version="2.0"><channel><title>F</title>'
        "<item><title>&amp;lt;javascript:alert(1)&amp;gt;</title>"
        f"<description>{SCRIPT_LINK} and &lt;b&gt;bold&lt;/b&gt;</description></item>"
        "</channel></rss>"
    ).encode()
    assert read_feed(data, Limits()).markdown == (
        "# F\n\n- \\<javascript:alert(1)>\n  \\[click\\](javascript:alert(1)) and bold"
    )


def test_a_link_label_ending_in_a_backslash_does_not_eat_its_closing_bracket() -> None:
    data = (
        b'<rss version="2.0"><channel><item><title>dir\\</title>'
        b"<link>https://a.example/x</link></item></channel></rss>"
    )
    assert read_feed(data, Limits()).markdown == "- [dir\\\\](https://a.example/x)"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("[x](y)", "\\[x\\](y)"),
        ("\\[x](y)", "\\\\\\[x\\](y)"),  # the text's backslash doubled: ours still escapes
        ("a < b", "a \\< b"),
        ("plain, 1.5 (a)", "plain, 1.5 (a)"),
    ],
)
def test_inert_backslashes_link_openers_and_any_backslash_before_them(
    text: str, shown: str
) -> None:
    assert inert(text) == shown


def _unescaped(text: str, char: str) -> bool:
    """Whether ``char`` occurs in ``text`` after an even run of backslashes (active)."""
    for at, found in enumerate(text):
        if found != char:
            continue
        run = len(text[:at]) - len(text[:at].rstrip("\\"))
        if run % 2 == 0:
            return True
    return False


@given(st.text(alphabet=st.sampled_from("[]<\\|ab \n(")))
def test_no_cell_or_label_holds_an_active_bracket_or_angle(text: str) -> None:
    """Active: after an even run of backslashes. No line ends in an odd run either (it would
    escape the bracket that closes a label, or the ``<br>`` after a cell's line)."""
    made = label(text)
    for shown in (*cell(text).split("<br>"), made):
        assert not any(_unescaped(shown, c) for c in "[]<")
        assert (len(shown) - len(shown.rstrip("\\"))) % 2 == 0


def _one_sheet_listed(times: int) -> bytes:
    """The ledger workbook listing its first sheet ``times`` times (one part, many sheets)."""
    sheet = '<sheet name="S" sheetId="1" r:id="rId2"/>'
    workbook = fixture("ledger.xlsx")
    with zipfile.ZipFile(io.BytesIO(workbook)) as archive:
        xml = archive.read("xl/workbook.xml").decode()
    start, end = xml.index("<sheets>") + len("<sheets>"), xml.index("</sheets>")
    return rezip(workbook, {"xl/workbook.xml": (xml[:start] + sheet * times + xml[end:]).encode()})


@pytest.mark.parametrize(("slack", "readable"), [(0, True), (-1, False)])
def test_sheets_naming_one_part_many_times_are_held_to_the_unpacked_budget(
    slack: int, readable: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The zip's budget counts each member once; the parses of its sheets count each time."""
    data = _one_sheet_listed(50)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        size = archive.getinfo("xl/worksheets/sheet1.xml").file_size
    monkeypatch.setattr(_xlsx, "MAX_UNPACKED_BYTES", 50 * size + slack)
    if readable:
        assert read_xlsx(data, Limits()).markdown.count("## S") == 50
        return
    with pytest.raises(Unreadable) as caught:
        read_xlsx(data, Limits())
    assert (caught.value.code, caught.value.detail) == ("too_large", "xlsx:unpacked_size")


def _text_pdf(*lines: bytes) -> bytes:
    """A one-page PDF showing ``lines`` in Helvetica, the first at 20 pt, the rest at 10."""
    shown = b"BT /F1 20 Tf 72 720 Td (%b) Tj ET" % lines[0]
    for number, line in enumerate(lines[1:], 1):
        shown += b" BT /F1 10 Tf 72 %d Td (%b) Tj ET" % (700 - 14 * number, line)
    return _pdf(
        b"<</Type/Catalog/Pages 2 0 R>>",
        b"<</Type/Pages/Kids[3 0 R]/Count 1>>",
        b"<</Type/Page/Parent 2 0 R/MediaBox[0 0 612 792]/Contents 4 0 R"
        b"/Resources<</Font<</F1 5 0 R>>>>>>",
        b"<</Length %d>>stream\n%b\nendstream" % (len(shown), shown),
        b"<</Type/Font/Subtype/Type1/BaseFont/Helvetica>>",
    )


def test_a_pdf_s_text_holding_link_markup_shows_it_as_text_and_its_title_plain() -> None:
    data = _text_pdf(
        b"Results [1]", b"see \\[click\\]\\(javascript:alert\\(1\\)\\) or <javascript:x>"
    )
    document = read_pdf(data, Limits())
    assert document.markdown == (
        "# Results \\[1\\]\n\nsee \\[click\\](javascript:alert(1)) or \\<javascript:x>"
    )
    assert document.title == "Results [1]"


@pytest.mark.parametrize(
    "href", ["javascript:alert(1)", "JaVaScRiPt:alert(1)", "data:text/html,<b>x</b>", "vbscript:x"]
)
def test_an_odt_link_to_a_script_or_data_url_is_its_text_only(href: str) -> None:
    content = (
        '<office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0"'
        ' xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"'
        ' xmlns:xlink="http://www.w3.org/1999/xlink"><office:body><office:text>'
        f'<text:p><text:a xlink:href="{escape(href)}">click</text:a> and'
        ' <text:a xlink:href="https://ok.example/">ok</text:a></text:p>'
        "</office:text></office:body></office:document-content>"
    ).encode()
    document = read_odt(rezip(fixture("report.odt"), {"content.xml": content}), Limits())
    assert document.markdown == "click and [ok](https://ok.example/)"
