"""The forward proxy every Chromium request goes through, applying the same guard as fetch.

Chromium is launched with ``--proxy-server`` pointing here (127.0.0.1, port 0) and its
loopback bypass removed, so every HTTP request and every tunnel (https, wss) arrives as one
proxy request. Each is judged exactly as ``web.fetch`` judges a URL:

- ``CONNECT host:port``: the URL gate on ``https://host:port/`` (scheme, port, host syntax,
  blocked names, IP literals through the deny table), then ``resolve_checked`` (every answer
  through the deny table, ``allow_private`` as configured), then a TCP connect to one of
  exactly those addresses (pinned: no second lookup for a rebinding DNS to win). Unless plain
  http is allowed, the tunnel's first byte must start a TLS handshake, so a ``ws://`` tunnel
  cannot carry cleartext.
- ``GET http://...`` (only when ``allow_http``): the same, then the request is forwarded
  in origin form with ``Connection: close``.

A refusal answers ``403`` with ``X-Csp-Guard: <code>:<detail>``, is counted, and is kept in a
short list so an op can name the guard's code instead of Chromium's net error. Only sockets
held by processes under the Playwright driver (Chromium) may use the proxy: a peer found
elsewhere (another local process) is closed without a byte. Owns its listener; ``serve``
runs until cancelled.
"""

from __future__ import annotations

import collections
import errno
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from csp_web.core.errors import OpError
from csp_web.net import GuardConfig, Resolver, SystemResolver, check_url
from csp_web.net.resolver import resolve_checked
from protocol import ErrorCode

log = logging.getLogger("csp_web.browser.proxy")
MAX_HEAD_BYTES = 16 * 1024  # a proxy request head; Chromium's are well under 2 KiB
_CHUNK = 65536
_HOP_HEADERS = frozenset(
    {b"connection", b"proxy-connection", b"keep-alive", b"proxy-authorization", b"te", b"upgrade"}
)
_TLS_HANDSHAKE = 0x16  # the first byte of a TLS record carrying a ClientHello (RFC 8446 §5.1)


@dataclass(frozen=True)
class Refusal:
    """One request the guard refused: where it went and why (code:detail)."""

    target: str
    code: ErrorCode
    detail: str
    seq: int

    @property
    def error(self) -> str:
        return f"{self.code}:{self.detail}"


@dataclass
class ProxyStats:
    tunnels: int = 0
    forwarded: int = 0
    refused: int = 0
    foreign_peers: int = 0
    recent: collections.deque[Refusal] = field(default_factory=lambda: collections.deque(maxlen=64))


PeerCheck = Callable[[tuple[str, int], tuple[str, int]], bool]


