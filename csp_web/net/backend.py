"""The httpcore network backend that connects only to addresses the guard checked.

httpcore asks ``connect_tcp(host, port)`` with the URL's host name. ``PinnedBackend`` resolves
that name once, has the deny table judge every answer, and opens TCP to one of those exact
addresses through httpcore's own trio backend. httpcore then starts TLS on that stream with
``server_hostname`` = the name, so SNI, certificate verification and Host all keep the name
while the socket is pinned to the checked address: DNS rebinding has no second lookup to win.

``GuardedTransport`` plugs the backend into httpx. Owns nothing beyond its connection pool,
which ``aclose`` (or the owning ``httpx.AsyncClient``) closes.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable

import httpcore
import httpx
import trio

from csp_web.config.guard import GuardConfig
from csp_web.core.api.errors import OpError
from csp_web.net.forward_proxy import Proxy, open_tunnel
from csp_web.net.pool import LinearPool
from csp_web.net.resolver import Resolver, resolve_checked
from csp_web.net.settings import GuardSettings
from protocol import ErrorCode


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's trio backend, but every TCP connect goes to a resolved, checked address."""

    def __init__(
        self, settings: GuardSettings, resolver: Resolver, *, proxy: Proxy | None = None
    ) -> None:
        self._settings = settings  # shared with the client: one current reference
        self._resolver = resolver
        self._proxy = proxy  # web.proxy: every connect tunnels through it (forward_proxy.py)
        self._inner = httpcore.TrioBackend()

    @property
    def _config(self) -> GuardConfig:
        # httpcore connects in the task of the request that needs the connection, so this is
        # that request's operation's settings.
        return self._settings.in_effect()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface, not ours
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Connect to the first reachable checked address of ``host``, through the proxy's
        CONNECT tunnel to that address when one is configured.

        Raises OpError(DNS_FAILED | SSRF_BLOCKED) before any connect, OpError(PROXY_FAILED)
        when the proxy fails, or the inner backend's httpcore.ConnectError / ConnectTimeout
        when no checked address answers.
        """
        addresses = await resolve_checked(self._resolver, host, port, self._config)
        if self._proxy is not None:  # the proxy reaches it or says why not: one try
            return await open_tunnel(
                self._inner, self._proxy, str(addresses[0]), port, timeout_s=timeout
            )
        error: httpcore.ConnectError | httpcore.ConnectTimeout | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    str(address), port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                error = exc
        assert error is not None  # resolve_checked never returns an empty list
        raise error

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface, not ours
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Refused: a Unix socket is a local endpoint, which the guard exists to keep out."""
        raise OpError(ErrorCode.SSRF_BLOCKED, "unix-socket")

    async def sleep(self, seconds: float) -> None:
        await trio.sleep(seconds)


class GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport with its connection pool built on a ``PinnedBackend``.

    ``ssl_context`` None means httpx's default (certifi roots, verification on); there is
    deliberately no way to turn verification off.
    """

    def __init__(self, backend: PinnedBackend, *, ssl_context: ssl.SSLContext | None) -> None:
        verify: ssl.SSLContext | bool = True if ssl_context is None else ssl_context
        context = httpx.create_ssl_context(verify=verify, trust_env=False)
        super().__init__(verify=context, trust_env=False)
        limits = httpx.Limits()
        # httpx 0.28 builds its pool in __init__ and takes no network_backend (discussion
        # encode/httpx#3180; PR #3749 adds it), so replace the unused pool with one that
        # differs only in its backend. pyproject pins httpx <0.29 for this private attribute;
        # the pinned-address tests fail loudly if it ever stops being used. LinearPool: httpcore's
        # pool, its per-request assignment pass made linear (net/pool.py).
        self._pool = LinearPool(
            ssl_context=context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            http1=True,
            http2=False,
            network_backend=backend,
        )

    async def close_idle(self) -> None:
        """Close the pooled connections no request is using, so that the next request to
        their origin connects, and is checked, anew (after the guard's settings changed)."""
        for connection in self._pool.connections:
            if connection.is_idle():
                await connection.aclose()
