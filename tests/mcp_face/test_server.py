"""The MCP server's own refusals, through the SDK's in-process client: a tool it does not
have, and a daemon connection that has closed."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, CallToolResult, TextContent

from csp_web.client.trio_client import open_stream_client
from csp_web.core.daemon.compose import op_table
from csp_web.mcp_face.refresh import ToolSet
from csp_web.mcp_face.server import build_server
from csp_web.mcp_face.tools import build_tools
from specialists.web import WEB

WAIT_S = 10.0


async def _call_with_closed_daemon(name: str) -> CallToolResult:
    tools = build_tools(
        [op.describe() for op in op_table((WEB,))],
        exec_configured=False,
        max_timeout_ms=1000,
    )
    ours, theirs = trio.testing.memory_stream_pair()
    await theirs.aclose()  # the daemon is gone
    with trio.fail_after(WAIT_S):
        async with open_stream_client(ours) as daemon:
            server = build_server(daemon, ToolSet(tools), max_timeout_ms=1000)
            async with Client(server) as client:
                result = await client.call_tool(name, {"url": "https://a.test/"})
    assert isinstance(result, CallToolResult)
    return result


async def test_a_tool_the_face_does_not_have_is_a_json_rpc_invalid_params_error() -> None:
    """MCP's tools/call: an unknown tool is a protocol error (-32602), not a tool result."""
    tools = build_tools(
        [op.describe() for op in op_table((WEB,))], exec_configured=False, max_timeout_ms=1000
    )
    ours, _theirs = trio.testing.memory_stream_pair()
    with trio.fail_after(WAIT_S):
        async with open_stream_client(ours) as daemon:
            server = build_server(daemon, ToolSet(tools), max_timeout_ms=1000)
            async with Client(server) as client:
                with pytest.raises(MCPError) as raised:
                    await client.call_tool("sys_ping", {})
    assert (raised.value.code, raised.value.message) == (INVALID_PARAMS, "Unknown tool: sys_ping")


async def test_a_closed_daemon_connection_is_a_not_available_error_result() -> None:
    result = await _call_with_closed_daemon("web_fetch")
    assert result.is_error
    assert result.structured_content == {
        "STATUS": "FAIL",
        "SCOPE": "mcp",
        "DATA": "none",
        "ERROR": "not_available:the csp-web daemon connection is closed",
    }


async def _call_with_open_daemon(name: str, arguments: dict[str, object]) -> CallToolResult:
    tools = build_tools(
        [op.describe() for op in op_table((WEB,))],
        exec_configured=False,
        max_timeout_ms=1000,
    )
    ours, _theirs = trio.testing.memory_stream_pair()
    with trio.fail_after(WAIT_S):
        async with open_stream_client(ours) as daemon:
            server = build_server(daemon, ToolSet(tools), max_timeout_ms=1000)
            async with Client(server) as client:
                result = await client.call_tool(name, arguments)
    assert isinstance(result, CallToolResult)
    return result


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"url": "https://a.test/\ud800"}, "invalid_field:url holds a lone surrogate"),
        (
            {"url": "https://a.test/", "max_chars": 10**5000},
            "invalid_field:max_chars has too many digits",
        ),
        (
            {"endpoint": "https://a.test/", "payload": {"n": 10**5000}},
            "invalid_field:payload has too many digits",
        ),
        (
            {"endpoint": "https://a.test/", "payload": {"k": "\udfff"}},
            "invalid_field:payload holds a lone surrogate",
        ),
    ],
)
async def test_an_argument_no_frame_can_carry_is_an_invalid_field_result_not_an_internal_error(
    arguments: dict[str, object], error: str
) -> None:
    # Before: the face raised UnicodeEncodeError / ValueError inside the SDK's handler, which
    # answered "Internal server error" and logged a traceback; the daemon is never reached.
    tool = "web_api" if "payload" in arguments else "web_fetch"
    result = await _call_with_open_daemon(tool, arguments)
    assert result.is_error
    assert result.content == [TextContent(text=f"ERROR {error}")]
    assert result.structured_content == {
        "STATUS": "FAIL",
        "SCOPE": "mcp",
        "DATA": "none",
        "ERROR": error,
    }
