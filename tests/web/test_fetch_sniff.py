"""fetch of a body whose declared type lies (WHATWG MIME Sniffing): a PDF or a zip served as
text/html or text/plain is read as what it is or refused, never answered as text; text that
is text stays text."""

from __future__ import annotations

import codecs

import pytest

from csp_web.net.sniff import HEADER_BYTES, OCTET_STREAM, sniffed_type
from protocol import Status
from specialists.formats import Limits
from specialists.formats.pdf import read_pdf
from specialists.web.pages.ops_fetch import OPS
from tests.net._origin import Origin
from tests.web.conftest import DispatcherFactory
from tests.web.documents_support import fixture as document
from tests.web.pages_support import fetch, serve
from tests.web.pdf_support import fixture

TEXT_TYPES = ["text/html", "text/html; charset=utf-8", "text/plain"]


@pytest.mark.parametrize("content_type", TEXT_TYPES)
async def test_a_pdf_served_as_text_is_read_as_the_pdf_it_is(
    make_dispatcher: DispatcherFactory, origin: Origin, content_type: str
) -> None:
    data = fixture("chrome_10_one")
    url = serve(origin, "/report", data, content_type)
    reply = await fetch(make_dispatcher(OPS), url)
    assert (reply.status, reply.get("PAGES")) == (Status.OK, "1")
    assert reply.get("DATA") == read_pdf(data, Limits()).markdown


