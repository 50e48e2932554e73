"""``metrics.listen``: ``GET /metrics`` in Prometheus' text format, on a loopback port or a
Unix socket, for as long as the daemon serves (docs/metrics.md).

Served by the one small HTTP server (``csp_web.net.h11_server``), one request per
connection. On a Unix socket only the uids the daemon's socket admits are served
(``socket.allowed_uids``, else the daemon's own; SO_PEERCRED), as the MCP face does; on a
loopback port any local process may read, as with any Prometheus exporter, but only with a
Host naming that port, so a web page cannot read it through DNS rebinding.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from functools import partial

import h11
import trio
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

from csp_web.app.metrics import registry_for
from csp_web.config import Config
from csp_web.config.metrics import tcp_address
from csp_web.core.api.ports import allowed_uids
from csp_web.core.daemon.compose import Daemon
from csp_web.core.transports.unix import open_unix_listener, peer_credentials
from csp_web.net.h11_server import (
    BadRequest,
    linger,
    read_request,
    send,
    send_simple,
    serve_h11,
)

log = logging.getLogger(__name__)

PATH = b"/metrics"
REQUEST_TIMEOUT_S = 10.0  # a scraper sends its request at once; a silent peer frees its slot


@asynccontextmanager
async def open_metrics(config: Config, daemon: Daemon) -> AsyncIterator[str | None]:
    """Serve ``daemon``'s metrics while open, when ``metrics.listen`` is set; yields where
    (``http://127.0.0.1:PORT/metrics`` or ``unix:PATH``), else None. Raises
    SocketSetupError (Unix path) or OSError (port taken) when it cannot listen."""
    listen = config.metrics.listen
    if listen is None:
        yield None
        return
    listeners, where, hosts = await _listen(listen)
    inode = os.stat(listen).st_ino if config.metrics.unix_path else None
    # The running settings, as the daemon's own gate reads them: a reload's allowed_uids
    # applies to the next scrape.
    services = daemon.dispatcher.services
    handle = partial(
        _serve_one,
        registry=registry_for(daemon),
        allowed=lambda: allowed_uids(services.config.socket),
        hosts=hosts,
    )
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(
                partial(
                    serve_h11, listeners, handle, max_connections=config.metrics.max_connections
                )
            )
            log.info("metrics served at %s", where)
            try:
                yield where
            finally:
                nursery.cancel_scope.cancel()
    finally:
        if inode is not None:
            with suppress(FileNotFoundError):  # another daemon's socket since: leave it
                if os.stat(listen).st_ino == inode:
                    os.unlink(listen)


async def _listen(listen: str) -> tuple[list[trio.SocketListener], str, frozenset[bytes]]:
    """The listeners, where they are, and the Host values a request may carry (empty: any,
    for a Unix socket, which a web page cannot reach)."""
    address = tcp_address(listen)
    if address is None:
        return [await open_unix_listener(listen, backlog=None)], f"unix:{listen}", frozenset()
    host, port = address
    listeners = list(await trio.open_tcp_listeners(port, host=host))
    port = listeners[0].socket.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    names = {f"{shown}:{port}", f"localhost:{port}"}
    return listeners, f"http://{shown}:{port}/metrics", frozenset(n.encode() for n in names)


async def _serve_one(
    stream: trio.abc.Stream,
    *,
    registry: CollectorRegistry,
    allowed: Callable[[], frozenset[int]],
    hosts: frozenset[bytes],
) -> None:
    conn = h11.Connection(h11.SERVER)
    async with stream:
        try:
            refusal = _refusal(stream, allowed())
            if refusal is not None:
                await send_simple(stream, conn, 403, refusal)
                return
            with trio.move_on_after(REQUEST_TIMEOUT_S):
                got = await read_request(stream, conn, max_body_bytes=0)
                if got is not None:
                    await _answer(stream, conn, got[0], registry, hosts)
        except BadRequest as exc:
            await send_simple(stream, conn, exc.status, exc.reason)
        except h11.RemoteProtocolError:
            await send_simple(stream, conn, 400, "bad request")
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return  # the scraper went away
        if isinstance(stream, trio.SocketStream):  # a refusal may leave its request unread
            await linger(stream)


def _refusal(stream: trio.abc.Stream, allowed: frozenset[int]) -> str | None:
    """Why a Unix socket peer may not read (its uid is not one the daemon's socket admits)."""
    if not isinstance(stream, trio.SocketStream) or stream.socket.family != trio.socket.AF_UNIX:
        return None
    uid = peer_credentials(stream.socket)[1]
    if uid not in allowed:
        return f"uid {uid} is not allowed (socket.allowed_uids)"
    return None


async def _answer(
    stream: trio.abc.Stream,
    conn: h11.Connection,
    request: h11.Request,
    registry: CollectorRegistry,
    hosts: frozenset[bytes],
) -> None:
    host = dict(request.headers).get(b"host", b"")
    if hosts and host.lower() not in hosts:
        raise BadRequest(421, "wrong Host: the metrics answer only to this port's loopback names")
    if request.method != b"GET":
        raise BadRequest(405, "GET /metrics only")
    if request.target.partition(b"?")[0] != PATH:
        raise BadRequest(404, "not found; the metrics are at /metrics")
    body = generate_latest(registry)
    headers = [
        (b"content-type", CONTENT_TYPE_LATEST.encode()),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    response = h11.Response(status_code=200, headers=headers)
    await send(stream, conn, response, h11.Data(data=body), h11.EndOfMessage())
