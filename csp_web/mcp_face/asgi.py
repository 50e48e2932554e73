"""A small HTTP/1.1 server for one ASGI app, on trio listeners, built on h11.

The MCP SDK's streamable HTTP transport is an ASGI app; its usual servers (uvicorn) run on
asyncio, while csp-web runs on trio. This is h11's own trio example server grown just enough
for ASGI: one request per connection (``Connection: close``, so a held-open response stream
never blocks a second request behind it), a streamed response body, ``http.disconnect``
when the peer goes away. Limits: the request head must arrive within ``head_timeout_s``
(slowloris), the body is capped at ``max_body_bytes`` (413), at most ``max_connections``
are served at once (more wait in the listen backlog).
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import h11
import trio

log = logging.getLogger(__name__)

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Message, Receive, Send], Awaitable[None]]
# A refusal reason for a new connection, or None to serve it (``peers.uid_gate``); awaited
# in the connection's own task, so a slow answer holds up only that connection.
Admit = Callable[[trio.SocketStream], Awaitable[str | None]]

_ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
_ACCEPT_RETRY_S = 0.1
_LINGER_S = 1.0
_LINGER_BYTES = 64 * 1024


@dataclass(frozen=True)
class HttpLimits:
    # The SDK's own request cap (mcp.server.transport_security.DEFAULT_MAX_REQUEST_BODY_SIZE).
    max_body_bytes: int = 4 * 1024 * 1024
    # As CSP/1's started-frame limit (SPEC L-5).
    head_timeout_s: float = 10.0
    # As CSP/1's tasks in flight per connection (SPEC L-4).
    max_connections: int = 64


class _BadRequest(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


async def serve_asgi(
    app: App,
    listeners: list[trio.SocketListener],
    limits: HttpLimits = HttpLimits(),
    *,
    admit: Admit | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``listeners`` (owned from here on) until cancelled; a connection
    ``admit`` gives a reason to refuse is answered 403 with it, before anything is read.

    A connection is accepted only when a slot is free: the rest wait in the kernel's listen
    backlog, holding no descriptor of ours (accepting them all and then waiting for a slot
    let any local client pile up descriptors without limit or timeout)."""
    slots = trio.Semaphore(limits.max_connections)
    async with trio.open_nursery() as nursery:
        for listener in listeners:
            serve = partial(_serve_in_slot, app=app, limits=limits, slots=slots, admit=admit)
            nursery.start_soon(_accept_loop, listener, serve, slots, nursery)
        task_status.started()


async def _accept_loop(
    listener: trio.SocketListener,
    serve: Callable[[trio.SocketStream], Awaitable[None]],
    slots: trio.Semaphore,
    nursery: trio.Nursery,
) -> None:
    async with listener:
        while True:
            await slots.acquire()
            try:
                stream = await _accept(listener)
            except BaseException:
                slots.release()
                raise
            nursery.start_soon(serve, stream)


async def _accept(listener: trio.SocketListener) -> trio.SocketStream:
    # As trio.serve_listeners: out of descriptors or memory, wait and retry, never crash.
    while True:
        try:
            return await listener.accept()
        except OSError as exc:
            if exc.errno not in _ACCEPT_CAPACITY_ERRNOS:
                raise
            log.error("the MCP HTTP face cannot accept a connection (%s); retrying", exc)
            await trio.sleep(_ACCEPT_RETRY_S)


async def _serve_in_slot(
    stream: trio.SocketStream,
    *,
    app: App,
    limits: HttpLimits,
    slots: trio.Semaphore,
    admit: Admit | None,
) -> None:
    try:
        refusal = await admit(stream) if admit is not None else None
        if refusal is None:
            await serve_connection(stream, app, limits)
        else:
            log.warning("MCP HTTP connection refused: %s", refusal)
            async with stream:
                await _send_simple(stream, h11.Connection(h11.SERVER), 403, refusal)
                await _linger(stream)
    finally:
        slots.release()