class GuardProxy:
    """The proxy's settings and state; ``serve`` listens and sets ``port``.

    ``guard`` returns the guard settings in effect now (web.guard, reloadable); ``resolver`` is
    the guard's DNS seam; ``peer_check(peer, local)`` says whether a connection may be served.
    """

    def __init__(
        self,
        guard: Callable[[], GuardConfig],
        *,
        resolver: Resolver | None = None,
        peer_check: PeerCheck | None = None,
    ) -> None:
        self.guard = guard
        self.resolver: Resolver = resolver or SystemResolver()
        self.peer_check = peer_check
        self.port = 0
        self.stats = ProxyStats()
        # Called with each refusal as it is made (logs, tests waiting for one); must not block.
        self.on_refusal: Callable[[Refusal], None] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def seq(self) -> int:
        """How many refusals so far: an action notes it before it starts."""
        return self.stats.refused

    def refusal_since(self, seq: int, host: str, port: int) -> Refusal | None:
        """The refusal that explains an action's net error: of ``host:port`` (the URL it
        loaded), else the latest made since ``seq`` (a redirect's or a subresource's hop)."""
        recent = [r for r in self.stats.recent if r.seq > seq]
        target = f"{host}:{port}"
        same = [r for r in recent if r.target == target]
        chosen = same or recent
        return chosen[-1] if chosen else None

    def _record(self, target: str, exc: OpError) -> str:
        self.stats.refused += 1
        refusal = Refusal(target, exc.code, exc.detail, self.stats.refused)
        error = refusal.error
        self.stats.recent.append(refusal)
        log.info("proxy refused %s: %s", target, error)
        if self.on_refusal is not None:
            self.on_refusal(refusal)
        return error

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on 127.0.0.1 port 0 and serve until cancelled."""
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._serve_one, listeners)

    async def _serve_one(self, stream: trio.SocketStream) -> None:
        try:
            async with stream:
                if self.peer_check is not None:
                    peer = stream.socket.getpeername()
                    local = stream.socket.getsockname()
                    if not self.peer_check(peer, local):
                        self.stats.foreign_peers += 1
                        return
                await self._handle(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            return  # either side hung up; nothing to report to anyone
        except Exception:  # a bug must cost one connection, never the proxy (and the daemon)
            log.exception("proxy connection failed")

    async def _handle(self, stream: trio.SocketStream) -> None:
        head, rest = await _read_head(stream)
        if head is None:
            return
        method, target, headers = head
        config = self.guard()
        if method == b"CONNECT":
            await self._tunnel(stream, target.decode("latin-1"), rest, config)
        else:
            await self._forward(stream, method, target.decode("latin-1"), headers, rest, config)

    async def _open_checked(self, url: str, config: GuardConfig) -> tuple[trio.SocketStream, str]:
        """Gate, resolve, check and connect to ``url``'s host: the fetch guard, hop by hop."""
        parsed = check_url(url, config)
        addresses = await resolve_checked(self.resolver, parsed.host, parsed.port, config)
        error: OSError | None = None
        for address in addresses:
            try:
                with trio.fail_after(config.timeout_s):
                    upstream = await trio.open_tcp_stream(str(address), parsed.port)
                return upstream, f"{parsed.host}:{parsed.port}"
            except (OSError, trio.TooSlowError) as exc:
                error = exc if isinstance(exc, OSError) else OSError(errno.ETIMEDOUT, "timeout")
        raise OpError(ErrorCode.FETCH_FAILED, "connect") from error

    async def _refuse(self, stream: trio.SocketStream, target: str, exc: OpError) -> None:
        error = self._record(target, exc)
        body = f"refused by the guard: {error}\n".encode()
        await stream.send_all(
            b"HTTP/1.1 403 Forbidden\r\nX-Csp-Guard: " + error.encode() + b"\r\n"
            b"Content-Type: text/plain\r\nConnection: close\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )

    async def _tunnel(
        self, stream: trio.SocketStream, target: str, rest: bytes, config: GuardConfig
    ) -> None:
        host, port = _split_authority(target)
        try:
            upstream, _name = await self._open_checked(f"https://{target}/", config)
        except OpError as exc:
            await self._refuse(stream, f"{host}:{port}", exc)
            return
        async with upstream:
            self.stats.tunnels += 1
            await stream.send_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            first = rest or await stream.receive_some(_CHUNK)
            if not first:
                return
            if not config.allow_http and first[0] != _TLS_HANDSHAKE:
                self._record(f"{host}:{port}", OpError(ErrorCode.URL_REJECTED, "http-not-allowed"))
                return
            await upstream.send_all(first)
            await _splice(stream, upstream)

    async def _forward(
        self,
        stream: trio.SocketStream,
        method: bytes,
        url: str,
        headers: list[tuple[bytes, bytes]],
        rest: bytes,
        config: GuardConfig,
    ) -> None:
        try:
            upstream, _name = await self._open_checked(url, config)
        except OpError as exc:
            await self._refuse(stream, _target_of(url), exc)
            return
        async with upstream:
            self.stats.forwarded += 1
            parsed = check_url(url, config)
            lines = [method + b" " + parsed.target.encode() + b" HTTP/1.1"]
            lines += [k + b": " + v for k, v in headers if k.lower() not in _HOP_HEADERS]
            lines.append(b"Connection: close")
            await upstream.send_all(b"\r\n".join(lines) + b"\r\n\r\n" + rest)
            await _splice(stream, upstream)


async def _read_head(
    stream: trio.SocketStream,
) -> tuple[tuple[bytes, bytes, list[tuple[bytes, bytes]]] | None, bytes]:
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        if len(buffer) > MAX_HEAD_BYTES:
            await stream.send_all(b"HTTP/1.1 431 Request Header Fields Too Large\r\n\r\n")
            return None, b""
        data = await stream.receive_some(_CHUNK)
        if not data:
            return None, b""
        buffer += data
    head, _, rest = buffer.partition(b"\r\n\r\n")
    request_line, *header_lines = head.split(b"\r\n")
    parts = request_line.split(b" ")
    if len(parts) != 3:
        await stream.send_all(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        return None, b""
    headers = []
    for line in header_lines:
        name, _, value = line.partition(b":")
        headers.append((name.strip(), value.strip()))
    return (parts[0], parts[1], headers), rest


def _split_authority(target: str) -> tuple[str, int]:
    host, _, port = target.rpartition(":")
    return host.strip("[]"), int(port) if port.isdigit() else 0


def _target_of(url: str) -> str:
    import urllib.parse

    try:
        parts = urllib.parse.urlsplit(url)
        return f"{parts.hostname}:{parts.port or 80}"
    except ValueError:
        return url[:100]


async def _splice(a: trio.SocketStream, b: trio.SocketStream) -> None:
    """Copy both ways until either side ends, then end both."""

    async def pump(source: trio.SocketStream, sink: trio.SocketStream) -> None:
        try:
            while data := await source.receive_some(_CHUNK):
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        nursery.cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(pump, a, b)
        nursery.start_soon(pump, b, a)


# ---- who may use the proxy ---------------------------------------------------------------


def owned_by_tree(root_pid: Callable[[], int | None]) -> PeerCheck:
    """A peer check: the connecting socket must be held by ``root_pid()`` or a descendant
    (the Playwright driver and the Chromium processes it launched). Linux /proc only."""

    def check(peer: tuple[str, int], local: tuple[str, int]) -> bool:
        root = root_pid()
        if root is None:
            return False
        inode = _socket_inode(peer, local)
        if inode is None:
            return False
        return any(_holds(pid, inode) for pid in _tree(root))

    return check


def _hex_endpoint(address: tuple[str, int]) -> str:
    octets = [int(part) for part in address[0].split(".")]
    return f"{octets[3]:02X}{octets[2]:02X}{octets[1]:02X}{octets[0]:02X}:{address[1]:04X}"


def _socket_inode(peer: tuple[str, int], local: tuple[str, int]) -> str | None:
    """The inode of the client's end: the socket whose local end is our peer."""
    want_local, want_remote = _hex_endpoint(peer), _hex_endpoint(local)
    try:
        with open("/proc/net/tcp", encoding="ascii") as table:
            for line in table:
                cols = line.split()
                if len(cols) > 9 and cols[1] == want_local and cols[2] == want_remote:
                    return cols[9]
    except OSError:
        return None
    return None


def _tree(root: int) -> list[int]:
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as children:
                    todo += [int(child) for child in children.read().split()]
        except OSError:
            continue
    return found


def _holds(pid: int, inode: str) -> bool:
    want = f"socket:[{inode}]"
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == want:
                return True
        except OSError:
            continue
    return False
