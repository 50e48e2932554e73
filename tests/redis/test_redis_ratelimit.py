"""Shared rate limits and quotas: a fleet holds one limit, shares a Retry-After pause, and
falls back to a share of the limit per daemon while Redis is unavailable."""

from __future__ import annotations

import math

import pytest
import trio

from csp_web.core.api.errors import OpError
from csp_web.infra.ratelimit import Rate
from csp_web.infra.redis_link import RedisLink
from csp_web.infra.redis_ratelimit import SharedQuota, SharedRateLimits, fallback_rate
from protocol import ErrorCode
from tests.redis.conftest import OpenLink, past_down_window
from tests.redis_server import RedisServer

SLOW = Rate(per_minute=1, burst=3)  # a token a minute: nothing refills during a test


async def test_a_burst_of_n_holds_across_two_daemons_and_the_next_call_is_refused(
    open_link: OpenLink,
) -> None:
    async with open_link() as one, open_link() as two:
        a = SharedRateLimits(one, {"fetch": SLOW}).bucket("fetch")
        b_limits = SharedRateLimits(two, {"fetch": SLOW})
        b = b_limits.bucket("fetch")
        assert a is not None
        assert b is not None
        now = trio.current_time()
        await a.acquire(deadline=now)
        await b.acquire(deadline=now)
        await a.acquire(deadline=now)  # the third of three, fleet-wide
        with pytest.raises(OpError) as refused:
            await b.acquire(deadline=trio.current_time())
        assert refused.value.code is ErrorCode.RATE_LIMITED
        assert refused.value.detail == "fetch"
        retry = int(dict(refused.value.fields)["RETRY_AFTER"])
        assert 1 <= retry <= 60
        assert (a.counts.refusals, b_limits.counts.refusals) == ({}, {"fetch": 1})  # metrics
        assert b_limits.counts.waits == {}


async def test_a_wait_within_the_deadline_reserves_the_next_slot(open_link: OpenLink) -> None:
    async with open_link() as link:
        bucket = SharedRateLimits(link, {"api:x": Rate(60, 1)}).bucket("api:x")  # 1 s
        assert bucket is not None
        with trio.fail_after(5):
            await bucket.acquire(deadline=trio.current_time())
            started = trio.current_time()
            await bucket.acquire(deadline=started + 2)  # reserved, then slept until its slot
        assert trio.current_time() > started
        assert bucket.counts.waits == {"api:x": 1}  # the metrics' waits and seconds waited
        assert 0 < bucket.counts.waited_s["api:x"] <= trio.current_time() - started
        assert bucket.counts.refusals == {}


async def test_background_calls_take_tokens_only_while_half_the_burst_is_left(
    open_link: OpenLink,
) -> None:
    async with open_link() as one, open_link() as two:
        rates = {"fetch": Rate(1, 4)}
        a = SharedRateLimits(one, rates).bucket("fetch")
        b = SharedRateLimits(two, rates).bucket("fetch")
        assert a is not None
        assert b is not None
        assert await a.acquire_background()  # 3 left
        assert await b.acquire_background()  # 2 left: half of 4
        assert not await a.acquire_background()
        await b.acquire(deadline=trio.current_time())  # foreground may still take them


async def test_a_retry_after_seen_by_one_daemon_pauses_every_daemon(open_link: OpenLink) -> None:
    async with open_link() as one, open_link() as two:
        rates = {"search:brave": Rate(10, 10)}
        a = SharedRateLimits(one, rates).bucket("search:brave")
        b = SharedRateLimits(two, rates).bucket("search:brave")
        assert a is not None
        assert b is not None
        await a.pause(trio.current_time() + 30)
        with pytest.raises(OpError) as refused:
            await b.acquire(deadline=trio.current_time() + 5)
        assert refused.value.code is ErrorCode.RATE_LIMITED
        assert 29 <= int(dict(refused.value.fields)["RETRY_AFTER"]) <= 30
        assert not await b.acquire_background()
        assert b.counts.refusals == {"search:brave": 1}


