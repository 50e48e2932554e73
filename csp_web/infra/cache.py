"""The response cache the specialists share: diskcache on disk, keyed by SHA-256.

Keys are the SHA-256 of the op name and its normalised input (seed 000: "Cache key:
SHA256(query)"), so no request text, URL or credential is stored as a key. Callers must pass
values without secrets: auth headers and tokens are never part of what is cached (seed 001:
"Sensitive data stripped before caching"). Entries are tagged by namespace so an API's write
can invalidate its cached reads at once. diskcache is blocking (SQLite), so every call runs in
a worker thread.

Rows are read with ``SafeJSONDisk`` (cache_disk.py), which never unpickles: a planted pickle
row is a logged miss and is dropped. The cache is an optimisation: when its disk is full a
``set`` is skipped (logged once per spell, shown by ``storage_full``), never failing the op
whose answer it would have kept (docs/architecture.md, "A full disk").
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import os
import sqlite3
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Callable, Hashable
from contextlib import asynccontextmanager
from typing import Any

import diskcache
import trio

from csp_web.core.api.errors import StorageFull
from csp_web.core.api.storage import is_storage_full, storage_seam
from csp_web.infra.cache_disk import SafeJSONDisk, UnsafeCacheRow

log = logging.getLogger(__name__)


def cache_key(namespace: str, material: Any) -> str:
    """``namespace:`` + SHA-256 of the canonical JSON of ``material``."""
    if isinstance(material, str):
        return _text_key(namespace, material)
    blob = json.dumps(material, sort_keys=True, separators=(",", ":"), default=str)
    return f"{namespace}:{hashlib.sha256(blob.encode('utf-8')).hexdigest()}"


# A cache hit of fetch asks for the keys of its URL, its fileKey and its summary, each a text:
# 4.5 us each in JSON and SHA-256, 0.2 us remembered (issue 26). At most 1,024 texts, each a
# URL the gate accepted (``guard.max_url_chars``) or a key of the ops' own making.
@functools.lru_cache(maxsize=1024)
def _text_key(namespace: str, material: str) -> str:
    blob = json.dumps(material, separators=(",", ":"))
    return f"{namespace}:{hashlib.sha256(blob.encode('utf-8')).hexdigest()}"


def approximate_size(value: Any) -> int:
    """Roughly the bytes ``value`` holds, counting strings and containers: cheap (nothing is
    encoded) and iterative, so a deeply nested API answer cannot exhaust the stack."""
    total, pending = 0, [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str | bytes):
            total += len(item) + 50
        elif isinstance(item, dict):
            total += 64
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            total += 56
            pending.extend(item)
        else:
            total += 32
    return total


class Memo(dict[Hashable, Any]):
    """What callers derive from one entry's value alone, kept for the entry's next hits
    (``MemoryTier.held``): made at the entry's first ``held``, gone with the entry. ``keep``
    counts what it adds toward the tier's byte bound, so the bound holds memos included."""

    __slots__ = ("_key", "_tier")

    def __init__(self, tier: MemoryTier | None = None, key: str = "") -> None:
        super().__init__()
        self._tier = tier
        self._key = key

    def keep(self, name: Hashable, value: Any, nbytes: int) -> None:
        """Keep ``value`` under ``name``, counting ``nbytes`` (roughly what it holds that the
        entry's value does not) toward the tier's bound: the tier may evict older entries."""
        self[name] = value
        if self._tier is not None:
            self._tier.charge(self._key, self, nbytes)


# An empty memo, counted when an entry's first ``held`` makes it: 166 bytes by tracemalloc
# (2,000 memos, the entry's tuple made again included).
MEMO_BYTES = 256


