"""Rate limits and monthly quotas held by a shared Redis, so a fleet keeps a provider's limit.

Each bucket is GCRA (the generic cell rate algorithm: one "theoretical arrival time" per
bucket) in one server-side Lua script on Redis's own clock (``TIME``), so daemons on several
hosts agree without synchronised clocks and a token costs one round trip. A foreground call
that must wait reserves its slot in the script and sleeps until it (no retry loop, no token
taken by a later caller first); a call whose wait passes its deadline takes nothing and gets
``rate_limited`` with RETRY_AFTER, as the local bucket answers. Background calls (prefetch) take
a token only while at least half the burst is left. An upstream Retry-After pauses the bucket
for every daemon (a key with that expiry). Monthly quotas are a counter per month.

Redis keys (``p`` is ``redis.key_prefix``): ``p rl:{<name>}`` (the bucket's TAT, ms) and
``p rp:{<name>}`` (its pause) share the bucket's hash tag; ``p q:{<name>}:<YYYY-MM>`` (the
count) and ``p q:{<name>}:<YYYY-MM>:d:<quota id>`` (how many of one daemon's uses it holds).

When Redis is unavailable each daemon falls back to a local bucket at ``redis.fallback_share``
of the rate and burst, and to that share of the quota's remainder as last seen (counted
locally and added to Redis when it returns, each use once); with the share at most 1 / the
number of daemons the fleet stays within the limit. Fallbacks are counted in the ``REDIS``
stats line.
"""

from __future__ import annotations

import dataclasses
import math
import secrets
from typing import Protocol

import trio

from csp_web.core.api.errors import OpError
from protocol import ErrorCode

from .ratelimit import MAX_PAUSE_S, Bucket, LimitCounts, Rate, RateLimits
from .redis_link import RedisLink, RedisUnavailable

# Returns {1, wait_ms}: granted, its slot wait_ms from now; {0, wait_ms}: refused, a token in
# wait_ms; {0, -1}: refused, background and the bucket under half.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local pause = tonumber(redis.call('GET', KEYS[2]) or '0')
if pause > now then
  if ARGV[4] == '1' then return {0, -1} end
  return {0, math.ceil(pause - now)}
end
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local new_tat = tat + interval
local wait = new_tat - burst * interval - now
if ARGV[4] == '1' and (wait > 0 or burst - (new_tat - now) / interval < burst / 2) then
  return {0, -1}
end
if wait > tonumber(ARGV[3]) then return {0, math.ceil(wait)} end
redis.call('SET', KEYS[1], tostring(new_tat), 'PX', math.ceil(new_tat - now + interval))
if wait < 0 then wait = 0 end
return {1, math.ceil(wait)}
"""

_PAUSE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local until_ms = now + tonumber(ARGV[1])
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if until_ms > current then
  redis.call('SET', KEYS[1], tostring(until_ms), 'PX', tonumber(ARGV[1]))
end
return 1
"""

# KEYS: the month's count, this daemon's numbering of its own uses (``d:<quota id>``).
# ARGV: limit, n (this use is the daemon's n-th this month, counting those taken locally while
# Redis was down). Uses below n not yet counted (applied < n - 1) were taken locally: added
# first. A use numbered at most ``applied`` is already counted: a call that timed out here
# but ran when Redis resumed, retried or replayed, never counts twice (issue 21: a fallback's
# uses were reported again). Returns {taken 0/1, used, applied}.
_QUOTA = """
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local applied = tonumber(redis.call('GET', KEYS[2]) or '0')
local n = tonumber(ARGV[2])
if applied >= n then return {1, used, applied} end
if n - 1 > applied then
  used = redis.call('INCRBY', KEYS[1], n - 1 - applied)
  applied = n - 1
end
if used < tonumber(ARGV[1]) then
  used = redis.call('INCR', KEYS[1])
  applied = n
end
redis.call('EXPIRE', KEYS[1], 3024000)
redis.call('SET', KEYS[2], applied, 'EX', 3024000)
return {applied == n and 1 or 0, used, applied}
"""


