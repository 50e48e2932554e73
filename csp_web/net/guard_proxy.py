"""The guard proxy: a forward proxy applying the same guard as fetch, for clients that make
their own requests. Every Chromium request goes through it (the browser specialist), and it
runs without Chromium for any process tree its peer check admits (exec's sandbox, next).

Chromium is launched with ``--proxy-server`` pointing here (127.0.0.1, port 0) and its
loopback bypass removed, and every BrowserContext the engine makes is given a proxy of its
own: a **lane**, another listener of this proxy on 127.0.0.1 port 0 whose port only that
context is told of. So every HTTP request and every tunnel (https, wss) arrives as one proxy
request, and the port it arrived on says which context made it. Each is judged exactly as
``web.fetch`` judges a URL:

- ``CONNECT host:port``: the URL gate on ``https://host:port/`` (scheme, port, host syntax,
  blocked names, IP literals through the deny table), then ``resolve_checked`` (every answer
  through the deny table, ``allow_private`` as configured), then a TCP connect to one of
  exactly those addresses (pinned: no second lookup for a rebinding DNS to win). Unless plain
  http is allowed, the tunnel's first byte must start a TLS handshake, so a ``ws://`` tunnel
  cannot carry cleartext.
- ``GET http://...`` (only when ``allow_http``): the same, then the request is forwarded
  in origin form with ``Connection: close``, its answer relayed with ``Connection: close``,
  and the client connection ends (``proxy_wire.relay_one``): a next request, to whatever
  host, comes on a connection of its own and is judged there. An answer that cannot be
  relayed (malformed, reset, cut short) is a ``502`` naming why before its head went to the
  client, a closed connection after; one log line, no traceback.

With an ``upstream`` forward proxy (``web.proxy``), the connect to the checked address is a
``CONNECT`` to that address through it (``forward_proxy.open_trio_tunnel``), as fetch's own
client does: the guard still resolves and judges the target, the proxy never hears a name.

A refusal answers ``403`` with ``X-Csp-Guard: <code>:<detail>``, is counted, and is kept on
the lane it came through, so an action can name the guard's code instead of Chromium's net
error, and no other context can see it. It is kept before a byte of the answer is written:
when Chromium reports the failure, the record is already there. Requests on the main port
are the browser's own, made outside any context (update checks, sign-in and safe-browsing
pings): no client asked for them, so every one is refused (``url_rejected:outside-context``)
and kept on no context's lane; nothing leaves the machine that no op asked for. Only
sockets held by the admitted process tree (for the browser: under the Playwright driver,
Chromium) may use the proxy (``proxy_peers.py``): a peer found elsewhere (another local
process) is closed without a byte.
A **purpose lane** (``open_unix_lane``, for exec: specialists/tool/exec/_network.py) listens
on a Unix socket instead, for one process tree of one uid (SO_PEERCRED) in one network
namespace (that of its first peer, when pinned), and passes only the ``host:port``
destinations it was opened with (proxy_lanes.py), then judges them as above, with the listed
name as the ``Host`` of a forwarded request and as the only server name a tunnel's TLS may ask
for; it holds a capped number of connections, answers a budget of refusals (then closes
connections unread), and lives as long as the block that opened it.
Owns its listeners; ``serve`` runs until cancelled.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import itertools
import logging
import os
import socket
import threading
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import trio

from csp_web.core.api.errors import OpError
from csp_web.core.transports.unix import peer_credentials
from csp_web.net import GuardConfig, Resolver, SystemResolver, check_url
from csp_web.net.resolver import resolve_checked
from protocol import ErrorCode

from .forward_proxy import Proxy, open_trio_tunnel
from .proxy_lanes import ANY_TARGET, SNI_MISMATCH, LanePolicy
from .proxy_peers import PeerCheck
from .proxy_wire import CHUNK_BYTES, read_head, relay_one, splice, split_authority, target_of
from .tls_sni import read_hello

log = logging.getLogger(__name__)
OUTSIDE_CONTEXT = "outside-context"  # the refusal of every request on the main port
MAX_LANE_REFUSALS = 64  # a browser lane keeps its latest refusals, a purpose lane its first
_LOGGED_REFUSALS = 8  # per lane at INFO; the rest at DEBUG (a loop must not fill the log)
_LANE_BACKLOG = 128
_PEER_CHECK_THREADS = 2  # peer checks (proxy_peers.py) in worker threads at once
_HOP_HEADERS = frozenset(
    {b"connection", b"proxy-connection", b"keep-alive", b"proxy-authorization", b"te", b"upgrade"}
)
_TLS_HANDSHAKE = 0x16  # the first byte of a TLS record carrying a ClientHello (RFC 8446 §5.1)
# A plain http request's method, absolute URL, headers and the bytes read past its head.
_Request = tuple[bytes, str, list[tuple[bytes, bytes]], bytes]


@dataclass(frozen=True)
class Refusal:
    """One request the guard refused: which lane it came through, where it went, why."""

    lane: int  # 0: the main port (the browser's own requests, no context's)
    target: str
    code: ErrorCode
    detail: str
    seq: int  # its number on its lane, from 1

    @property
    def error(self) -> str:
        return f"{self.code}:{self.detail}"


class Lane:
    """One context's own listener on the proxy and the refusals of what came through it.

    A browser lane keeps its latest refusals (an action reads those since it began); a
    purpose lane keeps its first, so a command cannot push what it tried first out of its
    reply, and counts the rest (``dropped``).

    Thread-safe: the proxy's trio thread records, the action reading it runs on another."""

    def __init__(self, number: int, port: int, policy: LanePolicy | None = None) -> None:
        self.number = number
        self.port = port
        self.policy = policy  # a purpose lane's destinations (proxy_lanes.py); None: any
        self.active = 0  # connections open now (a purpose lane holds at most its cap)
        self.over_cap = 0  # connections a purpose lane closed at once, past its cap
        self.over_budget = 0  # connections a purpose lane closed unread, past its refusals
        self.dropped = 0  # refusals recorded but not kept (a purpose lane's past its first)
        self.failures = 0  # connections a bug in the proxy cost
        self.broken = 0  # relays a client or an upstream broke (a reset, a malformed answer)
        self.namespace: str | None = None  # a pinned purpose lane's peers' network namespace
        self.closed = False
        self._lock = threading.Lock()
        self._count = 0
        keep = None if policy is not None else MAX_LANE_REFUSALS
        self._kept: collections.deque[Refusal] = collections.deque(maxlen=keep)
        self.scope = trio.CancelScope()  # its listener's and connections': entered by the proxy

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def mark(self) -> int:
        """How many refusals so far: an action notes it before it starts."""
        with self._lock:
            return self._count

    def record(self, target: str, code: ErrorCode, detail: str) -> Refusal:
        with self._lock:
            self._count += 1
            refusal = Refusal(self.number, target, code, detail, self._count)
            if self.policy is not None and len(self._kept) >= MAX_LANE_REFUSALS:
                self.dropped += 1
            else:
                self._kept.append(refusal)
        return refusal

    @property
    def refused_total(self) -> int:
        """Every connection this lane refused: recorded, or closed unread past its cap or
        its budget of refusals."""
        with self._lock:
            return self._count + self.over_budget + max(0, self.over_cap - 1)

    def refusals_since(self, mark: int) -> list[Refusal]:
        with self._lock:
            return [r for r in self._kept if r.seq > mark]

    def refusal_since(self, mark: int, host: str, port: int) -> Refusal | None:
        """The refusal on this lane that explains an action's net error: of ``host:port``
        (the URL it loaded), else the latest since ``mark`` (a redirect's hop)."""
        recent = self.refusals_since(mark)
        target = f"{host}:{port}"
        same = [r for r in recent if r.target == target]
        chosen = same or recent
        return chosen[-1] if chosen else None


