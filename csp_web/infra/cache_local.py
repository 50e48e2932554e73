"""The disk tier a Redis-mode cache falls back on while Redis is down (issue 21 §5).

With Redis down the memory tier alone kept the working set only while it fit: a daemon whose
pages outgrew ``web.cache.memory_bytes`` fetched each one from its origin again, and the fleet
ran at 0.14-0.53 of its Redis-up rate. ``LocalTier`` is the second local tier under the memory
tier: diskcache with ``SafeJSONDisk`` (JSON, never pickle: cache_disk.py) in a 0700 folder,
holding what this daemon fetched while Redis was down, for as long as Redis stays down.

What it promises:

- Only copies made during the current outage (a *spell*) are served. Each row carries its
  spell's random token; ``retire`` (Redis is back) starts a new spell at once, on the trio
  thread, so no row written before it is served again; those rows are deleted at the next
  write, and the store is emptied when it is first opened (a previous process's rows).
- A row expires at the TTL its writer gave (the cache's, as Redis would have kept it).
- At most ``max_bytes`` (``redis.fallback_cache_bytes``), counting each row as its value's
  JSON text plus ``ROW_OVERHEAD_BYTES``: a write past it drops the oldest rows first; a row
  larger than that is not kept. The overhead also bounds the row count, hence this module's
  index in memory, when an outage brings a flood of tiny values (a cached exec's summary).
- A full disk (SPEC O-6) is a skipped write, logged once per spell of full disk and shown by
  ``storage_full``; a store that could not be opened reads as empty.
- Keys are ``cache_key``'s (namespace + SHA-256) and values what the caller would send to
  Redis: callers never cache secrets (cache.py), so nothing here holds one either.

Blocking (SQLite and files): ``get``, ``set``, ``drop_namespace`` and ``close`` run in worker
threads, serialised by one lock; ``retire`` is the only method for the trio thread.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import threading
import time
from collections import OrderedDict
from typing import Any

import diskcache

from csp_web.core.api.errors import StorageFull
from csp_web.core.api.storage import storage_seam
from csp_web.infra.cache_disk import SafeJSONDisk, UnsafeCacheRow

log = logging.getLogger(__name__)

# diskcache's own bound is a backstop only (it counts SQLite pages too): the byte budget is
# kept exactly by this module's index of the spell's rows.
_BACKSTOP_SLACK_BYTES = 16 * 1024 * 1024
# What a row costs besides its value: its key (namespace + 64 hex digits) and SQLite row, and
# its entry in this module's index (about 250 bytes), rounded up: 256 MiB holds at most 262,144.
ROW_OVERHEAD_BYTES = 1024


def digest_of(text: str) -> bytes:
    """What tells two values' JSON texts apart in the index."""
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


