"""A call the client cancels (``notifications/cancelled``) is never answered (the SDK drops
it, as MCP says): the stdio face must not count it as awaiting an answer. Before, its ID
stayed in the drain's set for the session's life (one more per cancelled call) and held the
face up to the whole drain period (max_timeout_ms + a margin) after stdin's EOF."""

from __future__ import annotations

import math
from typing import Any

import trio
from mcp.server import Server, ServerRequestContext
from mcp.shared.message import SessionMessage
from mcp.types import (
    CallToolRequestParams,
    CallToolResult,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
)

from csp_web.mcp_face.drain import serve_draining

from .conftest import WAIT_S

HELLO = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "t", "version": "1"},
}


async def test_a_call_the_client_cancelled_does_not_hold_the_face_past_stdin_eof() -> None:
    started = trio.Event()

    async def call_tool(ctx: ServerRequestContext[Any], params: CallToolRequestParams) -> Any:
        started.set()
        await trio.sleep_forever()  # answered only by its cancellation
        return CallToolResult(content=[])

    server: Server[Any] = Server("t", on_call_tool=call_tool)
    send_in, read = trio.open_memory_channel[SessionMessage | Exception](math.inf)
    write, receive_out = trio.open_memory_channel[SessionMessage](math.inf)
    answered: list[object] = []

    async def collect() -> None:
        async for message in receive_out:
            if isinstance(message.message, JSONRPCResponse):
                answered.append(message.message.id)

    def request(n: int, method: str, params: dict[str, Any]) -> SessionMessage:
        return SessionMessage(JSONRPCRequest(jsonrpc="2.0", id=n, method=method, params=params))

    def notification(method: str, params: dict[str, Any] | None = None) -> SessionMessage:
        return SessionMessage(JSONRPCNotification(jsonrpc="2.0", method=method, params=params))

    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(collect)
            nursery.start_soon(serve_draining, server, read, write, 10 * WAIT_S)
            await send_in.send(request(0, "initialize", HELLO))
            await send_in.send(notification("notifications/initialized"))
            await send_in.send(request(1, "tools/call", {"name": "slow", "arguments": {}}))
            await started.wait()
            await send_in.send(notification("notifications/cancelled", {"requestId": 1}))
            await send_in.aclose()  # stdin's EOF: nothing else awaits an answer
    assert answered == [0]
