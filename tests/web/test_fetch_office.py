"""fetch of office documents, sheets and feeds end to end: a real HTTPS origin serves the
committed files, the reader table picks the reader, the worker process reads them, and the
reply carries the Markdown and the document's own fields."""

from __future__ import annotations

import io
import zipfile

import pytest

from protocol import Status
from specialists.formats import Limits
from specialists.formats.docx import read_docx, read_odt
from specialists.formats.feed import read_feed
from specialists.formats.sheet import read_xlsx
from specialists.web.pages.documents import DOCX, ODT, XLSX, reader_for
from specialists.web.pages.ops_fetch import OPS
from tests.net._origin import Origin
from tests.web.conftest import DispatcherFactory
from tests.web.documents_support import BILLION_LAUGHS, fixture, rezip
from tests.web.pages_support import fetch, serve

MAX_CHARS = "50000"  # fetch.max_chars_cap: every fixture whole


@pytest.mark.parametrize(
    ("name", "content_type", "read"),
    [
        ("minutes.docx", DOCX, read_docx),
        ("minutes.odt", ODT, read_odt),
    ],
)
async def test_fetch_of_a_text_document_answers_its_markdown_and_fields(
    make_dispatcher: DispatcherFactory, origin: Origin, name: str, content_type: str, read: object
) -> None:
    url = serve(origin, f"/{name}", fixture(name), content_type)
    reply = await fetch(make_dispatcher(OPS), url, ("MAX_CHARS", MAX_CHARS))
    expected = read_docx if name.endswith("docx") else read_odt
    assert reply.status is Status.OK
    assert reply.get("DATA") == expected(fixture(name), Limits()).markdown
    assert [(k, reply.get(k)) for k in ("TITLE", "AUTHOR", "PUBLISHED", "LANG")] == [
        ("TITLE", "Harbour Board Minutes"),
        ("AUTHOR", "Tomas Reyes"),
        ("PUBLISHED", "2026-09-14T16:40:00Z"),
        ("LANG", "en-GB"),
    ]
    assert reply.get("CITE") == f'{url} "Harbour Board Minutes"'


