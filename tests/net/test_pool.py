"""The guard's connection pool (csp_web/net/pool.py): an assignment pass costs one look at each
connection, and a request past a full pool waits for a connection of its own."""

from __future__ import annotations

import httpcore
import trio

from csp_web.net.pool import LinearPool

from ._origin import WAIT_S, Origin

BURST = 32  # concurrent requests to one origin: web.max_running's default


class _Counted(httpcore.AsyncHTTPConnection):
    """A connection that counts how often the pool asks whether it is idle, or expired."""

    asked = 0
    expiry_asked = 0

    def is_idle(self) -> bool:
        _Counted.asked += 1
        return super().is_idle()

    def has_expired(self) -> bool:
        _Counted.expiry_asked += 1
        return super().has_expired()


class _CountingPool(LinearPool):
    def create_connection(self, origin: httpcore.Origin) -> httpcore.AsyncHTTPConnection:
        return _Counted(
            origin=origin,
            keepalive_expiry=self._keepalive_expiry,
            network_backend=self._network_backend,
        )


async def _burst(pool: httpcore.AsyncConnectionPool, url: str, count: int) -> list[int]:
    statuses: list[int] = []

    async def get() -> None:
        statuses.append((await pool.request("GET", url)).status)

    async with trio.open_nursery() as nursery:
        for _ in range(count):
            nursery.start_soon(get)
    return statuses


async def test_the_pool_asks_each_connection_once_per_pass_whether_it_is_idle(
    plain_origin: Origin,
) -> None:
    # httpcore 1.0.9 counted every connection once per idle connection: 32 requests on 32
    # connections cost it 144,928 is_idle calls (1,056 here), 9 % of the event loop at 64 clients.
    async with _CountingPool(max_connections=None) as pool:  # unbounded, as the guard builds it
        url = plain_origin.url("127.0.0.1")
        with trio.fail_after(WAIT_S):
            await _burst(pool, url, BURST)
            _Counted.asked = 0
            statuses = await _burst(pool, url, BURST)
    assert statuses == [200] * BURST
    assert plain_origin.connections == BURST  # the second burst reused every connection
    # A request enters and leaves the pool: two passes, each asking at most every connection.
    assert _Counted.asked <= 2 * BURST * BURST


async def test_the_pool_polls_the_connection_it_hands_out_not_every_idle_one(
    plain_origin: Origin,
) -> None:
    # Whether a connection expired is a poll() of its socket: httpcore asked every idle one on
    # every pass, 32 requests on 32 connections 1,056 times; here once per request handed a
    # connection, and all of them at most every SWEEP_S: 32 times.
    async with _CountingPool(max_connections=None) as pool:
        url = plain_origin.url("127.0.0.1")
        with trio.fail_after(WAIT_S):
            await _burst(pool, url, BURST)
            _Counted.expiry_asked = 0
            await _burst(pool, url, BURST)
    assert plain_origin.connections == BURST
    assert _Counted.expiry_asked <= 3 * BURST  # each handed out, and up to two sweeps


async def test_requests_past_a_full_pool_wait_and_each_gets_a_connection_of_its_own(
    plain_origin: Origin,
) -> None:
    async with LinearPool(max_connections=2) as pool:
        with trio.fail_after(WAIT_S):
            statuses = await _burst(pool, plain_origin.url("127.0.0.1"), 8)
        assert statuses == [200] * 8
        assert plain_origin.connections == 2
        assert len(pool.connections) == 2


async def test_a_full_pool_replaces_an_idle_connection_to_another_origin(
    plain_origin: Origin, origin: Origin
) -> None:
    async with LinearPool(max_connections=1) as pool:
        with trio.fail_after(WAIT_S):
            await pool.request("GET", plain_origin.url("127.0.0.1"))
            await pool.request("GET", plain_origin.url("localhost"))
        assert plain_origin.connections == 2  # another origin (host name): a new connection
        assert [c.is_closed() for c in pool.connections] == [False]
        assert isinstance(pool.connections[0], httpcore.AsyncHTTPConnection)