class LocalTier:
    """Rows kept on disk while Redis is down, bounded by ``max_bytes``; see the module."""

    def __init__(self, directory: str, *, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._store: diskcache.Cache | None = None
        self._spell = secrets.token_hex(8)
        self._indexed_spell = ""  # the spell _rows describes; another one: empty the store
        # The spell's rows, oldest first: (bytes, digest of the JSON text, expiry).
        self._rows: OrderedDict[str, tuple[int, bytes, float]] = OrderedDict()
        self.bytes = 0
        self.storage_full = False
        self.unsafe_rows = 0

    def retire(self) -> None:
        """End the spell: no row written so far is served again. Cheap (no I/O): the trio
        thread calls it when Redis is back."""
        self._spell = secrets.token_hex(8)

    def get(self, key: str) -> tuple[Any, float] | None:
        """(value, expiry as ``time.time()``) of this spell's row for ``key``, else None."""
        spell = self._spell
        with self._lock:
            try:
                with storage_seam("cache"):
                    row, expires_at = self._read(key)
            except StorageFull:
                self._full()
                return None
        if not (isinstance(row, list) and len(row) == 2 and row[0] == spell):
            return None
        return row[1], expires_at or time.time()

    def set(self, key: str, value: Any, *, text: str, ttl_s: float, namespace: str) -> None:
        """Keep ``value`` (whose JSON text is ``text``) for ``ttl_s`` in this spell; skipped
        when larger than ``max_bytes`` or when the disk is full, and when this spell's row
        for ``key`` already holds the same text (a fetch re-holds its fileKey's snapshot each
        time: the row then keeps its earlier expiry, never a later one)."""
        spell = self._spell
        entry = (len(text) + ROW_OVERHEAD_BYTES, digest_of(text), time.time() + ttl_s)
        with self._lock:
            try:
                with storage_seam("cache"):
                    self._write(key, [spell, value], entry, ttl_s, namespace)
            except StorageFull:
                self._full()
            else:
                self.storage_full = False

    def _read(self, key: str) -> tuple[Any, float | None]:
        store = self._opened()
        try:
            return store.get(key, expire_time=True)  # type: ignore[no-any-return]
        except UnsafeCacheRow as exc:
            self.unsafe_rows += 1
            log.warning("redis-down cache: dropped a planted row (%s)", exc)
            store.delete(key)
            return None, None

    def holds(self, key: str, text: str) -> bool:
        """Whether this spell's row for ``key`` holds ``text`` and has not expired: ``set``
        would skip it. Cheap (no I/O): the trio thread asks before a write."""
        entry = self._rows.get(key)
        return (
            entry is not None
            and self._indexed_spell == self._spell
            and entry[1] == digest_of(text)
            and entry[2] > time.time()
        )

    def _write(
        self,
        key: str,
        row: list[Any],
        entry: tuple[int, bytes, float],
        ttl_s: float,
        namespace: str,
    ) -> None:
        store = self._opened()
        if self._indexed_spell != row[0]:
            self._empty(store, row[0])  # a past spell's rows: never served, now deleted
        elif (held := self._rows.get(key)) and held[1] == entry[1] and held[2] > time.time():
            return  # the same text, still held (not expired): its earlier expiry stands
        self._forget(store, key)
        if entry[0] > self.max_bytes:
            return
        store.set(key, row, expire=ttl_s, tag=namespace)
        self._rows[key] = entry
        self.bytes += entry[0]
        while self.bytes > self.max_bytes:
            self._forget(store, next(iter(self._rows)))

    def drop_namespace(self, namespace: str) -> None:
        """Delete every row of ``namespace`` (an invalidation made while Redis is down)."""
        with self._lock:
            for key in [k for k in self._rows if k.startswith(namespace + ":")]:
                self.bytes -= self._rows.pop(key)[0]
            if self._store is None:
                return
            try:
                with storage_seam("cache"):
                    self._store.evict(namespace)
            except StorageFull:  # rows left behind are the retired spell's at the next write
                self._full()
                self.retire()

    def holds_rows(self) -> bool:
        return bool(self._rows)

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None

    def _opened(self) -> diskcache.Cache:
        """The store, opened (and emptied of a previous process's rows) now if it was not.
        Call under the lock, inside ``storage_seam``: a full disk stops the opening."""
        if self._store is None:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            limit = 2 * self.max_bytes + _BACKSTOP_SLACK_BYTES
            store = diskcache.Cache(self.directory, size_limit=limit, disk=SafeJSONDisk)
            store.create_tag_index()
            self._empty(store, self._spell)
            self._store = store
        return self._store

    def _empty(self, store: diskcache.Cache, spell: str) -> None:
        store.clear()
        self._rows.clear()
        self.bytes = 0
        self._indexed_spell = spell

    def _forget(self, store: diskcache.Cache, key: str) -> None:
        entry = self._rows.pop(key, None)
        if entry is not None:
            self.bytes -= entry[0]
            store.delete(key)

    def _full(self) -> None:
        if not self.storage_full:
            log.warning("redis-down cache: disk full, answers are kept in memory only")
        self.storage_full = True