async def test_fetch_of_a_workbook_answers_a_table_per_sheet(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    url = serve(origin, "/ledger.xlsx", fixture("ledger.xlsx"), XLSX)
    reply = await fetch(make_dispatcher(OPS), url)
    assert reply.status is Status.OK
    assert reply.get("DATA") == read_xlsx(fixture("ledger.xlsx"), Limits()).markdown
    assert reply.get("TITLE") == "Stone Ledger"


async def test_fetch_of_a_csv_reads_a_table_decoded_by_its_http_charset(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    # windows-1251 bytes are not UTF-8; the reader alone would take them for windows-1252.
    body = "Город;Число\nКазань;3\nПермь;5\n".encode("windows-1251")
    url = serve(origin, "/cities.csv", body, "text/csv; charset=windows-1251")
    reply = await fetch(make_dispatcher(OPS), url)
    assert reply.status is Status.OK
    assert reply.get("DATA") == ("| Город | Число |\n| --- | --- |\n| Казань | 3 |\n| Пермь | 5 |")


@pytest.mark.parametrize(
    ("name", "content_type"),
    [
        ("rss2.xml", "application/rss+xml"),
        ("atom.xml", "application/atom+xml"),
        ("rss1.rdf", "application/rdf+xml"),
        ("rss2.xml", "text/xml"),
        ("atom.xml", "application/xml"),
    ],
)
async def test_fetch_of_a_feed_lists_its_entries(
    make_dispatcher: DispatcherFactory, origin: Origin, name: str, content_type: str
) -> None:
    url = serve(origin, f"/{name}", fixture(name), content_type)
    reply = await fetch(make_dispatcher(OPS), url, ("MAX_CHARS", MAX_CHARS))
    document = read_feed(fixture(name), Limits())
    assert reply.status is Status.OK
    assert reply.get("DATA") == document.markdown
    assert reply.get("TITLE") == document.title


async def test_xml_that_is_no_feed_stays_unsupported(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    url = serve(origin, "/sitemap.xml", b'<?xml version="1.0"?><urlset/>', "application/xml")
    reply = await fetch(make_dispatcher(OPS), url)
    assert (reply.status, reply.get("ERROR")) == (
        Status.FAIL,
        "unsupported_content:application/xml",
    )


async def test_an_untyped_office_file_is_named_by_its_url_suffix(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    url = serve(origin, "/files/report.docx", fixture("report.docx"), "application/octet-stream")
    reply = await fetch(make_dispatcher(OPS), url)
    assert reply.status is Status.OK
    assert reply.get("TITLE") == "Quarterly Field Report"


@pytest.mark.parametrize(
    ("path", "body", "content_type", "error"),
    [
        (
            "/bomb.docx",
            rezip(fixture("report.docx"), {"word/fill.xml": b"0" * (4 * 1024 * 1024)}),
            DOCX,
            "too_large:docx:zip_ratio",
        ),
        ("/laughs.rss", BILLION_LAUGHS, "application/rss+xml", "too_large:feed:xml_entities"),
        ("/cut.xlsx", fixture("ledger.xlsx")[:3000], XLSX, "corrupt_document:xlsx:not_a_zip"),
        (
            "/xxe.xml",
            b'<!DOCTYPE rss [<!ENTITY e SYSTEM "file:///etc/passwd">]><rss>&e;</rss>',
            "text/xml",
            "unsupported_content:feed:external_entity",
        ),
        ("/open.csv", b'a,b\n1,"' + b"x" * 200_000, "text/csv", "corrupt_document:csv:malformed"),
    ],
)
async def test_a_hostile_document_fails_with_its_code(
    make_dispatcher: DispatcherFactory,
    origin: Origin,
    path: str,
    body: bytes,
    content_type: str,
    error: str,
) -> None:
    url = serve(origin, path, body, content_type)
    reply = await fetch(make_dispatcher(OPS), url)
    # The whole ERROR: the detail is a token a reply carries, not the worker's fallback.
    assert (reply.status, reply.get("ERROR"), reply.get("URL")) == (Status.FAIL, error, url)


@pytest.mark.parametrize(
    ("content_type", "body", "url", "reader"),
    [
        (DOCX, b"PK\x03\x04", "https://a.test/x", "docx"),
        (ODT, b"PK\x03\x04", "https://a.test/x", "odt"),
        (XLSX, b"PK\x03\x04", "https://a.test/x", "xlsx"),
        ("text/csv", b"a,b\n", "https://a.test/x", "csv"),
        ("text/tab-separated-values", b"a\tb\n", "https://a.test/x", "csv"),
        ("application/octet-stream", b"a\tb\n", "https://a.test/x.tsv", "csv"),
        ("application/rss+xml", b"<rss/>", "https://a.test/x", "feed"),
        ("application/atom+xml", b"<feed/>", "https://a.test/x", "feed"),
        ("text/xml", b"<rss/>", "https://a.test/x", "feed"),
        ("text/xml", b"<urlset/>", "https://a.test/x.rss", None),  # a type: no suffix asked
        ("application/octet-stream", b"PK\x03\x04", "https://a.test/r.xlsx?v=2", "xlsx"),
        ("application/octet-stream", b"PK\x03\x04", "https://a.test/r.zip", None),
        ("", b'<?xml version="1.0"?><rss version="2.0">', "https://a.test/f", "feed"),
        ("text/plain", b"a,b\n", "https://a.test/x.csv", None),
        ("application/zip", b"PK\x03\x04", "https://a.test/r.docx", None),
    ],
)
def test_the_reader_table_names_the_reader_by_type_sniff_then_suffix(
    content_type: str, body: bytes, url: str, reader: str | None
) -> None:
    assert reader_for(content_type, body, url) == reader


async def test_a_workbook_with_a_damaged_sheet_answers_the_rest_partial_naming_it(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    data = rezip(fixture("ledger.xlsx"), {"xl/worksheets/sheet1.xml": b"<worksheet><row"})
    url = serve(origin, "/ledger.xlsx", data, XLSX)
    reply = await fetch(make_dispatcher(OPS), url, ("MAX_CHARS", MAX_CHARS))
    assert (reply.status, reply.get("ERROR")) == (
        Status.PARTIAL,
        "corrupt_document:xlsx:sheets_unreadable:1",
    )
    assert reply.get("DATA") == read_xlsx(data, Limits()).markdown


async def test_a_docx_spelling_the_sheet_marker_is_not_partial(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    """Only the XLSX reader writes a sheet marker: text that spells one is text."""
    spelled = b"<w:p><w:r><w:t>&lt;!-- sheet 1 unreadable --&gt;</w:t></w:r></w:p>"
    data = fixture("minutes.docx")
    xml = zipfile.ZipFile(io.BytesIO(data)).read("word/document.xml")
    body = rezip(data, {"word/document.xml": xml.replace(b"<w:body>", b"<w:body>" + spelled, 1)})
    reply = await fetch(make_dispatcher(OPS), serve(origin, "/m.docx", body, DOCX))
    assert (reply.status, reply.get("ERROR")) == (Status.OK, None)
    assert "<!-- sheet 1 unreadable -->" in (reply.get("DATA") or "")
