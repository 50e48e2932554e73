"""httpcore's connection pool with an assignment pass that costs O(connections + requests).

httpcore 1.0.9 runs ``_assign_requests_to_connections`` each time a request enters or leaves
the pool, and that pass costs the square of the connections it holds (encode/httpcore#1035 and
#1110, open):

- for each idle connection it counts every connection again (meant to count the idle ones
  against ``max_keepalive_connections``): 32 requests on 32 connections to one origin asked
  ``is_idle`` 144,928 times, 1,056 here (tests/net/test_pool.py);
- it rebuilds the available and idle lists for each queued request, and hands one idle
  HTTP/1.1 connection to every queued request of its origin: all but one wake, fail with
  ``ConnectionNotAvailable`` and queue again, each through another full pass;
- a later pass may close an idle connection already handed to a request that has not yet
  started on it.

At 64 connections of uncached fetches (web.max_running: 32 at once) the pass was 9 % of the
event loop's CPU (py-spy --gil, 86 of 921 samples, from 1 of 538 at one connection), and under
0.5 % with this one. It walks the connections once per pass, hands an idle connection to one
request, closes only idle connections past the keep-alive cap (the oldest first, as httpcore
does) and never one a request holds. HTTP/1.1 only (the guard's transport turns HTTP/2 off), so
a connection serves one request at a time. pyproject pins httpcore <1.1 for this method.

An idle connection is reused only when nothing is left to read on it. httpcore's
``has_expired`` polls the socket alone, but bytes past a complete response may already sit in
h11's buffer, or in TLS records not yet decrypted: an origin sending more than its
Content-Length had the next request to it (another op's, another URL's) answered from those
bytes without that request reaching it, and the wrong page cached under its URL. Such a
connection is closed (``_Connection``); the response before the extra bytes stands as its
framing delimits it, as curl ("Excess found ... closing connection") and browsers do.
"""

from __future__ import annotations

import time

import httpcore
import trio
from httpcore._async.http11 import AsyncHTTP11Connection
from httpcore._async.interfaces import AsyncConnectionInterface

# How often a pass asks every idle connection whether it expired (its keep-alive ran out, or
# the server closed it: a poll() each). httpcore asked on every pass: 32 idle connections, 32
# polls per request in and per request out (trio's is_readable, 1 of 538 py-spy samples at 1
# connection, 20 of 1,365 at 64). The connection handed to a request is always asked first.
SWEEP_S = 1.0


def unread_bytes(connection: AsyncConnectionInterface) -> bool:
    """Whether an idle HTTP/1.1 connection holds bytes nobody asked for above its socket: in
    h11's receive buffer, or in TLS records trio read but has not decrypted (``SSLObject.read``
    decrypts one record at a time, so a record sent after the response can wait there while
    the socket is empty). None wait decrypted: httpcore asks for 64 KiB, a record holds at
    most 16 KiB. Bytes on the socket itself are httpcore's ``has_expired`` poll. Reads
    nothing."""
    inner = getattr(connection, "_connection", connection)  # AsyncHTTPConnection wraps it
    if not isinstance(inner, AsyncHTTP11Connection) or not inner.is_idle():
        return False
    if inner._h11_state.trailing_data[0]:
        return True
    # httpcore's TrioStream holds trio's SSLStream; pyproject pins httpcore <1.1 and the
    # own-write HTTPS tests in tests/net/test_pool_leftovers.py fail if either name moves.
    trio_stream = getattr(inner._network_stream, "_stream", None)
    return isinstance(trio_stream, trio.SSLStream) and bool(trio_stream._incoming.pending)


class _Connection(httpcore.AsyncHTTPConnection):
    """httpcore's connection, expired also while it holds unread bytes (``unread_bytes``);
    the pool asks ``has_expired`` of every idle connection before it hands it out."""

    def has_expired(self) -> bool:
        return super().has_expired() or unread_bytes(self)


class LinearPool(httpcore.AsyncConnectionPool):
    """``httpcore.AsyncConnectionPool`` whose assignment pass is linear and closes only idle
    connections nobody holds (HTTP/1.1: one request per connection), nor reuses one holding
    unread bytes."""

    _next_sweep = 0.0  # time.monotonic() of the next pass that asks every idle connection

    def create_connection(self, origin: httpcore.Origin) -> AsyncConnectionInterface:
        return _Connection(
            origin=origin,
            ssl_context=self._ssl_context,
            keepalive_expiry=self._keepalive_expiry,
            http1=self._http1,
            http2=self._http2,
            retries=self._retries,
            local_address=self._local_address,
            uds=self._uds,
            network_backend=self._network_backend,
            socket_options=self._socket_options,
        )

    def _assign_requests_to_connections(self) -> list[AsyncConnectionInterface]:
        held = {id(request.connection) for request in self._requests if not request.is_queued()}
        closing = self._drop_closed_and_expired(held)
        idle = [c for c in self._connections if id(c) not in held and c.is_idle()]
        surplus = len(idle) - self._max_keepalive_connections
        for connection in idle[: max(surplus, 0)]:  # the oldest first, as httpcore does
            self._connections.remove(connection)
            closing.append(connection)
        idle = idle[max(surplus, 0) :]
        for request in self._requests:
            if request.is_queued():
                chosen = self._connection_for(request.request.url.origin, idle, closing)
                if chosen is None:
                    break  # the pool is full of busy connections: the rest wait too
                request.assign_to_connection(chosen)
        return closing

    def _drop_closed_and_expired(self, held: set[int]) -> list[AsyncConnectionInterface]:
        """Removes closed connections, and (every ``SWEEP_S``) the expired ones nobody holds,
        returned to be closed."""
        closing: list[AsyncConnectionInterface] = []
        now = time.monotonic()
        sweep = now >= self._next_sweep
        if sweep:
            self._next_sweep = now + SWEEP_S
        for connection in list(self._connections):
            if connection.is_closed():
                self._connections.remove(connection)
            elif sweep and id(connection) not in held and connection.has_expired():
                self._connections.remove(connection)
                closing.append(connection)
        return closing

    def _connection_for(
        self,
        origin: httpcore.Origin,
        idle: list[AsyncConnectionInterface],
        closing: list[AsyncConnectionInterface],
    ) -> AsyncConnectionInterface | None:
        """An idle connection to ``origin`` that has not expired (taken out of ``idle``: one
        request each; an expired one is closed), else a new one while the pool has room, else
        a new one in place of an idle connection to another origin (closed); None when every
        connection is busy."""
        for connection in [c for c in idle if c.can_handle_request(origin)]:
            idle.remove(connection)
            if not connection.has_expired():
                return connection
            self._connections.remove(connection)
            closing.append(connection)
        if len(self._connections) >= self._max_connections:
            if not idle:
                return None
            replaced = idle.pop(0)
            self._connections.remove(replaced)
            closing.append(replaced)
        connection = self.create_connection(origin)
        self._connections.append(connection)
        return connection
