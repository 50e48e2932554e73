"""fetch of a spreadsheet and a feed through the MCP face (stdio): the document's Markdown and
its fields arrive as the tool's result, a hostile file as an error result naming its code."""

from __future__ import annotations

import pytest
import trio

from specialists.formats import Limits
from specialists.formats.sheet import read_xlsx
from specialists.web.pages.documents import XLSX
from tests.net._origin import Reply as OriginReply
from tests.web.documents_support import BILLION_LAUGHS, fixture

from .conftest import WAIT_S, WebDaemon
from .test_fetch_fields_face import call, face


@pytest.mark.slow  # a child interpreter importing the MCP SDK: seconds
async def test_a_workbook_and_an_entity_bomb_through_the_mcp_face(web_daemon: WebDaemon) -> None:
    routes = web_daemon.origin.routes
    ledger = fixture("ledger.xlsx")
    routes["/ledger.xlsx"] = lambda _seen: OriginReply(200, [("content-type", XLSX)], ledger)
    xml = [("content-type", "application/rss+xml")]
    routes["/laughs.rss"] = lambda _seen: OriginReply(200, xml, BILLION_LAUGHS)
    with trio.fail_after(WAIT_S):
        async with face("--socket", web_daemon.socket_path) as client:
            sheet = await call(client, {"url": web_daemon.url("/ledger.xlsx")})
            bomb = await call(client, {"url": web_daemon.url("/laughs.rss")})
    assert not sheet.is_error
    assert sheet.structured_content is not None
    assert sheet.structured_content["TITLE"] == "Stone Ledger"
    (content,) = sheet.content
    assert content.type == "text"
    assert read_xlsx(ledger, Limits()).markdown in content.text
    assert bomb.is_error
    (error,) = bomb.content
    assert error.type == "text"
    assert "too_large:" in error.text
