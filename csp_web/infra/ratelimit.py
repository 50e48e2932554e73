"""Token buckets per backend and per API, and persistent monthly quotas.

A call waits for a token when one comes within its deadline, else fails at once with
``rate_limited`` and a RETRY_AFTER hint. Upstream ``Retry-After`` and rate-limit headers pause
a bucket (``pause_until``), so the daemon backs off as the provider asks. Background work
(search prefetch) only takes a token when the bucket is more than half full, so it never spends
budget that foreground calls need.
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import math
import os
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

import trio

from csp_web.core.api.errors import OpError
from protocol import ErrorCode, NumberError, parse_decimal, parse_uint


@dataclass(frozen=True)
class Rate:
    """``per_minute`` tokens refill continuously up to ``burst`` (seed 001: per-minute rates)."""

    per_minute: float
    burst: int


class LimitCounts:
    """Waits and refusals by bucket name, for the metrics: a bucket exists only for a
    configured name (``fetch``, ``search:<backend>``, ``api:<name>``), so the set is bounded.
    Kept by the daemon's bucket source, so a reload that remakes a bucket keeps its counts."""

    def __init__(self) -> None:
        self.waits: Counter[str] = Counter()  # calls that waited for a token
        self.waited_s: defaultdict[str, float] = defaultdict(float)  # seconds they waited
        self.refusals: Counter[str] = Counter()  # calls refused rate_limited

    async def wait(self, name: str, seconds: float, *, first: bool) -> None:
        """Sleep ``seconds`` (trio time), counting the time really slept (a cancelled wait
        too) and, when ``first``, one more waiting call."""
        self.waits[name] += first
        start = trio.current_time()
        try:
            await trio.sleep(seconds)
        finally:
            self.waited_s[name] += trio.current_time() - start

    def refused(self, name: str, retry_after: str) -> OpError:
        """Count a refusal; the rate_limited error to raise, with its RETRY_AFTER hint."""
        self.refusals[name] += 1
        return OpError(ErrorCode.RATE_LIMITED, name, fields=(("RETRY_AFTER", retry_after),))


class Bucket:
    """One token bucket on trio's clock (so tests drive it with MockClock)."""

    def __init__(self, name: str, rate: Rate, counts: LimitCounts | None = None) -> None:
        self.name = name
        self.rate = rate
        self.counts = LimitCounts() if counts is None else counts
        self._tokens = float(rate.burst)
        self._stamp = trio.current_time()
        self._paused_until = -math.inf

    def _refill(self) -> None:
        now = trio.current_time()
        self._tokens = min(
            self.rate.burst, self._tokens + (now - self._stamp) * self.rate.per_minute / 60
        )
        self._stamp = now

    def wait_s(self) -> float:
        """Seconds until a token is available (0 when one is)."""
        self._refill()
        pause = max(0.0, self._paused_until - trio.current_time())
        if self._tokens >= 1:
            return pause
        return max(pause, (1 - self._tokens) * 60 / self.rate.per_minute)

    async def acquire(self, *, deadline: float) -> None:
        """Take a token, waiting while one comes before ``deadline`` (trio time).

        Raises OpError(rate_limited) with a RETRY_AFTER field (seconds) otherwise.
        """
        first = True
        while True:
            wait = self.wait_s()
            if wait <= 0:
                self._tokens -= 1
                return
            if trio.current_time() + wait > deadline:
                raise self.counts.refused(self.name, str(math.ceil(wait)))
            await self.counts.wait(self.name, wait, first=first)
            first = False

    def try_acquire_background(self) -> bool:
        """Take a token only if the bucket stays at least half full: prefetch is optional."""
        if self.wait_s() > 0 or self._tokens - 1 < self.rate.burst / 2:
            return False
        self._tokens -= 1
        return True

    def pause_until(self, when: float) -> None:
        """Hold every call until trio time ``when`` (from Retry-After / reset headers)."""
        self._paused_until = max(self._paused_until, when)

    # The shape ops use (``csp_web.infra.redis_ratelimit.TokenBucket``), which a shared bucket
    # also has.
    async def acquire_background(self) -> bool:
        return self.try_acquire_background()

    async def pause(self, when: float) -> None:
        self.pause_until(when)


