"""A small real HTTP/1.1 origin for the guard's tests: h11 over trio, TLS from trustme.

It serves fixed routes (pages, redirects, drips, bombs, caps, robots.txt) and records what it
saw: connections, each request's method, target and headers, and the TLS SNI names.
"""

from __future__ import annotations

import functools
import json
import ssl
import urllib.parse
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache

import h11
import trio
import trustme

WAIT_S = 10.0  # the bound on every wait in tests/net: far past any honest run, short of a hang
PAGE = b"<html><head><title>Hello</title></head><body>hello</body></html>"
DRIP_INTERVAL_S = 0.05
BOMB_DECODED_BYTES = 20_000_000


@dataclass
class Reply:
    """What a route answers; ``drip`` sends the body one byte per interval, forever; ``hold``
    keeps the answer back until the test sets it, ``hold_body`` the body after the headers."""

    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    chunked: bool = False
    drip: bool = False
    hangup: bool = False  # close the connection without any response
    hold: trio.Event | None = None  # answer only once it is set (a step held mid-way)
    hold_body: trio.Event | None = None  # send the headers, then the body once it is set
    drip_bytes: int = 1  # what ``drip`` sends each interval
    # Sent as they stand, ``hold_body`` awaited after the first, then the connection closed:
    # a framing h11 would refuse to send (Content-Length beside Transfer-Encoding).
    raw: tuple[bytes, ...] = ()


@dataclass(frozen=True)
class Seen:
    """One request as the origin received it."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes


Route = Callable[[Seen], Reply]


@dataclass
class Origin:
    """A running origin; ``port`` is set once it listens on 127.0.0.1."""

    scheme: str
    port: int = 0
    connections: int = 0
    requests: list[Seen] = field(default_factory=list)
    sni_names: list[str | None] = field(default_factory=list)
    robots: Reply = field(default_factory=lambda: Reply(404))
    routes: dict[str, Route] = field(default_factory=dict)
    cut: list[str] = field(default_factory=list)  # paths whose client left mid-answer
    _requested: dict[str, trio.Event] = field(default_factory=dict)

    def url(self, host: str, path: str = "/page") -> str:
        """The URL of ``path`` on this origin under the name ``host``."""
        return f"{self.scheme}://{host}:{self.port}{path}"

    def paths(self) -> list[str]:
        """The paths requested so far, in order."""
        return [urllib.parse.urlsplit(seen.target).path for seen in self.requests]

    async def wait_request(self, path: str) -> None:
        """Return once ``path`` has been requested (at once if it already was); the caller
        bounds the wait (``trio.fail_after``)."""
        if path not in self.paths():
            await self._requested.setdefault(path, trio.Event()).wait()

    async def serve(
        self,
        *,
        ssl_context: ssl.SSLContext | None,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve until cancelled; reports started once ``port`` is bound."""
        tcp = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = tcp[0].socket.getsockname()[1]
        listeners: list[trio.abc.Listener[trio.abc.Stream]] = list(tcp)
        if ssl_context is not None:
            ssl_context.sni_callback = self._record_sni
            listeners = [
                trio.SSLListener(listener, ssl_context, https_compatible=True) for listener in tcp
            ]
        task_status.started()
        await trio.serve_listeners(self._serve_stream, listeners)

    def _record_sni(self, _sock: ssl.SSLObject, name: str | None, _ctx: ssl.SSLContext) -> None:
        self.sni_names.append(name)

    async def _serve_stream(self, stream: trio.abc.Stream) -> None:
        self.connections += 1
        conn = h11.Connection(h11.SERVER)
        try:
            while await self._serve_one(conn, stream):
                conn.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError):
            pass  # the client went away or failed the handshake: its test says how
        finally:
            await trio.aclose_forcefully(stream)

    async def _serve_one(self, conn: h11.Connection, stream: trio.abc.Stream) -> bool:
        event = await _next_event(conn, stream)
        if not isinstance(event, h11.Request):
            return False
        body = b""
        while not isinstance(part := await _next_event(conn, stream), h11.EndOfMessage):
            if isinstance(part, h11.Data):
                body += part.data
        seen = Seen(
            event.method.decode(),
            event.target.decode(),
            {k.decode(): v.decode("latin-1") for k, v in event.headers},
            body,
        )
        self.requests.append(seen)
        self._requested.setdefault(urllib.parse.urlsplit(seen.target).path, trio.Event()).set()
        reply = self._route(seen)
        if reply.hangup:
            return False
        if reply.hold is not None:
            await reply.hold.wait()
        try:
            await _send(conn, stream, reply, head=seen.method == "HEAD")
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.cut.append(urllib.parse.urlsplit(seen.target).path)
            raise
        return conn.our_state is h11.DONE and conn.their_state is h11.DONE

    def _route(self, seen: Seen) -> Reply:
        parts = urllib.parse.urlsplit(seen.target)
        path, query = parts.path, dict(urllib.parse.parse_qsl(parts.query))
        if path in self.routes:
            return self.routes[path](seen)
        if path == "/robots.txt":
            return self.robots
        head, _, arg = path[1:].partition("/")
        return _builtin(head, arg, query, seen)


