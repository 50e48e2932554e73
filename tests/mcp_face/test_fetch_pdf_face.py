"""fetch of PDFs through the MCP face (stdio): a PDF's pages and MAX_PAGES as the tool's
``max_pages`` argument, and a scan as a PARTIAL naming its cause (SPEC R-2), never an error
result and never an empty OK."""

from __future__ import annotations

import pytest
import trio

from tests.net._origin import Reply as OriginReply
from tests.web.pdf_support import PDF_TYPE, fixture

from .conftest import WAIT_S, WebDaemon
from .test_fetch_fields_face import call, face

SCANNED = "no_text_layer:scanned"


@pytest.mark.slow  # a child interpreter importing the MCP SDK: seconds
async def test_a_pdf_and_a_scan_through_the_mcp_face(web_daemon: WebDaemon) -> None:
    routes, pdf = web_daemon.origin.routes, [("content-type", PDF_TYPE)]
    report, scan = fixture("lo_02_serif_title"), fixture("scanned")
    routes["/report.pdf"] = lambda _seen: OriginReply(200, pdf, report)
    routes["/scan.pdf"] = lambda _seen: OriginReply(200, pdf, scan)
    with trio.fail_after(WAIT_S):
        async with face("--socket", web_daemon.socket_path) as client:
            cut = await call(client, {"url": web_daemon.url("/report.pdf"), "max_pages": 2})
            empty = await call(client, {"url": web_daemon.url("/scan.pdf")})
    assert not cut.is_error
    assert cut.structured_content is not None
    assert (cut.structured_content["PAGES"], cut.structured_content["PAGES_READ"]) == (3, 2)
    assert not empty.is_error
    assert empty.structured_content is not None
    assert (empty.structured_content["STATUS"], empty.structured_content["ERROR"]) == (
        "PARTIAL",
        SCANNED,
    )
    (content,) = empty.content
    assert content.type == "text"
    assert content.text.startswith(f"PARTIAL BECAUSE {SCANNED}\n")