class MonthlyQuota:
    """A count of calls per calendar month, persisted in a small JSON file (Brave's free
    tier is 1,000 requests a month, seed 000). Blocking file I/O: call from a thread."""

    def __init__(self, path: str, name: str, limit: int) -> None:
        self.path = path
        self.name = name
        self.limit = limit

    def _load(self) -> dict[str, int]:
        try:
            with open(self.path, encoding="utf-8") as file:
                data = json.load(file)
            return {str(k): int(v) for k, v in data.items()}
        except (FileNotFoundError, ValueError):
            return {}

    def take(self, month: str) -> None:
        """Count one call in ``month`` (YYYY-MM); raises OpError(rate_limited) when spent."""
        data = self._load()
        key = f"{self.name}:{month}"
        if data.get(key, 0) >= self.limit:
            raise OpError(ErrorCode.RATE_LIMITED, f"{self.name} monthly quota of {self.limit}")
        data[key] = data.get(key, 0) + 1
        tmp = f"{self.path}.tmp"
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as file:
            json.dump(data, file)
        os.replace(tmp, self.path)

    def used(self, month: str) -> int:
        return self._load().get(f"{self.name}:{month}", 0)


class RateLimits:
    """The daemon's buckets by name, made on first use from configured rates."""

    def __init__(self, rates: dict[str, Rate]) -> None:
        self._rates = rates
        self._buckets: dict[str, Bucket] = {}
        self.counts = LimitCounts()

    def bucket(self, name: str) -> Bucket | None:
        """The bucket for ``name``, or None when that name has no configured rate."""
        if name not in self._buckets:
            rate = self._rates.get(name)
            if rate is None:
                return None
            self._buckets[name] = Bucket(name, rate, self.counts)
        return self._buckets[name]

    def reload(self, rates: dict[str, Rate]) -> None:
        """Take new rates (SIGHUP); a bucket whose rate did not change keeps its tokens."""
        self._buckets = {n: b for n, b in self._buckets.items() if rates.get(n) == self._rates[n]}
        self._rates = rates


# A header asking for longer than a month is wrong or hostile; Brave's longest window (its
# monthly quota, seed 000) still fits.
MAX_PAUSE_S = 31 * 86400.0
# An X-RateLimit-Reset above this is a Unix time (GitHub), below it seconds to wait (Brave).
_EPOCH_FLOOR = 1_000_000_000


def resume_at(headers: Mapping[str, str], *, now: float, wall: float) -> float | None:
    """The trio time the upstream asked us to wait until, or None when it named none.

    ``Retry-After`` (RFC 9110 §10.2.3: delay-seconds or an HTTP-date) wins over
    ``X-RateLimit-Reset``. A reset header lists one value per window (Brave: ``1, 1419704``);
    the windows whose ``X-RateLimit-Remaining`` is 0 are the spent ones, and we wait for the
    last of them. Delays are clamped to ``[0, MAX_PAUSE_S]``.
    """
    delay = _retry_after_s(headers.get("retry-after"), wall)
    if delay is None:
        delay = _reset_s(
            headers.get("x-ratelimit-reset"), headers.get("x-ratelimit-remaining"), wall
        )
    if delay is None:
        return None
    return now + min(max(delay, 0.0), MAX_PAUSE_S)


def _retry_after_s(value: str | None, wall: float) -> float | None:
    if not value:
        return None
    value = value.strip()
    with contextlib.suppress(NumberError):  # "²" passed isdigit() and float() raised
        return float(parse_uint(value))
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return when.timestamp() - wall


def _reset_s(value: str | None, remaining: str | None, wall: float) -> float | None:
    resets = _numbers(value)
    if not resets:
        return None
    left = _numbers(remaining)
    if len(left) == len(resets) and any(count <= 0 for count in left):
        resets = [reset for reset, count in zip(resets, left, strict=True) if count <= 0]
    delays = [reset - wall if reset > _EPOCH_FLOOR else reset for reset in resets]
    return max(delays)


def _numbers(value: str | None) -> list[float]:
    if not value:
        return []
    try:
        return [parse_decimal(part.strip()) for part in value.split(",")]
    except NumberError:  # NaN, inf, signs, other scripts' digits
        return []
