"""The MCP pool against the toy server over streamable HTTP, run by uvicorn on 127.0.0.1:0."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest
import trio

from csp_web.core.api.errors import OpError
from protocol import ErrorCode
from specialists.tool.mcp import open_mcp_pool
from specialists.tool.mcp.config import HttpServerConfig

from .mcp_servers.support import TOY_SERVER, toy_config

WEDGE_S = 30.0


@pytest.fixture
async def http_toy() -> AsyncIterator[trio.Process]:
    """The toy server over HTTP; its port is the first line it prints."""
    process = await trio.lowlevel.open_process(
        [sys.executable, str(TOY_SERVER), "--http"], stdout=subprocess.PIPE
    )
    try:
        yield process
    finally:
        process.terminate()
        with trio.CancelScope(shield=True):
            await process.wait()
            assert process.stdout is not None
            await process.stdout.aclose()


async def url_of(process: trio.Process) -> str:
    """The MCP endpoint of the toy server ``process``, once it listens."""
    assert process.stdout is not None
    printed = b""
    with trio.fail_after(WEDGE_S):
        while not printed.endswith(b"\n"):
            printed += await process.stdout.receive_some(64)
    return f"http://127.0.0.1:{int(printed)}/mcp"


def closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens (it was free a moment ago)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def test_http_call_carries_a_header_read_from_the_environment(
    http_toy: trio.Process, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CSP_TEST_AUTH", "Bearer t0k3n")
    server = HttpServerConfig(
        url=await url_of(http_toy), headers_from_env={"Authorization": "CSP_TEST_AUTH"}
    )
    async with open_mcp_pool(toy_config(servers={"remote": server})) as pool:
        seen = await pool.call_tool("remote", "header", {"name": "authorization"})
    assert seen.data == "Bearer t0k3n"


async def test_http_server_reuses_one_session_across_calls(http_toy: trio.Process) -> None:
    server = HttpServerConfig(url=await url_of(http_toy))
    async with open_mcp_pool(toy_config(servers={"remote": server})) as pool:
        first = await pool.call_tool("remote", "add", {"a": 1, "b": 2})
        second = await pool.call_tool("remote", "pid", {})
        stats = pool.stats()["remote"]
    assert first.structured_json == '{"a":1,"b":2,"sum":3}'
    assert int(second.data) == http_toy.pid
    assert (stats.calls, stats.restarts) == (2, 0)


async def test_http_server_lists_its_tools_with_their_schemas(http_toy: trio.Process) -> None:
    server = HttpServerConfig(url=await url_of(http_toy))
    async with open_mcp_pool(toy_config(servers={"remote": server})) as pool:
        listing = await pool.list_tools("remote")
    schemas = {tool.name: tool.input_schema for tool in listing.tools}
    assert schemas["header"]["required"] == ["name"]


async def test_http_server_that_is_not_listening_is_unavailable() -> None:
    server = HttpServerConfig(url=f"http://127.0.0.1:{closed_port()}/mcp")
    async with open_mcp_pool(toy_config(servers={"remote": server})) as pool:
        with trio.fail_after(WEDGE_S), pytest.raises(OpError) as failed:
            await pool.call_tool("remote", "pid", {})
        stats = pool.stats()["remote"]
    assert (failed.value.code, failed.value.detail) == (ErrorCode.MCP_UNAVAILABLE, "remote")
    assert failed.value.fields == (("REASON", f"start_failed:{stats.last_error}"),)
    assert "ConnectError" in stats.last_error


async def test_http_server_that_dies_mid_session_is_unavailable(http_toy: trio.Process) -> None:
    server = HttpServerConfig(url=await url_of(http_toy))
    async with open_mcp_pool(toy_config(servers={"remote": server})) as pool:
        await pool.call_tool("remote", "pid", {})
        http_toy.kill()
        await http_toy.wait()
        with trio.fail_after(WEDGE_S), pytest.raises(OpError) as failed:
            await pool.call_tool("remote", "pid", {})
    assert (failed.value.code, failed.value.detail) == (ErrorCode.MCP_UNAVAILABLE, "remote")


async def test_missing_header_secret_makes_the_http_server_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CSP_TEST_ABSENT", raising=False)
    server = HttpServerConfig(
        url=f"http://127.0.0.1:{closed_port()}/mcp",
        headers_from_env={"Authorization": "CSP_TEST_ABSENT"},
    )
    async with open_mcp_pool(toy_config(servers={"remote": server})) as pool:
        with pytest.raises(OpError) as failed:
            await pool.list_tools("remote")
        stats = pool.stats()["remote"]
    assert failed.value.fields == (("REASON", "start_failed:MissingSecretError: CSP_TEST_ABSENT"),)
    assert stats.last_error == "MissingSecretError: CSP_TEST_ABSENT"
