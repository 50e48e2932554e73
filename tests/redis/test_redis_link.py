"""The link itself: with every worker thread stuck on a stopped server, a call still ends at
its deadline (it waits for a thread within it), and the threads come back by themselves."""

from __future__ import annotations

import pytest
import trio

from csp_web.infra.redis_link import RedisUnavailable
from tests.redis.conftest import OpenLink
from tests.redis_server import RedisServer


async def test_calls_beyond_max_threads_end_at_their_deadline_on_a_stopped_server(
    open_link: OpenLink, redis_server: RedisServer
) -> None:
    async with open_link(max_threads=1, call_timeout_s=0.2, retry_s=1e-3) as link:
        await link.call(lambda r: r.ping(), "ping")
        redis_server.pause()
        errors: list[str] = []

        async def ping() -> None:
            with pytest.raises(RedisUnavailable) as caught:
                await link.call(lambda r: r.ping(), "ping")
            errors.append(str(caught.value))

        try:
            with trio.fail_after(5):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(ping)  # takes the one thread, stuck until its timeout
                    nursery.start_soon(ping)  # N+1: waits for a thread, within its deadline
        finally:
            redis_server.resume()
        assert len(errors) == 2
        assert all("no reply within 0.200 s" in error for error in errors)
        assert link.in_flight == 0
        with trio.fail_after(5):  # the abandoned thread ended at its socket timeout
            while link.seconds_to_retry() > 0:
                await trio.sleep(link.seconds_to_retry())
            assert await link.call(lambda r: r.ping(), "ping")
        assert link.up
