"""The MCP pool against a published server: ``mcp-server-fetch`` from PyPI, over stdio.

The test suite has no network, so the server is only listed and asked for a port where
nothing listens; that is enough to show a server we did not write works through the pool.
"""

from __future__ import annotations

import socket
import sys

import pytest
import trio

from csp_web.core.api.errors import OpError
from protocol import ErrorCode
from specialists.tool.mcp import open_mcp_pool
from specialists.tool.mcp.config import StdioServerConfig

from .mcp_servers.support import toy_config

WEDGE_S = 60.0


def fetch_config() -> StdioServerConfig:
    """``mcp-server-fetch`` run by this interpreter (it must be installed alongside)."""
    return StdioServerConfig(command=sys.executable, args=("-m", "mcp_server_fetch"))


async def test_published_fetch_server_lists_its_fetch_tool_with_schema() -> None:
    async with open_mcp_pool(toy_config(servers={"fetch": fetch_config()})) as pool:
        with trio.fail_after(WEDGE_S):
            listing = await pool.list_tools("fetch")
    tools = {tool.name: tool for tool in listing.tools}
    assert "fetch" in tools
    schema = tools["fetch"].input_schema
    assert schema["required"] == ["url"]
    assert schema["properties"]["url"]["type"] == "string"


async def test_published_fetch_server_reports_an_unreachable_url_as_a_tool_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    params = {"url": f"http://127.0.0.1:{port}/page"}
    async with open_mcp_pool(toy_config(servers={"fetch": fetch_config()})) as pool:
        with trio.fail_after(WEDGE_S), pytest.raises(OpError) as failed:
            await pool.call_tool("fetch", "fetch", params)
    assert (failed.value.code, failed.value.detail) == (ErrorCode.MCP_TOOL_ERROR, "fetch")
    assert dict(failed.value.fields)["ERROR_SUMMARY"]