@dataclass
class ProxyStats:
    tunnels: int = 0
    forwarded: int = 0
    refused: int = 0
    foreign_peers: int = 0
    lanes_opened: int = 0
    lanes_open: int = 0


class GuardProxy:
    """The proxy's settings and state; ``serve`` listens and sets ``port``.

    ``guard`` returns the guard settings in effect now (web.guard, reloadable); ``resolver`` is
    the guard's DNS seam; ``peer_check(peer, local)`` says whether a connection may be served;
    ``upstream`` is the forward proxy every upstream connection tunnels through (web.proxy).
    """

    def __init__(
        self,
        guard: Callable[[], GuardConfig],
        *,
        resolver: Resolver | None = None,
        peer_check: PeerCheck | None = None,
        upstream: Proxy | None = None,
    ) -> None:
        self.guard = guard
        self.resolver: Resolver = resolver or SystemResolver()
        self.peer_check = peer_check
        self.upstream = upstream
        self.port = 0
        self.stats = ProxyStats()
        self.main = Lane(0, 0)  # the main port's refusals: read by no action
        # Called with each refusal as it is made (logs, tests waiting for one); must not block.
        self.on_refusal: Callable[[Refusal], None] | None = None
        self._numbers = itertools.count(1)
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._checks = trio.CapacityLimiter(_PEER_CHECK_THREADS)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _record(self, lane: Lane, target: str, exc: OpError) -> str:
        self.stats.refused += 1
        refusal = lane.record(target, exc.code, exc.detail)
        level = logging.INFO if refusal.seq <= _LOGGED_REFUSALS else logging.DEBUG
        log.log(level, "proxy refused %s (lane %d): %s", target, lane.number, refusal.error)
        if self.on_refusal is not None:
            self.on_refusal(refusal)
        return refusal.error

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on 127.0.0.1 port 0 and serve it and every lane until cancelled."""
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        self.main.port = self.port
        try:
            async with trio.open_nursery() as nursery:
                self._token, self._nursery = trio.lowlevel.current_trio_token(), nursery
                task_status.started()
                await trio.serve_listeners(self._serving(self.main), listeners)
        finally:
            self._token = self._nursery = None

    # ---- lanes: one per context (callable from any thread) ------------------------------

    def open_lane(self) -> Lane:
        """A new listener on 127.0.0.1 port 0 for one context, served by ``serve``'s loop.
        It listens on return (a connection made at once waits in its backlog). Raises
        OSError when the proxy is not serving or no socket can be had."""
        token = self._token
        if token is None:
            raise OSError(errno.ENOTCONN, "the guard proxy is not serving")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", 0))
            sock.listen(_LANE_BACKLOG)
            lane = Lane(next(self._numbers), sock.getsockname()[1])
            token.run_sync_soon(self._start_lane, lane, sock)
        except trio.RunFinishedError as exc:
            sock.close()
            raise OSError(errno.ENOTCONN, "the guard proxy is not serving") from exc
        except BaseException:
            sock.close()
            raise
        self.stats.lanes_opened += 1
        self.stats.lanes_open += 1
        return lane

    def close_lane(self, lane: Lane) -> None:
        """Stop ``lane``'s listener and end every connection that came through it."""
        if lane.closed:
            return
        lane.closed = True
        self.stats.lanes_open -= 1
        token = self._token
        if token is not None:
            with contextlib.suppress(trio.RunFinishedError):  # its listener is closed then
                token.run_sync_soon(lane.scope.cancel)

    @asynccontextmanager
    async def open_unix_lane(self, path: str, policy: LanePolicy) -> AsyncIterator[Lane]:
        """A purpose lane listening on a new Unix socket at ``path`` (mode 0666: the directory
        it is in decides who reaches it), served in this task until the block ends, when its
        connections are cut and the socket file removed. Needs no ``serve``. Raises OSError
        when the socket cannot be made."""
        lane = Lane(next(self._numbers), 0, policy)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(path)
            os.chmod(path, 0o666)
            sock.listen(_LANE_BACKLOG)
            listener = trio.SocketListener(trio.socket.from_stdlib_socket(sock))
        except BaseException:
            sock.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            raise
        self.stats.lanes_opened += 1
        self.stats.lanes_open += 1
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.serve_listeners, self._serving_purpose(lane), [listener])
                try:
                    yield lane
                finally:
                    lane.closed = True
                    nursery.cancel_scope.cancel()
        finally:
            self.stats.lanes_open -= 1
            if lane.over_budget:
                log.info("lane %d closed %d connections unread", lane.number, lane.over_budget)
            sock.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def _serving_purpose(self, lane: Lane) -> Callable[[trio.SocketStream], Awaitable[None]]:
        policy = lane.policy
        assert policy is not None

        async def serve_one(stream: trio.SocketStream) -> None:
            if lane.mark() >= policy.max_refusals:  # closed unread: see MAX_REFUSALS
                lane.over_budget += 1
                if lane.over_budget == 1:
                    log.warning("lane %d: %d refusals, reading no more", lane.number, lane.mark())
                await trio.aclose_forcefully(stream)
                return
            if lane.active >= policy.max_connections:
                lane.over_cap += 1
                if lane.over_cap == 1:  # a flood is one refusal (and one log line), not each
                    self._record(lane, ANY_TARGET, policy.over_cap())
                await trio.aclose_forcefully(stream)
                return
            lane.active += 1
            try:
                if not _peer_admitted(stream, lane, policy):
                    self.stats.foreign_peers += 1
                    await trio.aclose_forcefully(stream)
                    return
                await self._serve_one(stream, lane, check_peer=False)
            finally:
                lane.active -= 1

        return serve_one

    def _start_lane(self, lane: Lane, sock: socket.socket) -> None:
        try:
            if self._nursery is None:
                raise RuntimeError("the proxy stopped")
            self._nursery.start_soon(self._serve_lane, lane, sock)
        except RuntimeError:  # stopped, or its nursery closing: the lane never serves
            sock.close()

    async def _serve_lane(self, lane: Lane, sock: socket.socket) -> None:
        try:
            with lane.scope:
                listener = trio.SocketListener(trio.socket.from_stdlib_socket(sock))
                await trio.serve_listeners(self._serving(lane), [listener])
        finally:
            sock.close()

    def _serving(self, lane: Lane) -> Callable[[trio.SocketStream], Awaitable[None]]:
        async def serve_one(stream: trio.SocketStream) -> None:
            await self._serve_one(stream, lane)

        return serve_one

    async def _serve_one(
        self, stream: trio.SocketStream, lane: Lane, *, check_peer: bool = True
    ) -> None:
        try:
            async with stream:
                if (
                    check_peer
                    and self.peer_check is not None
                    and not await self._peer_allowed(stream)
                ):
                    self.stats.foreign_peers += 1
                    return
                await self._handle(stream, lane)
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # either side hung up (bare, or out of a nursery): nothing to report
        except* Exception:  # a bug must cost one connection, never the proxy (and the daemon)
            lane.failures += 1  # and one traceback per lane, not one per connection of a loop
            level = logging.ERROR if lane.failures == 1 else logging.DEBUG
            log.log(level, "proxy connection failed (lane %d)", lane.number, exc_info=True)

    async def _peer_allowed(self, stream: trio.SocketStream) -> bool:
        """``peer_check`` in a worker thread: its walk of /proc (proxy_peers.py) must not stall
        the event loop, the daemon's."""
        assert self.peer_check is not None
        peer, local = stream.socket.getpeername(), stream.socket.getsockname()
        return await trio.to_thread.run_sync(
            self.peer_check, peer, local, limiter=self._checks, abandon_on_cancel=True
        )

    async def _handle(self, stream: trio.SocketStream, lane: Lane) -> None:
        head, rest = await read_head(stream)
        if head is None:
            return
        method, target, headers, version = head
        if lane is self.main:  # the browser's own request: no op asked for it
            refusal = OpError(ErrorCode.URL_REJECTED, OUTSIDE_CONTEXT)
            await self._refuse(stream, lane, target.decode("latin-1"), refusal)
            return
        config, text = self.guard(), target.decode("latin-1")
        if lane.policy is not None:  # a purpose lane: its list first, then the whole guard
            verdict = lane.policy.judge(method == b"CONNECT", text)
            if verdict.refusal is not None:
                await self._refuse(stream, lane, verdict.named, verdict.refusal)
                return
            config, text = lane.policy.narrow(config), verdict.target
        if method == b"CONNECT":
            await self._tunnel(stream, lane, text, rest, config)
        else:
            await self._forward(stream, lane, (method, text, headers, rest), version, config)

    async def _open_checked(self, url: str, config: GuardConfig) -> tuple[trio.SocketStream, str]:
        """Gate, resolve, check and connect to ``url``'s host: the fetch guard, hop by hop.
        The connect is bounded by ``timeout_s`` in all (no op deadline is above it here), so
        a name answering with many silent addresses cannot stretch it. Through ``upstream``
        it is one CONNECT to the first checked address (OpError(PROXY_FAILED) when it fails),
        as ``backend.PinnedBackend`` does for fetch."""
        parsed = check_url(url, config)
        addresses = await resolve_checked(self.resolver, parsed.host, parsed.port, config)
        name = f"{parsed.host}:{parsed.port}"
        if self.upstream is not None:
            with trio.move_on_after(config.timeout_s):
                tunnel = await open_trio_tunnel(self.upstream, str(addresses[0]), parsed.port)
                return tunnel, name
            raise OpError(ErrorCode.PROXY_FAILED, "timeout")
        error: OSError = OSError(errno.ETIMEDOUT, "timeout")
        with trio.move_on_after(config.timeout_s):
            for address in addresses:
                try:
                    upstream = await trio.open_tcp_stream(str(address), parsed.port)
                    return upstream, name
                except OSError as exc:
                    error = exc
        raise OpError(ErrorCode.FETCH_FAILED, "connect") from error

    async def _refuse(
        self, stream: trio.SocketStream, lane: Lane, target: str, exc: OpError
    ) -> None:
        error = self._record(lane, target, exc)  # kept before a byte of the answer is sent
        body = f"refused by the guard: {error}\n".encode()
        await stream.send_all(
            b"HTTP/1.1 403 Forbidden\r\nX-Csp-Guard: " + error.encode() + b"\r\n"
            b"Content-Type: text/plain\r\nConnection: close\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )

    async def _tunnel(
        self, stream: trio.SocketStream, lane: Lane, target: str, rest: bytes, config: GuardConfig
    ) -> None:
        host, port = split_authority(target)
        try:
            upstream, _name = await self._open_checked(f"https://{target}/", config)
        except OpError as exc:
            await self._refuse(stream, lane, f"{host}:{port}", exc)
            return
        async with upstream:
            self.stats.tunnels += 1
            await stream.send_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            first = rest or await stream.receive_some(CHUNK_BYTES)
            if not first:
                return
            if not config.allow_http and first[0] != _TLS_HANDSHAKE:
                cut = OpError(ErrorCode.URL_REJECTED, "http-not-allowed")
                self._record(lane, f"{host}:{port}", cut)
                return
            if lane.policy is not None and first[0] == _TLS_HANDSHAKE:
                first, name = await _client_hello(stream, first)
                if name is not None and name != host:
                    cut = OpError(ErrorCode.URL_REJECTED, SNI_MISMATCH)
                    self._record(lane, _printable_host(name, port), cut)
                    return
            await upstream.send_all(first)
            await splice(stream, upstream)

    async def _forward(
        self,
        stream: trio.SocketStream,
        lane: Lane,
        request: _Request,
        version: bytes,
        config: GuardConfig,
    ) -> None:
        method, url, headers, rest = request
        try:
            upstream, name = await self._open_checked(url, config)
        except OpError as exc:
            await self._refuse(stream, lane, target_of(url), exc)
            return
        async with upstream:
            self.stats.forwarded += 1
            parsed = check_url(url, config)
            authority = (b"Host", urllib.parse.urlsplit(url).netloc.encode())
            if lane.policy is not None:  # the origin hears the listed name, not the command's
                headers = [*(h for h in headers if h[0].lower() != b"host"), authority]
            received = b"\r\n".join(  # the client's request as h11 reads it: for its framing
                [method + b" " + url.encode("latin-1") + b" " + version]
                + [k + b": " + v for k, v in headers]
            )
            sent = [(k, v) for k, v in headers if k.lower() not in _HOP_HEADERS]
            if not any(k.lower() == b"host" for k, _ in sent):  # HTTP/1.0 needs none
                sent.append(authority)
            sent.append((b"Connection", b"close"))
            broken = await relay_one(
                stream,
                upstream,
                sent=(method, parsed.target.encode(), sent),
                received=received + b"\r\n\r\n" + rest,
            )
        if broken is not None:  # a side's fault, no proxy bug: one line, never a traceback
            lane.broken += 1  # a client hanging up is routine (Chromium cancels): DEBUG
            loud = broken.side == "upstream" and lane.broken <= _LOGGED_REFUSALS
            level = logging.INFO if loud else logging.DEBUG
            log.log(level, "proxy relay to %s ended (lane %d): %s", name, lane.number, broken)


def _peer_admitted(stream: trio.SocketStream, lane: Lane, policy: LanePolicy) -> bool:
    """Whether a purpose lane's peer is its command's (``LanePolicy.uid``, ``pin_namespace``):
    the uid SO_PEERCRED says, and the network namespace of the pid it says, which must not be
    the daemon's and must be the one of the lane's first peer."""
    pid, uid = peer_credentials(stream.socket)
    if policy.uid is not None and uid != policy.uid:
        return False
    if not policy.pin_namespace:
        return True
    try:
        namespace = os.readlink(f"/proc/{pid}/ns/net")
    except OSError:  # gone already, or not ours to look at
        return False
    if namespace == os.readlink("/proc/self/ns/net"):
        return False
    if lane.namespace is None:
        lane.namespace = namespace
    return namespace == lane.namespace


async def _client_hello(stream: trio.SocketStream, first: bytes) -> tuple[bytes, str | None]:
    """The tunnel's first bytes, read on to the end of the ClientHello they start (at most
    ``MAX_HELLO_BYTES``), and the server name it asks for."""
    data = first
    hello = read_hello(data)
    while not hello.complete:
        more = await stream.receive_some(CHUNK_BYTES)
        if not more:
            break
        data += more
        hello = read_hello(data)
    return data, hello.name


def _printable_host(name: str, port: int) -> str:
    shown = "".join(c if " " < c < "\x7f" else "?" for c in name[:253])
    return f"{shown}:{port}"
