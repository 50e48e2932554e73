"""Shared rate limits and quotas: a fleet holds one limit, shares a Retry-After pause, and
falls back to a share of the limit per daemon while Redis is unavailable."""

from __future__ import annotations

import math

import pytest
import trio

from csp_web.core.api.errors import OpError
from csp_web.infra.ratelimit import Rate
from csp_web.infra.redis_ratelimit import SharedRateLimits, fallback_rate
from protocol import ErrorCode
from tests.redis.conftest import OpenLink, past_down_window
from tests.redis_server import RedisServer

SLOW = Rate(per_minute=1, burst=3)  # a token a minute: nothing refills during a test


async def test_a_burst_of_n_holds_across_two_daemons_and_the_next_call_is_refused(
    open_link: OpenLink,
) -> None:
    async with open_link() as one, open_link() as two:
        a = SharedRateLimits(one, {"fetch": SLOW}).bucket("fetch")
        b = SharedRateLimits(two, {"fetch": SLOW}).bucket("fetch")
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


async def test_a_wait_within_the_deadline_reserves_the_next_slot(open_link: OpenLink) -> None:
    async with open_link() as link:
        bucket = SharedRateLimits(link, {"api:x": Rate(6000, 1)}).bucket("api:x")  # 10 ms
        assert bucket is not None
        with trio.fail_after(5):
            await bucket.acquire(deadline=trio.current_time())
            started = trio.current_time()
            await bucket.acquire(deadline=started + 1)  # reserved, then slept until its slot
        assert trio.current_time() > started


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


@pytest.mark.xfail(
    strict=False,
    reason="known bug (2026-11-27): a quota INCR that timed out while Redis was paused may still "
    "run when it resumes, and the count the daemon reports later adds it again, so a loaded "
    "run sees the monthly quota spent early (failed 1 of 3 full runs); the fix is an "
    "idempotent report (a per-spell key), not a longer timeout",
)
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