async def test_a_pause_that_ends_before_the_deadline_is_waited_out_and_counted_once(
    open_link: OpenLink,
) -> None:
    async with open_link() as one, open_link() as two:
        rates = {"search:brave": Rate(600, 10)}
        a = SharedRateLimits(one, rates).bucket("search:brave")
        b = SharedRateLimits(two, rates).bucket("search:brave")
        assert a is not None
        assert b is not None
        await a.pause(trio.current_time() + 0.05)
        started = trio.current_time()
        with trio.fail_after(5):
            await b.acquire(deadline=started + 5)
        assert trio.current_time() > started
        assert b.counts.waits == {"search:brave": 1}
        assert b.counts.waited_s["search:brave"] > 0


async def test_while_redis_is_down_each_daemon_spends_its_share_of_the_limit(
    open_link: OpenLink, redis_server: RedisServer
) -> None:
    async with open_link(fallback_share=0.5) as link:
        bucket = SharedRateLimits(link, {"fetch": Rate(1, 4)}).bucket("fetch")
        assert bucket is not None
        assert bucket.local.rate == fallback_rate(Rate(1, 4), 0.5) == Rate(0.5, 2)
        redis_server.stop()
        with trio.fail_after(5):
            await bucket.acquire(deadline=trio.current_time())
            await bucket.acquire(deadline=trio.current_time())
            with pytest.raises(OpError) as refused:
                await bucket.acquire(deadline=trio.current_time())
        assert refused.value.code is ErrorCode.RATE_LIMITED
        assert link.fallbacks["ratelimit_local"] == 3
        redis_server.start()
        await bucket.acquire(deadline=trio.current_time())  # the shared bucket again: full
        assert link.fallbacks["ratelimit_local"] == 3
        assert link.up


async def test_a_monthly_quota_of_n_holds_across_daemons(open_link: OpenLink) -> None:
    async with open_link() as one, open_link() as two:
        a = SharedRateLimits(one, {}).quota("search:brave", 3)
        b = SharedRateLimits(two, {}).quota("search:brave", 3)
        for quota in (a, b, a):
            await quota.take("2026-11")
        with pytest.raises(OpError) as refused:
            await b.take("2026-11")
        assert (refused.value.code, refused.value.detail) == (
            ErrorCode.RATE_LIMITED,
            "search:brave monthly quota of 3",
        )
        await b.take("2026-12")  # a new month


async def test_a_quota_falls_back_to_a_share_of_its_remainder_and_reports_it_later(
    open_link: OpenLink, redis_server: RedisServer
) -> None:
    # The fixture's call timeout (0.5 s): a shorter one let a loaded machine time out the
    # calls meant to reach Redis, and the counts went local.
    async with open_link(fallback_share=0.5) as link:
        quota = SharedRateLimits(link, {}).quota("search:brave", 5)
        await quota.take("2026-11")  # Redis says 1 used: 4 left, half of them for this daemon
        redis_server.pause()
        try:
            with trio.fail_after(15):
                with pytest.raises(OpError) as never_seen:
                    await quota.take("2026-10")  # no count from Redis for October yet
                await quota.take("2026-11")
                await quota.take("2026-11")
                with pytest.raises(OpError) as spent:
                    await quota.take("2026-11")
        finally:
            redis_server.resume()
        await past_down_window(link)
        assert never_seen.value.detail == "search:brave quota store unavailable"
        assert spent.value.detail == "search:brave monthly quota of 5"
        await quota.take("2026-11")  # 1 + 2 counted while down + this one
        await quota.take("2026-11")  # the fifth
        with pytest.raises(OpError):
            await quota.take("2026-11")


async def test_a_call_without_a_deadline_waits_for_its_slot_on_the_shared_bucket(
    open_link: OpenLink,
) -> None:
    async with open_link() as link:
        bucket = SharedRateLimits(link, {"fetch": Rate(6000, 1)}).bucket("fetch")
        assert bucket is not None
        with trio.fail_after(5):
            await bucket.acquire(deadline=math.inf)
            await bucket.acquire(deadline=math.inf)  # reserved 10 ms ahead, not a script error
        assert link.up
        assert link.fallbacks["ratelimit_local"] == 0


