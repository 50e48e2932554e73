"""The response cache on a shared Redis: what ``csp_web.infra.cache`` does on disk, for a fleet.

Same keys (``cache_key``: namespace + SHA-256), TTLs, namespaces-as-tags and invalidation as
the diskcache store; values are JSON text, never pickle. The byte-bounded ``MemoryTier`` stays
in front. Redis keys (``p`` is ``redis.key_prefix``; the namespace is a Cluster hash tag, so a
namespace's entries, its tag set and its generation share one slot):

    p c:{ns}:<sha256>    the value, with the entry's TTL (PX)
    p t:{ns}             sorted set of the namespace's value keys, scored by expiry (ms)
    p g:{ns}             the namespace's generation, bumped by each invalidation

Round trips: a memory hit costs none, or one (the generation) in a *checked* namespace (the
API ops', whose writes invalidate); a Redis hit costs one (value, generation and PTTL in one
pipeline); a write and an invalidation one script each, which also publishes an event so the
other daemons drop their memory copies. A write whose namespace was invalidated after its read
began is refused by the script (the generation moved), so no stale answer is written back.

Failures fall back (``RedisUnavailable`` from the link): a read is a miss, a write is skipped,
an invalidation is kept pending and retried before the namespace is used again (its reads miss
meanwhile). While the event subscription is down but Redis answers, the memory tier is emptied
and bypassed (another daemon's write may have gone unheard). While Redis itself is down, the
memory tier and under it a bounded disk tier (``LocalTier``, cache_local.py) are the local
fallback for unchecked namespaces, as the embedded store's tiers are: reads are served from
them and values fetched meanwhile kept in both (issue 21: with the memory tier alone a working
set larger than it was fetched from the origins again, at 0.14-0.53 of the Redis-up rate).
Once Redis answers again with its events live, every copy served or made alone is dropped
(the memory tier emptied, the disk tier's spell retired): Redis decides again.
"""

from __future__ import annotations

import functools
import json
import math
import os
import time
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import trio

from .cache import Memo, MemoryTier, cache_key, open_cache
from .cache_local import LocalTier
from .redis_link import RedisLink, RedisUnavailable

if TYPE_CHECKING:
    import redis

_SET = """
local gen = redis.call('GET', KEYS[3]) or '0'
if gen ~= ARGV[3] then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZADD', KEYS[2], now + ttl, KEYS[1])
if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end
redis.call('PUBLISH', ARGV[5], ARGV[4])
return 1
"""

_INVALIDATE = """
local keys = redis.call('ZRANGE', KEYS[1], 0, -1)
local n = 0
for i = 1, #keys, 500 do
  n = n + redis.call('DEL', unpack(keys, i, math.min(i + 499, #keys)))
end
redis.call('DEL', KEYS[1])
local gen = redis.call('INCR', KEYS[2])
redis.call('PUBLISH', ARGV[2], ARGV[1])
return {n, gen}
"""

T = TypeVar("T")

_MISS_GENS = 4096  # generations remembered from misses, for the writes that follow them


class ResponseCache(Protocol):
    """What the ops use of a cache: ``infra.cache.Cache`` and ``RedisCache`` both are one."""

    hits: Counter[str]  # by namespace
    misses: Counter[str]

    @property
    def storage_full(self) -> bool:
        """Its last write found the disk full (SPEC O-6; on Redis, its local tier's disk)."""

    async def get(self, namespace: str, material: Any) -> Any | None: ...

    async def set(self, namespace: str, material: Any, value: Any, *, ttl_s: float) -> None: ...

    async def keep(self, namespace: str, material: Any, value: Any, *, ttl_s: float) -> None: ...

    def peek(self, namespace: str, material: Any) -> Any | None:
        """What ``get`` would answer from memory without waiting; None: ask ``get``. Counts
        nothing (``count_hit``)."""

    def peek_memo(self, namespace: str, material: Any) -> tuple[Any, Memo] | None:
        """``peek``'s value and the memo of its memory entry (``MemoryTier``), or None."""

    def holds(self, namespace: str, material: Any, value: Any, *, ttl_s: float) -> bool:
        """Whether ``keep`` of the same would write nothing."""

    def count_hit(self, namespace: str) -> None: ...

    async def invalidate(self, namespace: str) -> int: ...