class TokenBucket(Protocol):
    """What an op uses of a bucket: ``ratelimit.Bucket`` and ``SharedBucket`` both are one."""

    name: str

    async def acquire(self, *, deadline: float) -> None: ...

    async def acquire_background(self) -> bool: ...

    async def pause(self, when: float) -> None: ...


class BucketSource(Protocol):
    """``ratelimit.RateLimits`` or ``SharedRateLimits``: buckets by name, reloadable."""

    @property
    def counts(self) -> LimitCounts: ...  # waits and refusals by bucket name (metrics)

    def bucket(self, name: str) -> TokenBucket | None: ...

    def reload(self, rates: dict[str, Rate]) -> None: ...


class SharedBucket:
    """One bucket on Redis, with a local bucket at ``share`` of its rate as the fallback."""

    def __init__(
        self, link: RedisLink, name: str, rate: Rate, share: float, counts: LimitCounts
    ) -> None:
        self._link = link
        self.name = name
        self.rate = rate
        self.counts = counts
        self.local = Bucket(name, fallback_rate(rate, share), counts)
        tag = "{" + name + "}"
        self._keys = [link.key("rl", tag), link.key("rp", tag)]
        self._take = link.client.register_script(_TAKE)
        self._pause = link.client.register_script(_PAUSE)

    async def _call(self, max_wait_ms: float, background: bool) -> tuple[bool, int]:
        interval_ms = 60_000 / self.rate.per_minute
        args: list[str | int] = [
            repr(interval_ms),
            self.rate.burst,
            repr(max(0.0, max_wait_ms)),
            int(background),
        ]
        granted, wait_ms = await self._link.call(
            lambda r: self._take(keys=self._keys, args=args, client=r), "ratelimit"
        )
        return bool(granted), self._link.integer(wait_ms, "ratelimit")

    async def acquire(self, *, deadline: float) -> None:
        """Take a token, waiting for one that comes before ``deadline`` (trio time); else
        OpError(rate_limited) with RETRY_AFTER (seconds)."""
        first = True
        while True:
            # Lua reads no "inf": an endless deadline waits at most a month (MAX_PAUSE_S).
            max_wait_ms = min((deadline - trio.current_time()) * 1000, MAX_PAUSE_S * 1000)
            try:
                granted, wait_ms = await self._call(max_wait_ms, False)
            except RedisUnavailable:
                self._link.fallback("ratelimit_local")
                await self.local.acquire(deadline=deadline)
                return
            if granted:
                if wait_ms > 0:  # the reserved slot
                    await self.counts.wait(self.name, wait_ms / 1000, first=first)
                return
            if wait_ms > max_wait_ms:  # a pause or a token past the deadline
                retry_after = str(max(1, math.ceil(wait_ms / 1000)))
                raise self.counts.refused(self.name, retry_after)
            # A pause ends before the deadline: try again.
            await self.counts.wait(self.name, wait_ms / 1000, first=first)
            first = False

    async def acquire_background(self) -> bool:
        """Take a token only while the bucket stays at least half full."""
        try:
            granted, _ = await self._call(0, True)
        except RedisUnavailable:
            self._link.fallback("ratelimit_local")
            return self.local.try_acquire_background()
        return granted

    async def pause(self, when: float) -> None:
        """Hold every daemon's calls until trio time ``when`` (Retry-After)."""
        self.local.pause_until(when)
        delay_ms = math.ceil((when - trio.current_time()) * 1000)
        if delay_ms <= 0:
            return
        try:
            await self._link.call(
                lambda r: self._pause(keys=self._keys[1:], args=[delay_ms], client=r), "pause"
            )
        except RedisUnavailable:
            self._link.fallback("pause_local")


def fallback_rate(rate: Rate, share: float) -> Rate:
    """``share`` of ``rate``: what one daemon may spend alone while Redis is down."""
    return Rate(rate.per_minute * share, max(1, math.floor(rate.burst * share)))