def _quota_calls(server: RedisServer) -> int:
    """How many quota scripts (EVALSHA) the server has run."""
    with server.client() as client:
        stats = client.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


async def _wait_for_quota_calls(server: RedisServer, count: int) -> None:
    """Until the server has run ``count`` quota scripts: those written before a pause run
    when it resumes, after their callers stopped waiting. A real condition, bounded."""
    with trio.fail_after(10):
        while _quota_calls(server) < count:
            await trio.sleep(0.01)


def _count(server: RedisServer, name: str, month: str) -> int:
    with server.client() as client:
        return int(client.get(f"csp-web:q:{{{name}}}:{month}") or 0)


async def _take_while_paused(
    quota: SharedQuota, link: RedisLink, server: RedisServer, times: int
) -> None:
    """``times`` uses taken while the server is paused: each call is tried (the link's
    down window passed), times out and is counted locally."""
    server.pause()
    try:
        with trio.fail_after(15):
            for _ in range(times):
                await past_down_window(link)
                await quota.take("2026-11")
    finally:
        server.resume()


async def test_quota_calls_that_timed_out_but_ran_later_are_not_counted_again(
    open_link: OpenLink, redis_server: RedisServer
) -> None:
    # Issue 21: a use counted locally whose call ran when Redis resumed was counted twice,
    # and a call that carried the local count and ran late had it added again by the next.
    # One thread: a call abandoned at its timeout ends before the next call starts, so each
    # paused call below writes its command on the one ready connection.
    async with open_link(fallback_share=1.0, max_threads=1) as link:
        quota = SharedRateLimits(link, {}).quota("search:brave", 5)
        await quota.take("2026-11")  # the first of 5, counted on Redis
        before = _quota_calls(redis_server)
        for landed in (1, 2):  # the second carries the first's local count
            await link.call(lambda r: r.ping(), "ping")  # the connection, ready
            await _take_while_paused(quota, link, redis_server, 1)
            await _wait_for_quota_calls(redis_server, before + landed)  # it ran on resuming
            await past_down_window(link)
        assert link.fallbacks["quota_local"] == 2
        await quota.take("2026-11")
        await quota.take("2026-11")  # the fifth
        assert _count(redis_server, "search:brave", "2026-11") == 5
        with pytest.raises(OpError) as spent:
            await quota.take("2026-11")
        assert spent.value.detail == "search:brave monthly quota of 5"
        assert _count(redis_server, "search:brave", "2026-11") == 5


async def test_concurrent_takes_on_one_daemon_each_count_once(
    open_link: OpenLink, redis_server: RedisServer
) -> None:
    # A longer call timeout: four calls at once on a loaded host must not fall back.
    async with open_link(call_timeout_s=5.0) as link:
        quota = SharedRateLimits(link, {}).quota("search:brave", 4)
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                for _ in range(4):
                    nursery.start_soon(quota.take, "2026-11")
        assert _count(redis_server, "search:brave", "2026-11") == 4
        with pytest.raises(OpError):
            await quota.take("2026-11")


async def test_a_changed_quota_limit_keeps_the_uses_counted_while_redis_was_down(
    open_link: OpenLink, redis_server: RedisServer
) -> None:
    async with open_link(fallback_share=1.0) as link:
        limits = SharedRateLimits(link, {})
        await limits.quota("search:brave", 4).take("2026-11")
        before = _quota_calls(redis_server)
        await _take_while_paused(limits.quota("search:brave", 4), link, redis_server, 2)
        await _wait_for_quota_calls(redis_server, before + 1)  # the first, on the idle link
        await past_down_window(link)
        raised = limits.quota("search:brave", 5)  # a reload raised the limit
        await raised.take("2026-11")  # 1 + 2 while down + this one
        assert _count(redis_server, "search:brave", "2026-11") == 4
        await raised.take("2026-11")
        with pytest.raises(OpError):
            await raised.take("2026-11")