def _builtin(head: str, arg: str, query: dict[str, str], seen: Seen) -> Reply:
    if head == "page":
        return Reply(headers=[("content-type", "text/html; charset=utf-8")], body=PAGE)
    if head == "echo":
        echoed = {"method": seen.method, "headers": seen.headers, "body": seen.body.decode()}
        return Reply(
            headers=[("content-type", "application/json")], body=json.dumps(echoed).encode()
        )
    if head == "redirect":
        return Reply(int(query.get("status", "302")), [("location", query["to"])])
    if head == "chain":
        hops = int(arg)
        return (
            Reply(302, [("location", f"/chain/{hops - 1}")])
            if hops
            else _builtin("page", "", {}, seen)
        )
    if head == "drip":
        return Reply(headers=[("content-type", "text/plain")], drip=True)
    if head == "bytes":
        return Reply(body=b"a" * int(arg))
    if head == "chunked-bytes":
        return Reply(body=b"a" * int(arg), chunked=True)
    if head in ("gzip", "deflate", "raw-deflate"):
        return _encoded(head, b"a" * int(arg))
    if head == "bomb":
        return Reply(headers=[("content-encoding", "gzip")], body=gzip_bomb(), chunked=True)
    if head == "set-cookie":
        return Reply(headers=[("set-cookie", "session=secret; Path=/")], body=b"ok")
    if head == "status":
        return Reply(int(arg), body=b"status")
    return Reply(404, body=b"no such route")


def _encoded(coding: str, data: bytes) -> Reply:
    wbits = {"gzip": 31, "deflate": 15, "raw-deflate": -15}[coding]
    compressor = zlib.compressobj(9, zlib.DEFLATED, wbits)
    body = compressor.compress(data) + compressor.flush()
    name = "gzip" if coding == "gzip" else "deflate"
    return Reply(headers=[("content-encoding", name)], body=body)


@cache
def gzip_bomb() -> bytes:
    """About 20 KB of gzip that inflates to ``BOMB_DECODED_BYTES`` zero bytes."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(1_000_000)
    parts = [compressor.compress(zeros) for _ in range(BOMB_DECODED_BYTES // len(zeros))]
    return b"".join(parts) + compressor.flush()


async def _next_event(
    conn: h11.Connection, stream: trio.abc.Stream
) -> h11.Event | type[h11.PAUSED]:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event  # type: ignore[return-value]
        conn.receive_data(bytes(await stream.receive_some(65536)))


async def _send(conn: h11.Connection, stream: trio.abc.Stream, reply: Reply, *, head: bool) -> None:
    if reply.raw:
        await _send_raw(stream, reply)
        return
    headers = list(reply.headers)
    if not (reply.chunked or reply.drip):
        headers.append(("content-length", str(len(reply.body))))
    await stream.send_all(conn.send(h11.Response(status_code=reply.status, headers=headers)) or b"")
    if head:  # a HEAD answer declares the body's length but sends none (RFC 9110 §9.3.2)
        await stream.send_all(conn.send(h11.EndOfMessage()) or b"")
        return
    if reply.hold_body is not None:
        await reply.hold_body.wait()
    if reply.drip:
        while True:
            await stream.send_all(conn.send(h11.Data(data=b"x" * reply.drip_bytes)) or b"")
            await trio.sleep(DRIP_INTERVAL_S)
    for start in range(0, len(reply.body), 16384):
        await stream.send_all(conn.send(h11.Data(data=reply.body[start : start + 16384])) or b"")
    await stream.send_all(conn.send(h11.EndOfMessage()) or b"")


async def _send_raw(stream: trio.abc.Stream, reply: Reply) -> None:
    first, *rest = reply.raw
    await stream.send_all(first)
    if reply.hold_body is not None:
        await reply.hold_body.wait()
    for piece in rest:
        await stream.send_all(piece)


async def start_https_origin(
    nursery: trio.Nursery, ca: trustme.CA, names: tuple[str, ...]
) -> Origin:
    """An HTTPS origin on 127.0.0.1 whose certificate (from ``ca``) covers ``names`` only."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*names).configure_cert(context)
    served = Origin("https")
    await nursery.start(functools.partial(served.serve, ssl_context=context))
    return served
