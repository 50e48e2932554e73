"""What MCP clients expect of a server, through the SDK's own client (issue 28): tool
annotations, structured values typed as the op table types them, ``url`` as one string, an
unknown tool as a JSON-RPC error, progress notifications while a call runs, and ``GET /mcp``
answered at once."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, CallToolResult, ToolAnnotations

from .conftest import PAGE_TITLE, WAIT_S, WebDaemon, face_command, face_env


def face(socket_path: str) -> Client:
    command, argv = face_command("--socket", socket_path)
    return Client(StdioServerParameters(command=command, args=argv, env=face_env()))


def structured(result: Any) -> dict[str, Any]:
    assert isinstance(result, CallToolResult)
    assert result.structured_content is not None
    values: dict[str, Any] = result.structured_content
    return values


async def test_tools_carry_the_annotations_the_op_table_gives_their_ops(
    web_daemon: WebDaemon,
) -> None:
    with trio.fail_after(WAIT_S):
        async with face(web_daemon.socket_path) as client:
            listed = await client.list_tools()
    hints = {tool.name: tool.annotations for tool in listed.tools}
    assert hints["web_fetch"] == ToolAnnotations(
        read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=True
    )
    assert hints["web_cabinet"] == ToolAnnotations(
        read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
    )
    assert hints["web_save"] == ToolAnnotations(
        read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
    )
    assert hints["web_api"] == ToolAnnotations(
        read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=True
    )


async def test_a_fetch_gives_typed_values_and_takes_url_as_one_string(
    web_daemon: WebDaemon,
) -> None:
    """WORD_COUNT an integer, CACHED a boolean, CITE a list, as the output schema says (the
    SDK's client validates the result against it); ``url`` one string, ``urls`` several."""
    url = web_daemon.url()
    with trio.fail_after(WAIT_S):
        async with face(web_daemon.socket_path) as client:
            one = structured(await client.call_tool("web_fetch", {"url": url}))
            listed = await client.list_tools()
            several = structured(
                await client.call_tool("web_fetch", {"url": url, "urls": [url + "?b"]})
            )
    assert one["TITLE"] == PAGE_TITLE
    assert isinstance(one["WORD_COUNT"], int)
    assert one["WORD_COUNT"] > 100
    assert (one["CACHED"], one["TRUNCATED"], one["CITE"]) == (False, False, [f'{url} "Tides"'])
    assert isinstance(one["CONTENT_LENGTH"], int)
    (fetch,) = [tool for tool in listed.tools if tool.name == "web_fetch"]
    properties = fetch.input_schema["properties"]
    assert (properties["url"]["type"], properties["urls"]["type"]) == ("string", "array")
    assert fetch.output_schema is not None
    assert fetch.output_schema["properties"]["WORD_COUNT"]["type"] == "integer"
    assert several["STATUS"] == "OK"
    assert [line.split(" ")[1] for line in several["FETCH"]] == [url, url + "?b"]


async def test_an_unknown_tool_is_a_json_rpc_invalid_params_error(web_daemon: WebDaemon) -> None:
    """MCP's tools/call: an unknown tool is a protocol error (-32602), not a tool result."""
    with trio.fail_after(WAIT_S):
        async with face(web_daemon.socket_path) as client:
            with pytest.raises(MCPError) as raised:
                await client.call_tool("web_nothing", {})
            still = await client.list_tools()  # the session goes on
    assert (raised.value.code, raised.value.message) == (
        INVALID_PARAMS,
        "Unknown tool: web_nothing",
    )
    assert still.tools


@pytest.mark.slow
async def test_a_long_call_sends_progress_while_it_runs(web_daemon: WebDaemon) -> None:
    """A fetch of a body that drips for 2.5 s (its TIMEOUT_MS): the client that sent a
    progressToken hears "still running" each second until the reply."""
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    arguments = {"url": web_daemon.url("/drip/"), "timeout_ms": 2500}
    with trio.fail_after(WAIT_S):
        async with face(web_daemon.socket_path) as client:
            result = await client.call_tool("web_fetch", arguments, progress_callback=on_progress)
    assert isinstance(result, CallToolResult)
    assert seen[0] == (1.0, None, "still running, 1 s")
    assert [progress for progress, _, _ in seen] == [float(n) for n in range(1, len(seen) + 1)]
