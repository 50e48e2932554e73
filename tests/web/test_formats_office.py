"""DOCX and ODT as Markdown (specialists.formats.docx), on LibreOffice's files and hostile ones."""

from __future__ import annotations

import hashlib
import io
import zipfile

import pytest

from specialists.extract import document_markdown, extract_article
from specialists.formats import Limits, Unreadable
from specialists.formats._zip import MAX_MEMBERS, MAX_RATIO, MAX_UNPACKED_BYTES, RATIO_FLOOR_BYTES
from specialists.formats.docx import read_docx, read_odt
from tests.web.documents_support import BILLION_LAUGHS, declare_size, fixture, rezip

REPORT = """\
# Quarterly Field Report

The survey team walked the northern ridge twice this quarter and logged every marker.

## Findings

Three of the eleven cairns had fallen. See the [ridge survey page](https://example.org/survey/ridge) for the map.

- Cairn 4 rebuilt in October
- Cairn 7 needs a new base stone
- Cairn 9 moved by a landslide

## Next steps

1. Order base stones from the quarry
2. Schedule the spring walk

### Budget

| Item | Cost |
| --- | --- |
| Base stones | 420 |
| Transport | 95 |

Questions go to the survey office."""  # noqa: E501

MINUTES_BODY = """\
## Decisions

1. Dredge the north berth before winter
   
   - Quote from Keel & Sons
   - Quote from the council yard
2. Raise mooring fees by 4%

## Open questions

- Who owns the [old slipway](https://harbour.example/slipway)?
- Can the fuel dock open on Sundays?

| Motion | For | Against |
| --- | --- | --- |
| Dredging | 7 | 1 |
| Fees \\| moorings | 5 | 3 |

Next meeting:
12 October."""  # noqa: W293

READERS = {"docx": read_docx, "odt": read_odt}


@pytest.mark.parametrize("kind", ["docx", "odt"])
def test_a_document_reads_as_markdown_with_headings_lists_tables_and_links(kind: str) -> None:
    document = READERS[kind](fixture(f"report.{kind}"), Limits())
    assert document.markdown == REPORT
    assert (document.title, document.author, document.cut) == (
        "Quarterly Field Report",
        "Ada Marsh",
        False,
    )


@pytest.mark.parametrize("kind", ["docx", "odt"])
def test_core_properties_give_title_author_date_and_language(kind: str) -> None:
    document = READERS[kind](fixture(f"minutes.{kind}"), Limits())
    assert MINUTES_BODY in document.markdown
    assert (document.title, document.author, document.published, document.lang) == (
        "Harbour Board Minutes",
        "Tomas Reyes",
        "2026-09-14T16:40:00Z",
        "en-GB",
    )


def test_footnotes_are_kept_after_the_text() -> None:
    assert read_odt(fixture("minutes.odt"), Limits()).markdown.endswith(
        "## Notes\n\n1. Two members joined by telephone."
    )
    assert (
        "1. Two members joined by telephone."
        in read_docx(fixture("minutes.docx"), Limits()).markdown
    )


def test_the_title_falls_back_to_the_first_heading() -> None:
    data = rezip(fixture("report.docx"), {"docProps/core.xml": _core(title="")})
    assert read_docx(data, Limits()).title == "Quarterly Field Report"


@pytest.mark.parametrize("kind", ["docx", "odt"])
def test_max_chars_is_met_at_n_and_cuts_at_n_minus_one(kind: str) -> None:
    data = fixture(f"report.{kind}")
    whole = len(REPORT)
    assert READERS[kind](data, Limits(max_chars=whole)) == READERS[kind](data, Limits())
    cut = READERS[kind](data, Limits(max_chars=whole - 1))
    assert cut.cut
    assert cut.markdown == REPORT[: whole - 1]  # the last line, one paragraph, cut short


def test_a_zip_bomb_is_refused_from_its_directory_before_anything_inflates() -> None:
    zeros = b"<w:t>" + b"0" * (2 * RATIO_FLOOR_BYTES) + b"</w:t>"
    bomb = rezip(fixture("report.docx"), {"word/media/fill.xml": zeros})
    with pytest.raises(Unreadable) as caught:
        read_docx(bomb, Limits())
    assert (caught.value.code, caught.value.detail) == ("too_large", "docx:zip_ratio")


def test_a_directory_declaring_more_than_the_budget_is_too_large() -> None:
    data = declare_size(fixture("report.docx"), "word/styles.xml", MAX_UNPACKED_BYTES + 1)
    with pytest.raises(Unreadable) as caught:
        read_docx(data, Limits())
    assert caught.value.code == "too_large"


def test_a_member_that_inflates_past_its_declared_size_is_corrupt() -> None:
    # zipfile stops at the declared size and the CRC then fails: the lie costs nothing.
    data = declare_size(fixture("report.docx"), "word/document.xml", 100)
    with pytest.raises(Unreadable) as caught:
        read_docx(data, Limits())
    assert caught.value.code == "corrupt_document"