class MemoryTier:
    """A byte-bounded LRU of recent entries in front of the disk, so a hot hit costs a dict
    lookup instead of a worker thread and a decode. Values are shared: never mutate one.

    An entry a caller derives from gets a memo (``Memo``, at its first ``held``) that goes
    with it (when it is replaced, expires, is dropped or evicted): what a caller derives from
    the value alone, kept for the entry's next hits. The memo and what a caller keeps there
    count in ``bytes`` (``Memo.keep``): fetch's hot route keeps its Page and two views'
    descriptions, 1.9 KB median, 3.4 KB at most over the 88 pages of bench/origin.py's
    corpus (0.20 to 0.54 of the entry's own counted size; tracemalloc), which uncounted
    would let the tier hold about 1.5 times its bound."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[str, tuple[float, Any, int, Memo | None]] = OrderedDict()

    def get(self, key: str) -> Any | None:
        entry = self._live(key)
        return None if entry is None else entry[1]

    def held(self, key: str) -> tuple[Any, Memo] | None:
        """``key``'s unexpired value and its entry's memo (made now at its first ``held``,
        so only entries a caller derives from carry one), or None."""
        entry = self._live(key)
        if entry is None:
            return None
        memo = entry[3]
        if memo is None:
            memo = Memo(self, key)
            self._entries[key] = (entry[0], entry[1], entry[2], memo)
            self.charge(key, memo, MEMO_BYTES)
        return entry[1], memo

    def _live(self, key: str) -> tuple[float, Any, int, Memo | None] | None:
        """``key``'s entry, now the most recently used, unless it is missing or expired."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[0] <= time.time():
            self.drop(key)
            return None
        self._entries.move_to_end(key)
        return entry

    def lives(self, key: str, seconds: float) -> bool:
        """Whether ``key``'s entry lives ``seconds`` more at least."""
        expires_at = self.expires_at(key)
        return expires_at is not None and expires_at - time.time() >= seconds

    def expires_at(self, key: str) -> float | None:
        """When ``key``'s entry expires (``time.time()``), None when it is not held."""
        entry = self._entries.get(key)
        return None if entry is None else entry[0]

    def put(self, key: str, value: Any, *, expires_at: float) -> None:
        size = approximate_size(value)
        self.drop(key)
        if size > self.max_bytes // 8:  # one huge entry must not flush all the others
            return
        self._entries[key] = (expires_at, value, size, None)
        self.bytes += size
        self._evict()

    def charge(self, key: str, memo: Memo, nbytes: int) -> None:
        """Count ``nbytes`` more for ``key``'s entry, if ``memo`` is still its memo (not one
        of an entry since replaced), then evict the least recently used past the bound."""
        entry = self._entries.get(key)
        if entry is None or entry[3] is not memo:
            return
        self._entries[key] = (entry[0], entry[1], entry[2] + nbytes, memo)
        self.bytes += nbytes
        self._evict()

    def _evict(self) -> None:
        while self.bytes > self.max_bytes:
            self.drop(next(iter(self._entries)))

    def drop(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.bytes -= entry[2]

    def drop_namespace(self, namespace: str) -> None:
        for key in [k for k in self._entries if k.startswith(namespace + ":")]:
            self.drop(key)


class Cache:
    """Bounded, expiring entries on disk with a memory tier; made by ``open_cache``.

    The disk store is opened by ``open_disk``; when a full disk stops that (SPEC O-6), the
    cache runs on its memory tier and each ``set`` tries again."""

    def __init__(self, open_disk: Callable[[], diskcache.Cache], *, memory_bytes: int) -> None:
        self._open_disk = open_disk
        self._disk: diskcache.Cache | None = None
        self._opening = threading.Lock()  # set() runs in worker threads: one opener
        self._memory = MemoryTier(memory_bytes)
        # Bumped by invalidate(): a read or write that began before it must not bring an old
        # value back into memory after the namespace was emptied.
        self._generation: dict[str, int] = {}
        # By namespace (a bounded set: the ops' own and the configured APIs'), for the
        # metrics' hit ratio; a plain dict increment on the hot path.
        self.hits: Counter[str] = Counter()
        self.misses: Counter[str] = Counter()
        self.storage_full = False  # the last write found the disk full (REQ:stats)
        self.unsafe_rows = 0  # planted rows dropped (SafeJSONDisk)

    async def get(self, namespace: str, material: Any) -> Any | None:
        """The cached value, or None when absent or expired."""
        key = cache_key(namespace, material)
        value = self._memory.get(key)
        if value is None:
            generation = self._generation.get(namespace, 0)
            value, expires_at = await trio.to_thread.run_sync(self._read, key)
            if value is not None and generation == self._generation.get(namespace, 0):
                self._memory.put(key, value, expires_at=expires_at or math.inf)
        if value is None:
            self.misses[namespace] += 1
        else:
            self.hits[namespace] += 1
        return value

    def peek(self, namespace: str, material: Any) -> Any | None:
        """The value the memory tier holds unexpired, without waiting and without counting
        a hit (``count_hit`` does, once the caller answers with it); None: ask ``get``."""
        held = self.peek_memo(namespace, material)
        return None if held is None else held[0]

    def peek_memo(self, namespace: str, material: Any) -> tuple[Any, Memo] | None:
        """``peek``'s value and the memo of its entry in the memory tier (``MemoryTier``),
        or None: for what a caller derives from that value on every hit."""
        return self._memory.held(cache_key(namespace, material))

    def holds(self, namespace: str, material: Any, value: Any, *, ttl_s: float) -> bool:
        """Whether ``keep(namespace, material, value, ttl_s=ttl_s)`` would write nothing."""
        key = cache_key(namespace, material)
        return self._memory.get(key) == value and self._memory.lives(key, ttl_s / 2)

    def count_hit(self, namespace: str) -> None:
        """Count a hit answered from ``peek``, as ``get`` counts its own."""
        self.hits[namespace] += 1

    @property
    def _store(self) -> diskcache.Cache:
        """The disk store, opened now if it was not; raises StorageFull("cache") when a full
        disk stops that. Blocking: call from a worker thread."""
        with self._opening:
            if self._disk is None:
                with storage_seam("cache"):
                    self._disk = self._open_disk()
            return self._disk

    def close(self) -> None:
        """Close the disk store (blocking)."""
        if self._disk is not None:
            self._disk.close()

    def _read(self, key: str) -> tuple[Any, float | None]:
        """(value, expiry) of ``key`` on disk, (None, None) when absent (or no disk store
        could be opened); a row this cache never writes (a pickle: CVE-2025-69872) is
        logged, dropped and read as absent."""
        if self._disk is None:
            return None, None
        try:
            return self._store.get(key, expire_time=True)  # type: ignore[no-any-return]
        except UnsafeCacheRow as exc:
            self.unsafe_rows += 1
            log.warning("cache: dropped a planted row (%s); the op goes to the network", exc)
            self._store.delete(key)
            return None, None

    async def set(self, namespace: str, material: Any, value: Any, *, ttl_s: float) -> None:
        """Keep ``value`` for ``ttl_s``; on a full disk only in memory (the cache is an
        optimisation: the op that made ``value`` still answers)."""
        key = cache_key(namespace, material)
        generation = self._generation.get(namespace, 0)
        # Taken before the write, so the memory copy never outlives the row on disk.
        expires_at = time.time() + ttl_s
        await trio.to_thread.run_sync(self._write, key, value, expires_at, namespace)
        if generation == self._generation.get(namespace, 0):
            self._memory.put(key, value, expires_at=expires_at)

    async def keep(self, namespace: str, material: Any, value: Any, *, ttl_s: float) -> None:
        """``set``, unless the memory tier holds this very value with half of ``ttl_s`` or
        more still to live: for a value named by its content (a fileKey's snapshot), which
        every cache hit keeps again, so a hit writes nothing and what it hands out still
        lives ``ttl_s / 2`` at least. Issue 26: that write made a fetch hit cost 6.1-6.2 ms
        of CPU against 4.0-4.2 ms without it (``python bench/fetch_cpu.py``, load 10-11)."""
        if not self.holds(namespace, material, value, ttl_s=ttl_s):
            await self.set(namespace, material, value, ttl_s=ttl_s)

    async def invalidate(self, namespace: str) -> int:
        """Drop every entry of ``namespace`` (an API's reads after one of its writes)."""
        self._bump(namespace)  # reads already under way must not refill memory...
        self._memory.drop_namespace(namespace)
        try:
            return int(await trio.to_thread.run_sync(self._evict, namespace))
        finally:
            # ...nor those that started while the disk was emptied; and a read that began in
            # that window and finished before it ended may have refilled memory: drop again.
            self._bump(namespace)
            self._memory.drop_namespace(namespace)

    def _evict(self, namespace: str) -> int:
        return 0 if self._disk is None else int(self._disk.evict(namespace))

    def _write(self, key: str, value: Any, expires_at: float, namespace: str) -> None:
        try:
            self._store.set(key, value, expire=expires_at - time.time(), tag=namespace)
        except (OSError, sqlite3.Error, StorageFull) as exc:
            if not is_storage_full(exc):
                raise
            if not self.storage_full:
                log.warning("cache: disk full, answers are not cached until space returns")
            self.storage_full = True
        else:
            self.storage_full = False

    def _bump(self, namespace: str) -> None:
        self._generation[namespace] = self._generation.get(namespace, 0) + 1

    def volume_bytes(self) -> int:
        return 0 if self._disk is None else int(self._disk.volume())


@asynccontextmanager
async def open_cache(
    directory: str, *, size_limit_bytes: int, memory_bytes: int = 32 * 1024 * 1024
) -> AsyncIterator[Cache]:
    """Open the cache in ``directory`` (created 0700) with a ``memory_bytes`` LRU in front;
    closed on exit. On a full disk it opens on its memory tier alone (``Cache``)."""

    def make() -> diskcache.Cache:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        # JSON, never pickle, written and read: a cache file that someone managed to rewrite
        # must not be able to run code when the daemon reads it back (cache_disk.py).
        store = diskcache.Cache(directory, size_limit=size_limit_bytes, disk=SafeJSONDisk)
        store.create_tag_index()
        return store

    cache = Cache(make, memory_bytes=memory_bytes)
    try:
        await trio.to_thread.run_sync(lambda: cache._store)
    except StorageFull:
        log.warning("cache: disk full at start, answers are kept in memory only for now")
        cache.storage_full = True
    try:
        yield cache
    finally:
        await trio.to_thread.run_sync(cache.close)
