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
"""

from __future__ import annotations

import time

import httpcore
from httpcore._async.interfaces import AsyncConnectionInterface

# How often a pass asks every idle connection whether it expired (its keep-alive ran out, or
# the server closed it: a poll() each). httpcore asked on every pass: 32 idle connections, 32
# polls per request in and per request out (trio's is_readable, 1 of 538 py-spy samples at 1
# connection, 20 of 1,365 at 64). The connection handed to a request is always asked first.
SWEEP_S = 1.0


class LinearPool(httpcore.AsyncConnectionPool):
    """``httpcore.AsyncConnectionPool`` whose assignment pass is linear and closes only idle
    connections nobody holds (HTTP/1.1: one request per connection)."""

    _next_sweep = 0.0  # time.monotonic() of the next pass that asks every idle connection

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
