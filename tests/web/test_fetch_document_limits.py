"""What fetch hands a document reader: its own body cap (``web.fetch.max_document_bytes``,
while HTML keeps ``guard.max_body_bytes``), the ``web.fetch`` limits of what a document becomes
(``max_rows``, ``max_entries``, ``max_document_chars``), and the document's URL, against which
relative links resolve. Over the local HTTPS origin, the reader in its worker process."""

from __future__ import annotations

import io
import zipfile
from dataclasses import replace

import pytest

from csp_web.config import Config, with_section
from protocol import Status
from specialists.web.config import web_section
from specialists.web.pages.documents import ODT
from specialists.web.pages.ops_fetch import OPS
from tests.net._origin import Origin
from tests.net._origin import Reply as OriginReply
from tests.web.conftest import DispatcherFactory
from tests.web.documents_support import fixture as office_fixture
from tests.web.documents_support import rezip
from tests.web.pages_support import fetch, serve
from tests.web.pdf_support import PDF_TYPE, fixture

DOCUMENT_CAP = 2 << 20  # twice guard.max_body_bytes (1 MB): room for a PDF HTML may not have
MAX_ROWS = 3


@pytest.fixture
def web_config(web_config: Config) -> Config:
    """The suite's web config with a 2 MiB document cap and three rows a table."""
    fetch_config = replace(
        web_section(web_config).fetch,
        max_document_bytes=DOCUMENT_CAP,
        max_rows=MAX_ROWS,
        reader_memory_bytes=256 << 20,
    )
    return with_section(web_config, "web", replace(web_section(web_config), fetch=fetch_config))


def _pdf_of(size: int) -> bytes:
    """A one-page PDF of exactly ``size`` bytes: a fixture and a trailing comment."""
    data = fixture("chrome_10_one") + b"\n%"
    return data + b"x" * (size - len(data))


def _chunked(origin: Origin, path: str, data: bytes, content_type: str) -> str:
    """Serve ``data`` at ``path`` with no Content-Length (chunked): only the bytes count."""
    headers = [("content-type", content_type)]
    origin.routes[path] = lambda _seen: OriginReply(200, headers, data, chunked=True)
    return origin.url("origin.test", path)


@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        ("/report.pdf", PDF_TYPE),  # by its type
        ("/download", "application/octet-stream"),  # by its magic bytes
        ("/report.pdf", "application/octet-stream"),  # by its suffix
    ],
)
async def test_a_document_reads_at_max_document_bytes_and_one_byte_more_is_too_large(
    make_dispatcher: DispatcherFactory,
    origin: Origin,
    path: str,
    content_type: str,
    chunked: bool,
) -> None:
    """Past guard.max_body_bytes: declared (Content-Length) or only counted (chunked)."""
    dispatcher = make_dispatcher(OPS)
    put = _chunked if chunked else serve
    at = await fetch(dispatcher, put(origin, "/n" + path, _pdf_of(DOCUMENT_CAP), content_type))
    over_url = put(origin, "/n1" + path, _pdf_of(DOCUMENT_CAP + 1), content_type)
    over = await fetch(dispatcher, over_url)
    assert (at.status, at.get("PAGES")) == (Status.OK, "1")
    assert (over.status, over.get("ERROR")) == (Status.FAIL, "too_large:max_document_bytes")


@pytest.mark.parametrize("chunked", [False, True])
async def test_html_keeps_the_guard_s_body_cap_beside_the_document_cap(
    make_dispatcher: DispatcherFactory, origin: Origin, chunked: bool
) -> None:
    cap = 1_000_000  # guard.max_body_bytes
    page = b"<html><body><p>tides</p>" + b" " * cap
    put = _chunked if chunked else serve
    dispatcher = make_dispatcher(OPS)
    at = await fetch(dispatcher, put(origin, "/at", page[:cap], "text/html"))
    over = await fetch(dispatcher, put(origin, "/over", page[: cap + 1], "text/html"))
    assert at.status is Status.OK
    assert (over.status, over.get("ERROR")) == (Status.FAIL, "too_large:max_body_bytes")


def _csv(rows: int) -> bytes:
    """A header and ``rows - 1`` rows: ``rows`` rows as max_rows counts them."""
    return b"a,b\n" + b"".join(b"%d,%d\n" % (n, 2 * n) for n in range(1, rows))


async def test_max_rows_from_web_fetch_shows_n_rows_and_leaves_out_the_next(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    dispatcher = make_dispatcher(OPS)
    at = await fetch(dispatcher, serve(origin, "/n.csv", _csv(MAX_ROWS), "text/csv"))
    over = await fetch(dispatcher, serve(origin, "/n1.csv", _csv(MAX_ROWS + 1), "text/csv"))
    table = "| a | b |\n| --- | --- |\n| 1 | 2 |\n| 2 | 4 |"
    assert (at.status, at.get("DATA")) == (Status.OK, table)
    assert over.get("DATA") == f"{table}\n\n_(1 more row left out: max_rows {MAX_ROWS})_"


async def test_a_relative_link_in_an_odt_resolves_against_the_url_it_was_read_from(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    data = office_fixture("report.odt")
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        content = archive.read("content.xml")
    relative = content.replace(b"https://example.org/survey/ridge", b"../survey/ridge")
    url = serve(origin, "/reports/q3.odt", rezip(data, {"content.xml": relative}), ODT)
    reply = await fetch(make_dispatcher(OPS), url, ("MAX_CHARS", "50000"))
    absolute = origin.url("origin.test", "/survey/ridge")
    assert f"[ridge survey page]({absolute})" in (reply.get("DATA") or "")
