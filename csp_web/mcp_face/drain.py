"""Every request read before stdin's EOF gets its answer.

The SDK's server loop ends at the read stream's EOF and drops the calls still in flight, so
a client that writes its last requests and closes stdin lost their replies (CSP/1's own
stdio answers every task read before EOF, SPEC's one reply per task). ``serve_draining``
stands between the stdio streams and the server: it passes messages both ways, notes each
request's ID until its response or error goes out, and shows the server EOF only once none
is left, or after ``drain_s``. A ``subscriptions/listen`` request is a stream the client holds
open, not a call awaiting its answer: it is not waited for; nor is a call the client
cancelled (``notifications/cancelled``), which is never answered.
"""

from __future__ import annotations

import logging
from typing import Any

import trio
from mcp.server import Server
from mcp.server.lowlevel.server import NotificationOptions
from mcp.shared._context_streams import create_context_streams
from mcp.shared.message import SessionMessage
from mcp.types import JSONRPCError, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse

log = logging.getLogger(__name__)
_LISTEN = "subscriptions/listen"
_CANCELLED = "notifications/cancelled"


def _cancelled_id(message: SessionMessage | Exception) -> str | int | None:
    """The request a ``notifications/cancelled`` names, else None."""
    if not isinstance(message, SessionMessage):
        return None
    note = message.message
    if not isinstance(note, JSONRPCNotification) or note.method != _CANCELLED:
        return None
    request_id = (note.params or {}).get("requestId")
    return request_id if isinstance(request_id, str | int) else None


class _InFlight:
    def __init__(self) -> None:
        self.ids: set[object] = set()
        self.changed = trio.Event()

    def answered(self, request_id: object) -> None:
        self.ids.discard(request_id)
        self.changed.set()
        self.changed = trio.Event()


async def serve_draining(
    server: Server[Any],
    read: Any,  # the SDK's MemoryObjectReceiveStream[SessionMessage | Exception]
    write: Any,  # and MemoryObjectSendStream[SessionMessage]
    drain_s: float,
    notifications: NotificationOptions | None = None,
) -> None:
    """``server.run`` on ``read``/``write``, its EOF held back until every request read has
    been answered or ``drain_s`` has passed; ``notifications`` are the change notifications
    the server declares (the handshake era's ``listChanged``)."""
    # The SDK's own context-carrying streams, as stdio_server makes them.
    to_server, server_reads = create_context_streams[SessionMessage | Exception](0)
    server_writes, from_server = create_context_streams[SessionMessage](0)
    in_flight = _InFlight()

    async def pass_in() -> None:
        async with to_server:
            async for message in read:
                if (
                    isinstance(message, SessionMessage)
                    and isinstance(message.message, JSONRPCRequest)
                    and message.message.method != _LISTEN
                ):
                    in_flight.ids.add(message.message.id)
                await to_server.send(message)
                if (cancelled := _cancelled_id(message)) is not None:
                    in_flight.answered(cancelled)  # never answered: the SDK drops it (MCP)
            with trio.move_on_after(drain_s):
                while in_flight.ids:
                    await in_flight.changed.wait()
            if in_flight.ids:
                log.warning(
                    "stdin ended; %d calls unanswered after %gs", len(in_flight.ids), drain_s
                )

    async def pass_out() -> None:
        async with from_server:
            async for message in from_server:
                await write.send(message)
                if isinstance(message.message, JSONRPCResponse | JSONRPCError):
                    in_flight.answered(message.message.id)

    reading = trio.CancelScope()

    async def read_until_done() -> None:
        with reading:
            await pass_in()

    async with write, trio.open_nursery() as nursery:  # closing write ends stdout's writer
        nursery.start_soon(read_until_done)
        nursery.start_soon(pass_out)  # ends once the server's writes are all passed on
        async with server_writes:
            options = server.create_initialization_options(notifications)
            await server.run(server_reads, server_writes, options)
        reading.cancel()  # if the server ended before stdin did