class SharedRateLimits:
    """The daemon's shared buckets by name (``RateLimits`` for a fleet) and its quotas."""

    def __init__(self, link: RedisLink, rates: dict[str, Rate]) -> None:
        self._link = link
        self._rates = rates
        self._buckets: dict[str, SharedBucket] = {}
        self._quotas: dict[str, SharedQuota] = {}
        self.counts = LimitCounts()

    def bucket(self, name: str) -> SharedBucket | None:
        if name not in self._buckets:
            rate = self._rates.get(name)
            if rate is None:
                return None
            self._buckets[name] = SharedBucket(
                self._link, name, rate, self._link.config.fallback_share, self.counts
            )
        return self._buckets[name]

    def reload(self, rates: dict[str, Rate]) -> None:
        """New rates apply at once (a bucket's state in Redis is its TAT, rate-free); local
        fallback buckets whose rate did not change keep their tokens."""
        self._buckets = {n: b for n, b in self._buckets.items() if rates.get(n) == b.rate}
        self._rates = rates

    def quota(self, name: str, limit: int) -> SharedQuota:
        """The quota ``name`` at ``limit``; a changed limit keeps its counts (uses taken
        locally and not yet on Redis are still added there)."""
        quota = self._quotas.get(name)
        if quota is None:
            quota = self._quotas[name] = SharedQuota(self._link, name, limit)
        quota.limit = limit
        return quota


@dataclasses.dataclass
class _Month:
    """One daemon's view of one month of a quota."""

    taken: int = 0  # uses this daemon granted, on Redis or locally: the last one's number
    applied: int = 0  # of them, how many Redis last said it counts
    used: int | None = None  # the fleet's count, as Redis last said


class SharedQuota:
    """A monthly count on Redis; raises OpError(rate_limited) when the month is spent.

    Each daemon numbers its own uses of a month (1, 2, ...) and Redis keeps the highest it
    has counted (``p q:{<name>}:<YYYY-MM>:d:<quota id>``), so a use is counted once however
    often its call reaches Redis: uses taken locally while Redis was down are added by the
    next call that answers, and a call that timed out but ran later adds nothing twice."""

    def __init__(self, link: RedisLink, name: str, limit: int) -> None:
        self._link = link
        self.name = name
        self.limit = limit
        self._script = link.client.register_script(_QUOTA)
        self._id = secrets.token_hex(8)  # this daemon's numbering (a restart starts anew)
        self._months: dict[str, _Month] = {}
        # One take at a time: two calls in flight would carry the same number, and the
        # second would read as already counted.
        self._lock = trio.Lock()

    async def take(self, month: str) -> None:
        """Count one use of ``month``; OpError(rate_limited) when it is spent, or when Redis
        is unavailable and this daemon's share of the remainder is spent (or unknown)."""
        async with self._lock:
            await self._take(self._months.setdefault(month, _Month()), month)

    async def _take(self, state: _Month, month: str) -> None:
        tag = "{" + self.name + "}"
        keys = [self._link.key("q", tag, month), self._link.key("q", tag, month, "d", self._id)]
        args = [self.limit, state.taken + 1]
        try:
            granted, used, applied = await self._link.call(
                lambda r: self._script(keys=keys, args=args, client=r), "quota"
            )
            state.used = self._link.integer(used, "quota")
            state.applied = self._link.integer(applied, "quota")
        except RedisUnavailable:
            self._link.fallback("quota_local")
            self._take_locally(state)
            return
        state.taken = max(state.taken, state.applied)
        if not granted:
            raise OpError(ErrorCode.RATE_LIMITED, f"{self.name} monthly quota of {self.limit}")

    def _take_locally(self, state: _Month) -> None:
        if state.used is None:  # never heard from Redis this month: nothing is known to be left
            raise OpError(ErrorCode.RATE_LIMITED, f"{self.name} quota store unavailable")
        share = self._link.config.fallback_share
        allowance = math.floor(share * max(0, self.limit - state.used))
        if state.taken - state.applied >= allowance:
            raise OpError(ErrorCode.RATE_LIMITED, f"{self.name} monthly quota of {self.limit}")
        state.taken += 1


def shared_or_local(link: RedisLink | None, rates: dict[str, Rate]) -> BucketSource:
    """The fleet's buckets on ``link``, else this daemon's own."""
    return RateLimits(rates) if link is None else SharedRateLimits(link, rates)