async def test_a_large_pdf_served_as_html_gets_the_document_body_cap(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    """Judged as the body arrives: a 5 MB PDF passes guard.max_body_bytes (1 MB)."""
    data = fixture("chrome_10_one") + b"\n%" + b"x" * (5 << 20)
    url = serve(origin, "/big", data, "text/html")
    reply = await fetch(make_dispatcher(OPS), url)
    assert (reply.status, reply.get("PAGES")) == (Status.OK, "1")


async def test_binary_bytes_behind_a_pdf_header_served_as_html_are_a_damaged_pdf(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    url = serve(origin, "/x", b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n" + b"\x00\x01\x02binary" * 500)
    reply = await fetch(make_dispatcher(OPS), url)
    assert (reply.status, reply.get("ERROR")) == (Status.FAIL, "corrupt_document:pdf:damaged")


@pytest.mark.parametrize("content_type", TEXT_TYPES)
async def test_a_docx_served_as_text_reads_by_its_suffix_and_a_bare_zip_is_refused(
    make_dispatcher: DispatcherFactory, origin: Origin, content_type: str
) -> None:
    dispatcher = make_dispatcher(OPS)
    data = document("minutes.docx")
    named = await fetch(dispatcher, serve(origin, "/minutes.docx", data, content_type))
    assert (named.status, named.get("TITLE") is not None) == (Status.OK, True)
    bare = await fetch(dispatcher, serve(origin, "/download", data, content_type))
    assert (bare.status, bare.get("ERROR")) == (
        Status.FAIL,
        "unsupported_content:application/octet-stream",
    )


@pytest.mark.parametrize(
    "body",
    [b"\x00\x01\x02\x03" * 300, b"\x89PNG\r\n\x1a\n" + b"\x00" * 64, b"\x1f\x8b\x08\x00"],
    ids=["control_bytes", "png", "gzip"],
)
async def test_binary_bytes_served_as_plain_text_are_refused_not_sent_as_text(
    make_dispatcher: DispatcherFactory, origin: Origin, body: bytes
) -> None:
    url = serve(origin, "/blob", body, "text/plain")
    reply = await fetch(make_dispatcher(OPS), url)
    assert (reply.status, reply.get("ERROR")) == (
        Status.FAIL,
        "unsupported_content:application/octet-stream",
    )


async def test_utf_16_plain_text_with_its_byte_order_mark_stays_text(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    """Its NUL bytes are half of each character, not binary (WHATWG: a BOM says text)."""
    body = codecs.BOM_UTF16_LE + "The tide came in at noon.".encode("utf-16-le")
    url = serve(origin, "/note.txt", body, "text/plain")
    reply = await fetch(make_dispatcher(OPS), url)
    assert (reply.status, reply.get("DATA")) == (Status.OK, "The tide came in at noon.")


async def test_html_holding_a_stray_control_byte_is_still_a_page(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    """Browsers never sniff text/html for binary bytes: a NUL in a page is the page's slip."""
    html = (
        "<html><head><title>Tides</title></head><body><p>High\x00 tide at noon.</p></body></html>"
    )
    reply = await fetch(make_dispatcher(OPS), serve(origin, "/page", html))
    assert (reply.status, reply.get("TITLE")) == (Status.OK, "Tides")


LOG = "build step 1 ok\nrunning the tests of the parser module\n"


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("text/plain; charset=utf-16le", (LOG * 5).encode("utf-16-le")),
        ("text/plain; charset=UTF-16BE", (LOG * 5).encode("utf-16-be")),
        ("text/plain; charset=utf-8", ("\x1b[31mERROR\x1b[m\x0f " + LOG).encode() * 10),
        ("text/plain", ("\x07 bell " + LOG).encode() * 10),
    ],
    ids=["utf16le_declared", "utf16be_declared", "screen_sgr0_shift_in", "bell"],
)
async def test_plain_text_with_nul_halves_or_terminal_controls_stays_text(
    make_dispatcher: DispatcherFactory, origin: Origin, content_type: str, body: bytes
) -> None:
    """A declared UTF-16 holds NUL bytes as half its characters (WHATWG sniffs text/plain for
    binary bytes only under the Apache-bug flag), and a log's BEL or SI is a terminal's."""
    url = serve(origin, "/build.log", body, content_type)
    reply = await fetch(make_dispatcher(OPS), url)
    assert (reply.status, reply.get("ERROR")) == (Status.OK, None)
    assert "running the tests of the parser module" in (reply.get("DATA") or "")


@pytest.mark.parametrize(
    ("media_type", "charset", "head", "sniffed"),
    [
        ("text/plain", "utf-16le", "hi there".encode("utf-16-le"), "text/plain"),
        ("text/plain", "utf-32", "hi there".encode("utf-32-le"), "text/plain"),
        ("text/plain", "windows-1251", b"a\x00b", "text/plain"),  # no Apache-bug flag
        ("text/plain", "utf-16le", b"%PDF-1.7\n", OCTET_STREAM),  # signatures still hold
        ("text/plain", "iso-8859-1", b"a\x00b", OCTET_STREAM),
        ("text/plain", "utf-8", b"a\x00b", OCTET_STREAM),
        ("text/plain", None, b"\x07bell\x0fshift in\x08" + b"a" * 100, "text/plain"),
        ("text/plain", None, b"\x01\x02\x03\x04abcdef" * 20, OCTET_STREAM),  # a share of them
        ("text/html", "utf-16be", "<p>hi</p>".encode("utf-16-be"), "text/html"),
        ("text/html", "utf-16le", b"MZ\x90\x00\x03\x00", "text/html"),
    ],
)
def test_the_binary_byte_rule_holds_only_under_the_apache_bug_flag(
    media_type: str, charset: str | None, head: bytes, sniffed: str
) -> None:
    assert sniffed_type(media_type, head, charset) == sniffed


@pytest.mark.parametrize(
    ("media_type", "head", "sniffed"),
    [
        ("text/plain", b"a" * (HEADER_BYTES - 1) + b"\x00", OCTET_STREAM),
        ("text/plain", b"a" * HEADER_BYTES + b"\x00", "text/plain"),  # past the header
        ("text/plain", b"tab\tform\x0cescape\x1b$B", "text/plain"),  # text's own controls
        ("text/plain", codecs.BOM_UTF16_BE + "hi".encode("utf-16-be"), "text/plain"),
        ("text/html", b"<p>a\x00b</p>", "text/html"),
        ("text/html", b"MZ\x90\x00\x03\x00", OCTET_STREAM),  # binary bytes and no markup
        ("text/html", b"RIFF\x10\x00\x00\x00WEBPVP8 ", OCTET_STREAM),
        ("text/html", b"  %PDF-1.7", "text/html"),  # a signature opens the body
        ("application/json", b"%PDF-1.7", "application/json"),  # only text types are sniffed
    ],
)
def test_a_text_type_is_dropped_only_for_a_signature_or_binary_bytes(
    media_type: str, head: bytes, sniffed: str
) -> None:
    assert sniffed_type(media_type, head) == sniffed
