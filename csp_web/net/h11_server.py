"""The one small HTTP/1.1 server csp-web runs: h11 over trio listeners (h11's own trio example
server, grown just enough). The MCP face's streamable HTTP (``csp_web.mcp_face.asgi``) and
the cassette replay's local origin (``csp_web.cli.cassette_origin``) both serve through it:
the accept loop with its connection cap, reading one whole request, writing events, the
plain-text refusal and the lingering close live here once.

Hypercorn has a trio worker as well (docs/mcp.md, "Why not Hypercorn"); this server is kept
for the face's per-connection admission, checked before any HTTP is read.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from functools import partial

import h11
import trio

log = logging.getLogger(__name__)

READ_BYTES = 65536
# As trio.serve_listeners: out of descriptors or memory, accept waits and retries.
_ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
_ACCEPT_RETRY_S = 0.1
_LINGER_S = 1.0
_LINGER_BYTES = 64 * 1024

Handle = Callable[[trio.abc.Stream], Awaitable[None]]


class BadRequest(Exception):
    """A request this server answers itself: ``status`` and a one-line ``reason``."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


async def serve_h11(
    listeners: Sequence[trio.abc.Listener[trio.abc.Stream]],
    handle: Handle,
    *,
    max_connections: int,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``listeners`` (owned from here on) until cancelled: each connection runs
    ``handle(stream)`` in a task of its own; ``handle`` owns and closes the stream.

    A connection is accepted only when one of ``max_connections`` slots is free: the rest
    wait in the kernel's listen backlog, holding no descriptor of ours (accepting them all and
    then waiting for a slot let any local client pile up descriptors without limit)."""
    slots = trio.Semaphore(max_connections)
    async with trio.open_nursery() as nursery:
        for listener in listeners:
            nursery.start_soon(_accept_loop, listener, partial(_in_slot, handle, slots), slots)
        task_status.started()


async def _accept_loop(
    listener: trio.abc.Listener[trio.abc.Stream], serve: Handle, slots: trio.Semaphore
) -> None:
    async with listener, trio.open_nursery() as nursery:
        while True:
            await slots.acquire()
            try:
                stream = await _accept(listener)
            except BaseException:
                slots.release()
                raise
            nursery.start_soon(serve, stream)


async def _accept(listener: trio.abc.Listener[trio.abc.Stream]) -> trio.abc.Stream:
    while True:
        try:
            return await listener.accept()
        except OSError as exc:
            if exc.errno not in _ACCEPT_CAPACITY_ERRNOS:
                raise
            log.error("cannot accept an HTTP connection (%s); retrying", exc)
            await trio.sleep(_ACCEPT_RETRY_S)


async def _in_slot(handle: Handle, slots: trio.Semaphore, stream: trio.abc.Stream) -> None:
    try:
        await handle(stream)
    finally:
        slots.release()


async def read_request(
    stream: trio.abc.Stream, conn: h11.Connection, *, max_body_bytes: int
) -> tuple[h11.Request, bytes] | None:
    """The next whole request on ``conn``: its head and body; ``None`` when the peer closed
    (or h11 has nothing more for this cycle) before a request began.

    Raises BadRequest (413 past ``max_body_bytes``, 400 on anything but a request's parts),
    h11.RemoteProtocolError on bad HTTP, trio.BrokenResourceError when the peer goes away."""
    request: h11.Request | None = None
    chunks: list[bytes] = []
    size = 0
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(bytes(await stream.receive_some(READ_BYTES)))
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            size += len(event.data)
            if size > max_body_bytes:
                raise BadRequest(413, "request body too large")
            chunks.append(bytes(event.data))
        elif isinstance(event, h11.EndOfMessage) and request is not None:
            return request, b"".join(chunks)
        elif request is None and (event is h11.PAUSED or isinstance(event, h11.ConnectionClosed)):
            return None
        else:
            raise BadRequest(400, "bad request")


async def send(stream: trio.abc.Stream, conn: h11.Connection, *events: h11.Event) -> None:
    """Write ``events`` on ``stream`` in one write."""
    data = b"".join(conn.send(event) or b"" for event in events)
    if data:
        await stream.send_all(data)


async def send_simple(
    stream: trio.abc.Stream, conn: h11.Connection, status: int, reason: str
) -> None:
    """Answer ``status`` with ``reason`` as a plain-text body and ``Connection: close``, if
    a response can still start; a peer already gone is not an error."""
    body = reason.encode() + b"\n"
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
        return
    response = h11.Response(status_code=status, headers=headers)
    with suppress(trio.BrokenResourceError, trio.ClosedResourceError, h11.LocalProtocolError):
        await send(stream, conn, response, h11.Data(data=body), h11.EndOfMessage())


async def linger(stream: trio.SocketStream) -> None:
    """Half-close, then read (bounded in bytes and time) what the peer had already sent:
    closing with unread data makes the kernel send RST, which can destroy the answer just
    written before the peer reads it."""
    with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        await stream.send_eof()
        with trio.move_on_after(_LINGER_S):
            left = _LINGER_BYTES
            while left > 0 and (data := await stream.receive_some(left)):
                left -= len(data)
