"""Egress through an HTTP forward proxy (``web.proxy``), without widening what the guard allows.

The guard resolves and judges the target itself (``PinnedBackend``), then asks the proxy to
``CONNECT`` to the one approved *address*, never to the name: the proxy's own DNS never
decides where a request goes, so a proxy that can reach the company's private network gives
a web op no way in, and a hostile DNS answer for a private address is refused before the proxy
hears of it. TLS to the origin then runs inside the tunnel with the name as SNI, as without a
proxy. The proxy itself is the operator's choice and is not judged by the deny table.

    proxy = parse_proxy("http://proxy.corp:3128")
    stream = await open_tunnel(backend, proxy, "93.184.215.14", 443, timeout_s=10.0)

``open_tunnel`` serves fetch's httpcore backend (``backend.PinnedBackend``); ``open_trio_tunnel``
the browser's guard proxy (``guard_proxy.py``), whose upstream connections are trio streams.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpcore
import trio

from csp_web.config import proxy_address
from csp_web.core.api.errors import OpError
from protocol import ErrorCode

MAX_REPLY_BYTES = 8 * 1024  # a CONNECT answer is a status line and a few headers
_STATUS_LINE = re.compile(rb"HTTP/1\.[01] ([0-9]{3})[^\r\n]*\r\n")


@dataclass(frozen=True)
class Proxy:
    """Where the forward proxy listens."""

    host: str
    port: int


def parse_proxy(url: str) -> Proxy:
    """The proxy an ``http://host:port`` URL names; raises ValueError for any other shape."""
    return Proxy(*proxy_address(url))


def connect_request(address: str, port: int) -> bytes:
    """The CONNECT request for ``address`` (an IP literal the guard approved) and ``port``."""
    host = f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
    target = f"{host}:{port}"
    return f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode("ascii")


async def open_tunnel(
    backend: httpcore.AsyncNetworkBackend,
    proxy: Proxy,
    address: str,
    port: int,
    *,
    timeout_s: float | None,
) -> httpcore.AsyncNetworkStream:
    """A stream to ``address``:``port`` through ``proxy``'s CONNECT tunnel; the caller owns it.

    Raises OpError(PROXY_FAILED): ``unreachable`` (no TCP to the proxy), ``connect_<status>``
    (it refused the tunnel), ``bad_reply`` (an answer that is not HTTP, too long, or with
    bytes past its end) or ``timeout``.
    """
    try:
        stream = await backend.connect_tcp(proxy.host, proxy.port, timeout=timeout_s)
    except (httpcore.ConnectError, httpcore.ConnectTimeout, OSError) as exc:
        raise OpError(ErrorCode.PROXY_FAILED, "unreachable") from exc
    opened = False
    try:
        await stream.write(connect_request(address, port), timeout=timeout_s)
        _check_reply(await _read_reply(lambda n: stream.read(n, timeout=timeout_s)))
        opened = True
    except httpcore.TimeoutException as exc:
        raise OpError(ErrorCode.PROXY_FAILED, "timeout") from exc
    except httpcore.NetworkError as exc:
        raise OpError(ErrorCode.PROXY_FAILED, "bad_reply") from exc
    finally:
        if not opened:
            await stream.aclose()
    return stream


async def open_trio_tunnel(proxy: Proxy, address: str, port: int) -> trio.SocketStream:
    """``open_tunnel`` on trio streams; the caller owns the stream and bounds the time (the
    guard proxy's connect runs under ``timeout_s``). Raises OpError(PROXY_FAILED):
    ``unreachable``, ``connect_<status>`` or ``bad_reply`` (any hang-up before the answer)."""
    try:
        stream = await trio.open_tcp_stream(proxy.host, proxy.port)
    except OSError as exc:
        raise OpError(ErrorCode.PROXY_FAILED, "unreachable") from exc
    opened = False
    try:
        await stream.send_all(connect_request(address, port))
        _check_reply(await _read_reply(stream.receive_some))
        opened = True
    except (trio.BrokenResourceError, OSError) as exc:
        raise OpError(ErrorCode.PROXY_FAILED, "bad_reply") from exc
    finally:
        if not opened:
            await trio.aclose_forcefully(stream)
    return stream


async def _read_reply(read: Callable[[int], Awaitable[bytes]]) -> bytes:
    """The proxy's answer up to and including its blank line, read by ``read(max_bytes)``."""
    reply = b""
    while b"\r\n\r\n" not in reply:
        chunk = await read(MAX_REPLY_BYTES)
        if not chunk:
            raise OpError(ErrorCode.PROXY_FAILED, "bad_reply")
        reply += chunk
        if len(reply) > MAX_REPLY_BYTES:
            raise OpError(ErrorCode.PROXY_FAILED, "bad_reply")
    return reply


def _check_reply(reply: bytes) -> None:
    head, _, rest = reply.partition(b"\r\n\r\n")
    match = _STATUS_LINE.match(head + b"\r\n")
    if match is None or rest:  # nothing may follow: the origin has not been spoken to yet
        raise OpError(ErrorCode.PROXY_FAILED, "bad_reply")
    status = int(match.group(1))
    if not 200 <= status < 300:
        raise OpError(ErrorCode.PROXY_FAILED, f"connect_{status}")