async def serve_connection(stream: trio.SocketStream, app: App, limits: HttpLimits) -> None:
    """One request on ``stream``, answered by ``app``; the stream is closed at the end."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=64 * 1024)
    async with stream:
        try:
            with trio.fail_after(limits.head_timeout_s):
                request, body = await _read_request(stream, conn, limits.max_body_bytes)
        except _BadRequest as exc:
            await _send_simple(stream, conn, exc.status, exc.reason)
            await _linger(stream)
            return
        except h11.RemoteProtocolError as exc:
            await _send_simple(stream, conn, exc.error_status_hint, "bad request")
            await _linger(stream)
            return
        except (trio.TooSlowError, trio.BrokenResourceError):
            return
        exchange = _Exchange(stream, conn, body)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(exchange.watch_disconnect)
            try:
                await app(_scope(request, stream), exchange.receive, exchange.send)
            except Exception:
                log.exception("the MCP HTTP app failed on %s", request.target)
            finally:
                nursery.cancel_scope.cancel()
        if not exchange.started:
            await _send_simple(stream, conn, 500, "internal error")


async def _read_request(
    stream: trio.SocketStream, conn: h11.Connection, max_body_bytes: int
) -> tuple[h11.Request, bytes]:
    request: h11.Request | None = None
    chunks: list[bytes] = []
    size = 0
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await stream.receive_some(65536)
            if not data and request is None:
                raise trio.BrokenResourceError("closed before a request")
            conn.receive_data(data)
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            size += len(event.data)
            if size > max_body_bytes:
                raise _BadRequest(413, "request body too large")
            chunks.append(bytes(event.data))
        elif isinstance(event, h11.EndOfMessage) and request is not None:
            return request, b"".join(chunks)
        else:
            raise _BadRequest(400, "bad request")


def _scope(request: h11.Request, stream: trio.SocketStream) -> Message:
    target = request.target.decode("ascii", "replace")
    path, _, query = target.partition("?")
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": request.http_version.decode("ascii"),
        "method": request.method.decode("ascii"),
        "scheme": "http",
        "path": path,
        "raw_path": path.encode("ascii", "replace"),
        "query_string": query.encode("ascii", "replace"),
        "root_path": "",
        "headers": [(name.lower(), value) for name, value in request.headers],
        "client": _address(stream.socket.getpeername()),
        "server": _address(stream.socket.getsockname()),
        "state": {},
    }


def _address(name: Any) -> tuple[str, int] | None:
    return (str(name[0]), int(name[1])) if isinstance(name, tuple) else None


class _Exchange:
    """The ASGI ``receive`` and ``send`` of one request."""

    def __init__(self, stream: trio.SocketStream, conn: h11.Connection, body: bytes) -> None:
        self._stream = stream
        self._conn = conn
        self._body: bytes | None = body
        self._gone = trio.Event()
        self.started = False
        self._ended = False

    async def receive(self) -> Message:
        if self._body is not None:
            body, self._body = self._body, None
            return {"type": "http.request", "body": body, "more_body": False}
        await self._gone.wait()
        return {"type": "http.disconnect"}

    async def watch_disconnect(self) -> None:
        # One request per connection: anything more the peer sends is ignored; EOF (or a
        # broken socket) is the disconnect the app may be waiting for.
        try:
            while await self._stream.receive_some(65536):
                pass
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        self._gone.set()

    async def send(self, message: Message) -> None:
        if self._ended:
            return
        if message["type"] == "http.response.start":
            headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"connection"]
            response = h11.Response(
                status_code=message["status"], headers=[*headers, (b"connection", b"close")]
            )
            self.started = True
            await self._write(response)
        elif message["type"] == "http.response.body":
            if message.get("body"):
                await self._write(h11.Data(data=message["body"]))
            if not message.get("more_body", False):
                self._ended = True
                await self._write(h11.EndOfMessage())

    async def _write(self, event: h11.Event) -> None:
        data = self._conn.send(event)
        try:
            if data:
                await self._stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._gone.set()
            raise OSError("the HTTP peer went away") from None


async def _linger(stream: trio.SocketStream) -> None:
    """Half-close, then read (bounded in bytes and time) what the peer had already sent:
    closing with unread data makes the kernel send RST, which can destroy the answer just
    written before the peer reads it."""
    try:
        await stream.send_eof()
        with trio.move_on_after(_LINGER_S):
            left = _LINGER_BYTES
            while left > 0 and (data := await stream.receive_some(left)):
                left -= len(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


async def _send_simple(
    stream: trio.SocketStream, conn: h11.Connection, status: int, reason: str
) -> None:
    body = reason.encode() + b"\n"
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    try:
        if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            data = conn.send(h11.Response(status_code=status, headers=headers))
            data += conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage())
            await stream.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError, h11.LocalProtocolError):
        pass