@pytest.mark.parametrize("kind", ["docx", "odt"])
def test_a_billion_laughs_part_is_too_large(kind: str) -> None:
    part = "word/document.xml" if kind == "docx" else "content.xml"
    data = rezip(fixture(f"report.{kind}"), {part: BILLION_LAUGHS})
    with pytest.raises(Unreadable) as caught:
        READERS[kind](data, Limits())
    assert caught.value.code == "too_large"


@pytest.mark.parametrize("kind", ["docx", "odt"])
def test_an_external_entity_in_a_part_is_unsupported(kind: str) -> None:
    part = "docProps/core.xml" if kind == "docx" else "meta.xml"
    hostile = b'<!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]><x>&e;</x>'
    with pytest.raises(Unreadable) as caught:
        READERS[kind](rezip(fixture(f"report.{kind}"), {part: hostile}), Limits())
    assert caught.value.code == "unsupported_content"


@pytest.mark.parametrize("kind", ["docx", "odt"])
@pytest.mark.parametrize("damage", ["truncated", "not_a_zip", "empty", "broken_xml", "no_body"])
def test_damaged_documents_are_corrupt_not_a_crash(kind: str, damage: str) -> None:
    data = fixture(f"report.{kind}")
    body = "word/document.xml" if kind == "docx" else "content.xml"
    damaged = {
        "truncated": data[: len(data) // 2],
        "not_a_zip": b"%PDF-1.7 this is no zip",
        "empty": b"",
        "broken_xml": rezip(data, {body: b"<w:document><w:body><w:p>"}),
        "no_body": _without(data, body),
    }[damage]
    with pytest.raises(Unreadable) as caught:
        READERS[kind](damaged, Limits())
    assert caught.value.code == "corrupt_document"


def test_odt_deep_nesting_is_kept_as_flat_text() -> None:
    deep = "<text:span>" * 5000 + "deep words" + "</text:span>" * 5000
    content = _odt_content(f"<text:p>{deep}</text:p>")
    document = read_odt(rezip(fixture("report.odt"), {"content.xml": content}), Limits())
    assert document.markdown == "deep words"


def test_odt_repeated_blank_cells_are_bounded() -> None:
    cells = '<table:table-cell table:number-columns-repeated="1000000000"/>'
    row = f"<table:table-row><table:table-cell><text:p>a</text:p></table:table-cell>{cells}"
    row += "<table:table-cell><text:p>b</text:p></table:table-cell></table:table-row>"
    content = _odt_content(f"<table:table>{row}{row}</table:table>")
    document = read_odt(rezip(fixture("report.odt"), {"content.xml": content}), Limits())
    assert document.markdown.splitlines()[0] == "| " + " | ".join(["a", *[""] * 100, "b"]) + " |"


def _odt_content(body: str) -> bytes:
    return (
        '<office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0"'
        ' xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"'
        ' xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0">'
        f"<office:body><office:text>{body}</office:text></office:body>"
        "</office:document-content>"
    ).encode()


def _core(*, title: str) -> bytes:
    return (
        '<cp:coreProperties xmlns:cp="http://schemas.openxmlformats.org/package/2006/'
        'metadata/core-properties" xmlns:dc="http://purl.org/dc/elements/1.1/">'
        f"<dc:title>{title}</dc:title></cp:coreProperties>"
    ).encode()


def _without(data: bytes, name: str) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            if info.filename != name:
                target.writestr(info, source.read(info.filename))
    return out.getvalue()


def test_docx_nesting_past_the_stack_is_a_clear_error_not_a_crash() -> None:
    ns = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
    deep = "<w:sdt><w:sdtContent>" * 3000 + "<w:p><w:r><w:t>deep</w:t></w:r></w:p>"
    deep += "</w:sdtContent></w:sdt>" * 3000
    body = f"<w:document {ns}><w:body>{deep}</w:body></w:document>".encode()
    with pytest.raises(Unreadable) as caught:
        read_docx(rezip(fixture("report.docx"), {"word/document.xml": body}), Limits())
    assert caught.value.code == "corrupt_document"


def test_an_entity_bomb_in_a_part_not_named_xml_is_refused_too() -> None:
    # The relationships name the main document: a hostile file names one without .xml.
    data = fixture("report.docx")
    with zipfile.ZipFile(io.BytesIO(data)) as source:
        rels = source.read("_rels/.rels").replace(b"word/document.xml", b"word/body.bin")
    hostile = rezip(data, {"_rels/.rels": rels, "word/body.bin": BILLION_LAUGHS})
    with pytest.raises(Unreadable) as caught:
        read_docx(hostile, Limits())
    assert caught.value.code == "too_large"


def test_a_document_body_is_rendered_whole_where_an_article_would_be_pruned() -> None:
    links = "".join(f'<li><a href="/part/{n}">Part {n}</a></li>' for n in range(1, 6))
    html = f"<h1>Contents</h1><ul>{links}</ul><p>Short.</p>"
    assert (
        document_markdown(html)
        == "# Contents\n\n- Part 1\n- Part 2\n- Part 3\n- Part 4\n- Part 5\n\nShort."
    )
    resolved = document_markdown(html, url="https://docs.example/book/")
    assert "- [Part 1](https://docs.example/part/1)" in resolved
    assert "Part 1" not in extract_article(html).markdown  # what a page's extraction drops


def test_a_member_at_the_ratio_bound_is_read_and_one_byte_past_it_refused() -> None:
    # Incompressible bytes, so the declared size sets the ratio exactly (zipfile then reads
    # the bytes there are: the directory's budget is what is judged).
    noise = b"".join(hashlib.sha256(str(n).encode()).digest() for n in range(250))
    data = rezip(fixture("report.docx"), {"word/noise.bin": noise})
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        packed = archive.getinfo("word/noise.bin").compress_size
    assert MAX_RATIO * packed > RATIO_FLOOR_BYTES
    at_bound = declare_size(data, "word/noise.bin", MAX_RATIO * packed)
    assert read_docx(at_bound, Limits()).markdown == REPORT
    with pytest.raises(Unreadable) as refused:
        read_docx(declare_size(data, "word/noise.bin", MAX_RATIO * packed + 1), Limits())
    assert (refused.value.code, refused.value.detail) == ("too_large", "docx:zip_ratio")


@pytest.mark.slow  # two zips of 10,000 members, each screened
def test_max_members_is_read_at_n_and_refused_at_n_plus_one() -> None:
    data = fixture("report.docx")
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        present = len(archive.namelist())
    fill = {f"f/{n}": b"" for n in range(MAX_MEMBERS - present)}
    assert read_docx(rezip(data, fill), Limits()).markdown == REPORT
    with pytest.raises(Unreadable) as caught:
        read_docx(rezip(data, {**fill, "f/last": b""}), Limits())
    assert (caught.value.code, caught.value.detail) == ("too_large", "docx:zip_members")


def test_odt_reference_text_is_kept_and_tracked_deletions_are_not() -> None:
    body = (
        '<text:p>See <text:bookmark-ref text:ref-name="two">section two</text:bookmark-ref>.'
        "</text:p><text:tracked-changes><text:changed-region><text:deletion>"
        "<text:p>deleted words</text:p></text:deletion></text:changed-region>"
        "</text:tracked-changes>"
    )
    content = _odt_content(body)
    document = read_odt(rezip(fixture("report.odt"), {"content.xml": content}), Limits())
    assert document.markdown == "See section two."


RELATIVE = {
    "docx": ("word/_rels/document.xml.rels", b'Target="survey/ridge"'),
    "odt": ("content.xml", b'xlink:href="survey/ridge"'),
}


def _relative_link(kind: str, target: bytes) -> bytes:
    """The report fixture with its survey link made relative (``target``)."""
    member, spelled = RELATIVE[kind]
    data = fixture(f"report.{kind}")
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        part = archive.read(member)
    absolute = spelled.replace(b"survey/ridge", b"https://example.org/survey/ridge")
    return rezip(data, {member: part.replace(absolute, spelled.replace(b"survey/ridge", target))})


@pytest.mark.parametrize("kind", ["docx", "odt"])
def test_a_relative_link_resolves_against_the_base_url_and_is_dropped_without_one(
    kind: str,
) -> None:
    data = _relative_link(kind, b"survey/ridge")
    base = Limits(base_url="https://files.example/reports/q3.docx")
    linked = "[ridge survey page](https://files.example/reports/survey/ridge)"
    assert linked in READERS[kind](data, base).markdown
    assert "See the ridge survey page for" in READERS[kind](data, Limits()).markdown


@pytest.mark.parametrize("kind", ["docx", "odt"])
def test_a_link_that_is_not_http_is_dropped_even_with_a_base_url(kind: str) -> None:
    data = _relative_link(kind, b"javascript:alert(1)")
    markdown = READERS[kind](data, Limits(base_url="https://files.example/q3")).markdown
    assert "See the ridge survey page for" in markdown
    assert "javascript" not in markdown


@pytest.mark.parametrize(
    ("kind", "part"),
    [("docx", "docProps/core.xml"), ("odt", "meta.xml"), ("odt", "styles.xml")],
)
def test_a_damaged_optional_part_is_read_without_it(kind: str, part: str) -> None:
    """Properties (TITLE, AUTHOR) and an ODT's named styles (which lists number) are not the
    text: a damaged one is left out and the document reads (the title from its heading)."""
    data = fixture(f"report.{kind}")
    document = READERS[kind](rezip(data, {part: b"<office:document-meta><"}), Limits())
    whole = READERS[kind](data, Limits())
    assert document.markdown.split("\n")[0] == whole.markdown.split("\n")[0]
    assert len(document.markdown) >= len(whole.markdown) * 0.9
    if part != "styles.xml":
        assert document.author is None


@pytest.mark.parametrize("kind", ["docx", "odt"])
def test_an_entity_bomb_in_an_optional_part_is_still_refused(kind: str) -> None:
    part = "docProps/core.xml" if kind == "docx" else "meta.xml"
    with pytest.raises(Unreadable) as caught:
        READERS[kind](rezip(fixture(f"report.{kind}"), {part: BILLION_LAUGHS}), Limits())
    assert caught.value.code == "too_large"
