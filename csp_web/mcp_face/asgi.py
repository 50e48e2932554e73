"""A small HTTP/1.1 server for one ASGI app, on trio listeners, built on h11.

The MCP SDK's streamable HTTP transport is an ASGI app. Hypercorn has a trio worker too;
this server is kept for its per-connection admission (``Admit``: the peer's uid checked
before any HTTP is read), which Hypercorn has no hook for (docs/mcp.md, "Why not
Hypercorn"). It is h11's own trio example server grown just enough for ASGI: one request
per connection (``Connection: close``, so a held-open response stream never blocks a second
request behind it), a streamed response body, ``http.disconnect`` when the peer goes away.
Limits: the request head must arrive within ``head_timeout_s`` (slowloris), the body is
capped at ``max_body_bytes`` (413), at most ``max_connections`` are served at once (more wait
in the listen backlog).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import h11
import trio

from csp_web.net.h11_server import BadRequest, linger, read_request, send_simple, serve_h11

log = logging.getLogger(__name__)

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Message, Receive, Send], Awaitable[None]]
# A refusal reason for a new connection (str), or the uid of the peer it admits (int)
# (``peers.uid_gate``); awaited in the connection's own task, so a slow answer holds up only
# that connection.
Admit = Callable[[trio.SocketStream], Awaitable[str | int]]
# The scope key holding the admitted peer's uid (None when no ``Admit`` ran): the face's
# tools/call reads it (``owners``), as the daemon sees every HTTP peer as the face's own uid.
PEER_UID = "csp_web.peer_uid"


class PeerGone(OSError):
    """The HTTP peer left: a write to it failed (what ``send`` raises from then on)."""


@dataclass(frozen=True)
class HttpLimits:
    # The SDK's own request cap (mcp.server.transport_security.DEFAULT_MAX_REQUEST_BODY_SIZE).
    max_body_bytes: int = 4 * 1024 * 1024
    # As CSP/1's started-frame limit (SPEC L-5).
    head_timeout_s: float = 10.0
    # As CSP/1's tasks in flight per connection (SPEC L-4).
    max_connections: int = 64


async def serve_asgi(
    app: App,
    listeners: list[trio.SocketListener],
    limits: HttpLimits = HttpLimits(),
    *,
    admit: Admit | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``listeners`` (owned from here on) until cancelled, at most
    ``limits.max_connections`` at once (``csp_web.net.h11_server.serve_h11``); a connection
    ``admit`` gives a reason to refuse is answered 403 with it, before anything is read."""
    handle = partial(_admitted, app=app, limits=limits, admit=admit)
    await serve_h11(
        listeners, handle, max_connections=limits.max_connections, task_status=task_status
    )


async def _admitted(
    stream: trio.abc.Stream, *, app: App, limits: HttpLimits, admit: Admit | None
) -> None:
    assert isinstance(stream, trio.SocketStream)  # serve_asgi's listeners are socket listeners
    admission = await admit(stream) if admit is not None else None
    if not isinstance(admission, str):
        await serve_connection(stream, app, limits, peer_uid=admission)
        return
    refusal = admission
    log.warning("MCP HTTP connection refused: %s", refusal)
    async with stream:
        await send_simple(stream, h11.Connection(h11.SERVER), 403, refusal)
        await linger(stream)


async def serve_connection(
    stream: trio.SocketStream, app: App, limits: HttpLimits, *, peer_uid: int | None = None
) -> None:
    """One request on ``stream``, answered by ``app`` (its scope's ``PEER_UID`` is
    ``peer_uid``); the stream is closed at the end."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=64 * 1024)
    async with stream:
        try:
            with trio.fail_after(limits.head_timeout_s):
                read = await read_request(stream, conn, max_body_bytes=limits.max_body_bytes)
        except BadRequest as exc:
            await send_simple(stream, conn, exc.status, exc.reason)
            await linger(stream)
            return
        except h11.RemoteProtocolError as exc:
            await send_simple(stream, conn, exc.error_status_hint, "bad request")
            await linger(stream)
            return
        except (trio.TooSlowError, trio.BrokenResourceError):
            return
        if read is None:
            return  # closed before a request
        request, body = read
        exchange = _Exchange(stream, conn, body)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(exchange.watch_disconnect)
            try:
                await app(_scope(request, stream, peer_uid), exchange.receive, exchange.send)
            except Exception as exc:
                if not _peer_left(exc):
                    log.exception("the MCP HTTP app failed on %s", request.target)
                else:
                    log.info("the HTTP peer left before its response to %s ended", request.target)
            finally:
                nursery.cancel_scope.cancel()
        if not exchange.started and not exchange.broken:
            await send_simple(stream, conn, 500, "internal error")


def _peer_left(exc: Exception) -> bool:
    """Whether ``exc`` is only the peer leaving (PeerGone, alone or every leaf of a group):
    the app's own affair, worth a log line, not a traceback."""
    if isinstance(exc, ExceptionGroup):
        return exc.split(PeerGone)[1] is None
    return isinstance(exc, PeerGone)


def _scope(request: h11.Request, stream: trio.SocketStream, peer_uid: int | None) -> Message:
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
        PEER_UID: peer_uid,
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
        self._broken = False  # a write failed: the peer has gone

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
        """Write ``message``; raises PeerGone once the peer has left (ASGI: send on a closed
        connection raises an OSError), and ignores what comes after the response ended. A
        second ``http.response.start`` (an app answering an error after it began its
        response) is dropped: h11 cannot start another response on this connection."""
        if self._broken:
            raise PeerGone("the HTTP peer went away")
        if self._ended:
            return
        if message["type"] == "http.response.start":
            if self.started:
                log.warning("the MCP HTTP app started a second response; dropped")
                return
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
            self._broken = True
            self._gone.set()
            raise PeerGone("the HTTP peer went away") from None

    @property
    def broken(self) -> bool:
        """Whether a write found the peer gone."""
        return self._broken