class RedisCache:
    """The shared cache with a memory tier; made by ``open_response_cache`` in Redis mode.

    ``checked`` namespaces (by prefix before ``:``, e.g. ``api``) are invalidated by writes:
    their memory hits are confirmed against the namespace's generation in Redis, so a write
    through one daemon is never answered from another's memory."""

    def __init__(
        self,
        link: RedisLink,
        *,
        memory_bytes: int,
        store: str = "web",
        checked: tuple[str, ...] = ("api",),
        local: LocalTier | None = None,
    ) -> None:
        self._link = link
        self._prefix = link.config.key_prefix
        self._store = store
        self._memory_bytes = memory_bytes
        self._memory = MemoryTier(memory_bytes)
        self._local_tier = local  # the disk under the memory tier while Redis is down
        # Its calls take its lock one at a time: they wait here, not in worker threads that
        # would hold the daemon's shared thread tokens while Redis is down.
        self._disk_turn = trio.CapacityLimiter(1)
        self._checked = checked
        self._gens: dict[str, int] = {}  # the generation each namespace had at its last read
        self._miss_gens: OrderedDict[str, int] = OrderedDict()
        self._pending: set[str] = set()  # namespaces whose invalidation waits for Redis
        # Copies were served or made while Redis was down (in the link's outage number
        # _local_spell): dropped once it is back, or another outage began meanwhile.
        self._local = False
        self._local_spell = 0
        self._set_script = link.client.register_script(_SET)
        self._invalidate_script = link.client.register_script(_INVALIDATE)
        self.hits: Counter[str] = Counter()  # by namespace, as the embedded cache's
        self.misses: Counter[str] = Counter()
        link.on_event(f"cache:{store}", self._on_event)

    @property
    def storage_full(self) -> bool:
        """Whether the local tier's last write found its disk full (Redis has no disk here)."""
        return self._local_tier is not None and self._local_tier.storage_full

    # --- keys -------------------------------------------------------------------------------

    def _keys(self, key: str) -> tuple[str, str, str]:
        namespace, digest = key.rsplit(":", 1)
        tag = "{" + namespace + "}"
        p = f"{self._prefix}{self._store}:"
        return f"{p}c:{tag}:{digest}", f"{p}t:{tag}", f"{p}g:{tag}"

    def _checked_namespace(self, namespace: str) -> bool:
        return namespace.split(":", 1)[0] in self._checked

    # --- reads ------------------------------------------------------------------------------

    async def get(self, namespace: str, material: Any) -> Any | None:
        """The cached value, or None when absent, expired, or Redis is unavailable."""
        key = cache_key(namespace, material)
        value = await self._get(namespace, key)
        if value is None:
            self.misses[namespace] += 1
        else:
            self.hits[namespace] += 1
        return value

    async def _get(self, namespace: str, key: str) -> Any | None:
        self._settle()
        if namespace in self._pending and await self._flush_pending(namespace) is None:
            return None
        value_key, _, gen_key = self._keys(key)
        entry = self._memory_entry(namespace, key)
        if entry is not None:
            gen, value = entry
            if not self._checked_namespace(namespace):
                await self._copy_to_disk(namespace, key, gen, value)
                return value
            try:
                current = await self._link.call(lambda r: r.get(gen_key), "cache_gen")
                current_gen = self._link.integer(current or 0, "cache_gen")
            except RedisUnavailable:
                self._link.fallback("cache_miss")
                return None
            if current_gen == gen:
                return value
            self._memory.drop(key)
        return await self._read(namespace, key, value_key, gen_key)

    def _settle(self) -> None:
        """Once Redis answers again, drop every copy served or made while it was down (a
        peer may have written since): Redis decides again, and the next outage starts empty."""
        link = self._link
        if self._local and (link.up or link.down_spells != self._local_spell):
            self._local = False
            self._empty_memory()
            if self._local_tier is not None:
                self._local_tier.retire()

    def _mark_local(self) -> None:
        """This outage's copies are being served or made: settle any earlier outage's first."""
        self._settle()
        self._local = True
        self._local_spell = self._link.down_spells

    def _memory_entry(self, namespace: str, key: str) -> tuple[int, Any] | None:
        if self._local_fallback(namespace):
            if self._link.available():
                return None  # the down window has passed: this read tries Redis first
            self._mark_local()
        elif not self._link.events_live:
            return None  # Redis decides: emptied if it answers (events were missed), else kept
        entry = self._memory.get(key)
        return None if entry is None else (entry[0], entry[1])

    def _local_fallback(self, namespace: str) -> bool:
        """Whether the local tiers stand in for Redis: Redis is down (not only the events),
        and the namespace is not checked (a checked one must ask Redis for each hit)."""
        return not self._link.up and not self._checked_namespace(namespace)

    async def _local_entry(self, namespace: str, key: str) -> Any | None:
        """The local copy of ``key`` while Redis is down: the memory tier's, else the disk
        tier's (then kept in memory too); None when neither has one or Redis is up."""
        if not self._local_fallback(namespace):
            return None
        self._mark_local()
        entry = self._memory.get(key)
        if entry is not None:
            await self._copy_to_disk(namespace, key, entry[0], entry[1])
            return entry[1]
        if self._local_tier is None:
            return None
        found = await self._on_disk(functools.partial(self._local_tier.get, key))
        if found is None:
            return None
        value, expires_at = found
        self._memory.put(key, (-1, value), expires_at=expires_at)
        return value

    async def _copy_to_disk(self, namespace: str, key: str, gen: int, value: Any) -> None:
        """While Redis is down, a memory copy read from Redis (``gen`` >= 0) goes to the disk
        tier at its first hit, with the expiry it has: the memory tier may drop it before
        Redis is back, and it would then be fetched again. Marked as a local copy after."""
        if gen < 0 or self._local_tier is None or not self._local_fallback(namespace):
            return
        expires_at = self._memory.expires_at(key)
        ttl_s = 0.0 if expires_at is None else expires_at - time.time()
        if expires_at is None or not 0 < ttl_s < math.inf:  # gone, or no TTL: not kept
            return
        text = json.dumps(value, separators=(",", ":"))
        self._memory.put(key, (-1, value), expires_at=expires_at)
        await self._hold_on_disk(namespace, key, value, text, ttl_s)

    async def _on_disk(self, call: Callable[[], T]) -> T:
        """``call`` (a LocalTier method) in a worker thread, one at a time."""
        return await trio.to_thread.run_sync(call, limiter=self._disk_turn)

    async def _keep_locally(
        self, namespace: str, key: str, value: Any, text: str, ttl_s: float
    ) -> None:
        if not self._local_fallback(namespace):
            return
        self._mark_local()
        self._memory.put(key, (-1, value), expires_at=time.time() + ttl_s)
        await self._hold_on_disk(namespace, key, value, text, ttl_s)

    async def _hold_on_disk(
        self, namespace: str, key: str, value: Any, text: str, ttl_s: float
    ) -> None:
        if self._local_tier is not None and not self._local_tier.holds(key, text):
            write = functools.partial(
                self._local_tier.set, key, value, text=text, ttl_s=ttl_s, namespace=namespace
            )
            await self._on_disk(write)

    def _empty_memory(self) -> None:
        if self._memory.bytes:
            self._memory = MemoryTier(self._memory_bytes)

    async def _read(self, namespace: str, key: str, value_key: str, gen_key: str) -> Any | None:
        def read(client: redis.Redis) -> list[Any]:
            pipe = client.pipeline(transaction=False)
            pipe.get(value_key)
            pipe.get(gen_key)
            pipe.pttl(value_key)
            return pipe.execute()

        asked_at = time.time()  # PTTL counts from when Redis answered, after this
        try:
            raw, gen_raw, pttl_ms = await self._link.call(read, "cache_get")
            gen = self._link.integer(gen_raw or 0, "cache_get")
        except RedisUnavailable:
            value = await self._local_entry(namespace, key)
            self._link.fallback("cache_miss" if value is None else "cache_local")
            return value
        if not self._link.events_live:
            self._empty_memory()  # Redis answers but its events were missed: copies may be stale
        self._gens[namespace] = gen
        if raw is None:
            self._remember_miss(key, gen)
            return None
        try:
            value = json.loads(raw)
        except ValueError:
            return None
        if self._link.events_live:
            expires_at = asked_at + pttl_ms / 1000 if pttl_ms > 0 else math.inf
            self._memory.put(key, (gen, value), expires_at=expires_at)
        return value

    def _remember_miss(self, key: str, gen: int) -> None:
        self._miss_gens[key] = gen
        self._miss_gens.move_to_end(key)
        while len(self._miss_gens) > _MISS_GENS:
            self._miss_gens.popitem(last=False)

    # --- writes -----------------------------------------------------------------------------

    async def set(self, namespace: str, material: Any, value: Any, *, ttl_s: float) -> None:
        """Store ``value`` (JSON) for ``ttl_s``; skipped when Redis is unavailable or the
        namespace was invalidated since this value's read began."""
        key = cache_key(namespace, material)
        text = json.dumps(value, separators=(",", ":"))
        self._settle()
        if namespace in self._pending and await self._flush_pending(namespace) is None:
            return
        gen = self._miss_gens.pop(key, self._gens.get(namespace))
        value_key, tag_key, gen_key = self._keys(key)
        if gen is None:
            try:
                raw = await self._link.call(lambda r: r.get(gen_key), "cache_gen")
                gen = self._gens[namespace] = self._link.integer(raw or 0, "cache_gen")
            except RedisUnavailable:
                self._link.fallback("cache_skip")
                await self._keep_locally(namespace, key, value, text, ttl_s)
                return
        event = self._link.event(f"cache:{self._store}", key=key)
        expires_at = time.time() + ttl_s  # before the script: memory never outlives Redis
        ttl_ms = max(1, math.ceil(ttl_s * 1000))
        keys = [value_key, tag_key, gen_key]
        args: list[str | int] = [text, ttl_ms, str(gen), event, self._link.channel]
        try:
            stored = await self._link.call(
                lambda r: self._set_script(keys=keys, args=args, client=r), "cache_set"
            )
        except RedisUnavailable:
            self._link.fallback("cache_skip")
            await self._keep_locally(namespace, key, value, text, ttl_s)
            return
        if stored and self._link.events_live:
            self._memory.put(key, (gen, value), expires_at=expires_at)

    async def keep(self, namespace: str, material: Any, value: Any, *, ttl_s: float) -> None:
        """``set``, unless the memory tier holds this very value as read from or written to
        Redis (not a copy made while it was down) with half of ``ttl_s`` or more to live, and
        Redis and its events are live: as ``Cache.keep``, a hit then costs no round trip."""
        if not self.holds(namespace, material, value, ttl_s=ttl_s):
            await self.set(namespace, material, value, ttl_s=ttl_s)

    def holds(self, namespace: str, material: Any, value: Any, *, ttl_s: float) -> bool:
        """Whether ``keep`` of the same would write nothing (see ``keep``)."""
        key = cache_key(namespace, material)
        entry = self._memory.get(key) if self._memory_answers(namespace) else None
        held = entry is not None and entry[0] >= 0 and entry[1] == value
        return held and self._memory.lives(key, ttl_s / 2)

    def peek(self, namespace: str, material: Any) -> Any | None:
        """The value ``get`` would answer from the memory tier without a round trip or a
        disk copy: only while Redis and its events are live, no earlier outage's copies are
        held, no invalidation of ``namespace`` is pending and the namespace is not checked;
        None otherwise (then ask ``get``). Counts nothing (``count_hit``)."""
        held = self.peek_memo(namespace, material)
        return None if held is None else held[0]

    def peek_memo(self, namespace: str, material: Any) -> tuple[Any, Memo] | None:
        """``peek``'s value and the memo of its entry in the memory tier, under the same
        conditions; None otherwise."""
        if self._local or namespace in self._pending or not self._memory_answers(namespace):
            return None
        held = self._memory.held(cache_key(namespace, material))
        if held is None or held[0][0] < 0:
            return None
        return held[0][1], held[1]

    def count_hit(self, namespace: str) -> None:
        """Count a hit answered from ``peek``, as ``get`` counts its own."""
        self.hits[namespace] += 1

    def _memory_answers(self, namespace: str) -> bool:
        """Whether a memory copy of ``namespace`` answers for Redis on its own: Redis and its
        events are live (every write elsewhere drops our copy) and the namespace is not
        checked against Redis on each hit."""
        link = self._link
        return link.up and link.events_live and not self._checked_namespace(namespace)

    async def invalidate(self, namespace: str) -> int:
        """Drop every entry of ``namespace`` on every daemon; the count dropped from Redis
        (0 when the invalidation is left pending for Redis to come back)."""
        self._memory.drop_namespace(namespace)
        if self._local_tier is not None and self._local_tier.holds_rows():
            await self._on_disk(functools.partial(self._local_tier.drop_namespace, namespace))
        self._pending.add(namespace)
        return await self._flush_pending(namespace) or 0

    async def _flush_pending(self, namespace: str) -> int | None:
        """Run the namespace's invalidation: the count of entries dropped, None on failure."""
        _, tag_key, gen_key = self._keys(cache_key(namespace, ""))
        event = self._link.event(f"cache:{self._store}", namespace=namespace)
        args = [event, self._link.channel]
        try:
            dropped, gen = await self._link.call(
                lambda r: self._invalidate_script(keys=[tag_key, gen_key], args=args, client=r),
                "cache_invalidate",
            )
            count = self._link.integer(dropped, "cache_invalidate")
            self._gens[namespace] = self._link.integer(gen, "cache_invalidate")
        except RedisUnavailable:
            self._link.fallback("cache_invalidate_pending")
            return None
        self._pending.discard(namespace)
        self._memory.drop_namespace(namespace)
        return count

    def _on_event(self, message: dict[str, Any]) -> None:
        """Another daemon wrote a key or invalidated a namespace: drop the memory copies."""
        if message.get("from") == self._link.daemon_id:
            return
        if isinstance(key := message.get("key"), str):
            self._memory.drop(key)
        if isinstance(namespace := message.get("namespace"), str):
            self._memory.drop_namespace(namespace)


@asynccontextmanager
async def open_response_cache(
    directory: str,
    *,
    size_limit_bytes: int,
    memory_bytes: int,
    link: RedisLink | None,
    store: str,
) -> AsyncIterator[ResponseCache]:
    """The diskcache store in ``directory`` without a link (embedded), else the shared
    ``store`` (``web``, ``exec``) on Redis; both with a ``memory_bytes`` tier in front. On
    Redis, ``directory``/redis-down holds the disk tier used while Redis is down (at most
    ``redis.fallback_cache_bytes``; 0: none), opened at its first use and closed on exit."""
    if link is None:
        async with open_cache(
            directory, size_limit_bytes=size_limit_bytes, memory_bytes=memory_bytes
        ) as cache:
            yield cache
        return
    budget = link.config.fallback_cache_bytes
    local = LocalTier(os.path.join(directory, "redis-down"), max_bytes=budget) if budget else None
    await trio.lowlevel.checkpoint()
    try:
        yield RedisCache(link, memory_bytes=memory_bytes, store=store, local=local)
    finally:
        if local is not None:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(local.close)
