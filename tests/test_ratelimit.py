"""Token buckets and monthly quotas, driven by trio's MockClock."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from csp_web.core.api.errors import OpError
from csp_web.infra.ratelimit import Bucket, MonthlyQuota, Rate, RateLimits


async def test_burst_tokens_are_free_then_the_next_waits_for_refill(
    autojump_clock: trio.testing.MockClock,
) -> None:
    bucket = Bucket("brave", Rate(per_minute=10, burst=3))
    start = trio.current_time()
    for _ in range(3):
        await bucket.acquire(deadline=start + 60)
    assert trio.current_time() == start
    await bucket.acquire(deadline=start + 60)
    assert trio.current_time() - start == pytest.approx(6.0)  # 10/min: one token per 6 s


async def test_token_beyond_the_deadline_fails_rate_limited_with_retry_after(
    mock_clock: trio.testing.MockClock,
) -> None:
    bucket = Bucket("brave", Rate(per_minute=10, burst=1))
    now = trio.current_time()
    await bucket.acquire(deadline=now + 1)
    with pytest.raises(OpError) as info:
        await bucket.acquire(deadline=now + 5.9)
    assert info.value.code == "rate_limited"
    assert dict(info.value.fields)["RETRY_AFTER"] == "6"


async def test_token_exactly_at_the_deadline_is_waited_for(
    autojump_clock: trio.testing.MockClock,
) -> None:
    bucket = Bucket("x", Rate(per_minute=60, burst=1))
    now = trio.current_time()
    await bucket.acquire(deadline=now)
    await bucket.acquire(deadline=now + 1.0)
    assert trio.current_time() == pytest.approx(now + 1.0)


async def test_upstream_retry_after_pauses_the_bucket(
    autojump_clock: trio.testing.MockClock,
) -> None:
    bucket = Bucket("github", Rate(per_minute=600, burst=10))
    bucket.pause_until(trio.current_time() + 30)
    with pytest.raises(OpError):
        await bucket.acquire(deadline=trio.current_time() + 29)
    start = trio.current_time()
    await bucket.acquire(deadline=start + 31)
    assert trio.current_time() - start == pytest.approx(30)


async def test_background_takes_only_from_a_bucket_at_least_half_full(
    mock_clock: trio.testing.MockClock,
) -> None:
    bucket = Bucket("fetch", Rate(per_minute=20, burst=4))
    assert bucket.try_acquire_background()  # 4 -> 3
    assert bucket.try_acquire_background()  # 3 -> 2, still half
    assert not bucket.try_acquire_background()  # would leave 1 < 2
    await bucket.acquire(deadline=trio.current_time())  # foreground still gets its tokens
    await bucket.acquire(deadline=trio.current_time())


def test_unconfigured_names_have_no_bucket() -> None:
    limits = RateLimits({"brave": Rate(10, 1)})
    assert limits.bucket("nothing") is None


@pytest.mark.parametrize(("used", "ok"), [(2, True), (3, False)])
def test_monthly_quota_allows_n_and_refuses_n_plus_1_and_persists(
    tmp_path: Path, used: int, ok: bool
) -> None:
    path = str(tmp_path / "quota.json")
    for _ in range(used):
        MonthlyQuota(path, "brave", 3).take("2026-11")
    quota = MonthlyQuota(path, "brave", 3)  # a new object: the count came from disk
    if ok:
        quota.take("2026-11")
        assert quota.used("2026-11") == 3
    else:
        with pytest.raises(OpError) as info:
            quota.take("2026-11")
        assert info.value.code == "rate_limited"
    assert quota.used("2026-12") == 0
