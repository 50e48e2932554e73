"""fetch's issue-24 fields over the real Unix socket and through the MCP face (stdio): what the
page declares, SUMMARY on a cut page, CACHED_AT and MAX_AGE, and a page with no text as a
PARTIAL naming its cause (SPEC R-2), never an OK and never an error result."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult

from csp_web.client.trio_client import open_client
from protocol import Reply, Status, Task
from tests.net._origin import Reply as OriginReply

from .conftest import WAIT_S, WebDaemon, face_command, face_env

DECLARED = (
    '<!doctype html><html lang="en-GB"><head><title>Tides</title>'
    '<meta name="description" content="Two high tides a day.">'
    '<meta name="author" content="Jan de Vries">'
    '<meta property="article:published_time" content="2026-03-05T08:00:00Z">'
    '<meta property="og:site_name" content="Tide Tables">'
    "</head><body><article><h1>Tides</h1>"
    f"<p>{'The North Sea has two high tides every day. ' * 5}</p>"
    "<p>Spring tides follow the new and the full moon, and neap tides fall between them.</p>"
    "</article></body></html>"
).encode()
SHELL = (
    b'<html><head><script src="/app.js"></script></head><body><div id="root"></div></body></html>'
)
WANTED = {
    "DESCRIPTION": "Two high tides a day.",
    "AUTHOR": "Jan de Vries",
    "PUBLISHED": "2026-03-05",
    "LANG": "en-GB",
    "SITE_NAME": "Tide Tables",
}
EMPTY = "empty_content:script_only,render_unavailable"


def _serve(web_daemon: WebDaemon) -> tuple[str, str]:
    html = [("content-type", "text/html; charset=utf-8")]
    routes = web_daemon.origin.routes
    routes["/declared"] = lambda _seen: OriginReply(200, html, DECLARED)
    routes["/shell"] = lambda _seen: OriginReply(200, html, SHELL)
    return web_daemon.url("/declared"), web_daemon.url("/shell")


async def test_the_new_fetch_fields_arrive_over_the_socket(web_daemon: WebDaemon) -> None:
    declared, shell = _serve(web_daemon)

    def task(url: str, *fields: tuple[str, str]) -> Task:
        return Task("fetch", "WEB", "CONTENT", url, fields)

    with trio.fail_after(WAIT_S):
        async with open_client(web_daemon.socket_path) as client:
            cut = await client.call(task(declared, ("MAX_CHARS", "30")))
            again = await client.call(task(declared, ("MAX_AGE", "3600")))
            empty = await client.call(task(shell))
    assert {key: cut.get(key) for key in WANTED} == WANTED
    assert cut.status is Status.PARTIAL
    assert len(_all(cut, "SUMMARY")) == 2
    assert (again.get("CACHED"), again.get("CACHED_AT") is not None) == ("true", True)
    assert (empty.status, empty.get("ERROR")) == (Status.PARTIAL, EMPTY)


def _all(reply: Reply, key: str) -> list[str]:
    return [value for name, value in reply.fields if name == key]


def face(*args: str) -> Client:
    command, argv = face_command(*args)
    return Client(StdioServerParameters(command=command, args=argv, env=face_env()))


async def call(client: Client, arguments: dict[str, Any]) -> CallToolResult:
    result = await client.call_tool("web_fetch", arguments)
    assert isinstance(result, CallToolResult)
    return result


@pytest.mark.slow  # a child interpreter importing the MCP SDK: seconds
async def test_the_new_fetch_fields_arrive_through_the_mcp_face(web_daemon: WebDaemon) -> None:
    declared, shell = _serve(web_daemon)
    with trio.fail_after(WAIT_S):
        async with face("--socket", web_daemon.socket_path) as client:
            cut = await call(client, {"url": declared, "max_chars": 30})
            again = await call(client, {"url": declared, "max_age": 3600})
            empty = await call(client, {"url": shell})
            never = await call(client, {"url": shell, "render": "never"})
            always = await call(client, {"url": declared, "render": "always"})
    for result in (cut, again, empty, never):
        assert result.structured_content is not None
        assert not result.is_error
    assert cut.structured_content is not None
    assert {key: cut.structured_content.get(key) for key in WANTED} == WANTED
    assert len(cut.structured_content["SUMMARY"]) == 2
    assert again.structured_content is not None
    assert again.structured_content["CACHED"] is True
    assert "CACHED_AT" in again.structured_content
    assert empty.structured_content is not None
    assert (empty.structured_content["STATUS"], empty.structured_content["ERROR"]) == (
        "PARTIAL",
        EMPTY,
    )
    (content,) = empty.content
    assert content.type == "text"
    assert content.text.startswith(f"PARTIAL BECAUSE {EMPTY}\n")
    # issue 24's render fields: this daemon has no Chromium, so auto acts as never and says so
    assert empty.structured_content["RENDER_REASON"] == "root_div,render_unavailable"
    assert never.structured_content is not None
    assert (never.structured_content["ERROR"], never.structured_content["RENDER_REASON"]) == (
        "empty_content:script_only,render_off",
        "root_div,render_off",
    )
    assert always.is_error
    assert always.structured_content is not None
    assert always.structured_content["ERROR"] == "browser_unavailable:render_always"
