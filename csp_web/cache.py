"""The response cache the specialists share: diskcache on disk, keyed by SHA-256.

Keys are the SHA-256 of the op name and its normalised input (seed 000: "Cache key:
SHA256(query)"), so no request text, URL or credential is stored as a key. Callers must pass
values without secrets: auth headers and tokens are never part of what is cached (seed 001:
"Sensitive data stripped before caching"). Entries are tagged by namespace so an API's write
can invalidate its cached reads at once. diskcache is blocking (SQLite), so every call runs in
a worker thread.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import diskcache
import trio


def cache_key(namespace: str, material: Any) -> str:
    """``namespace:`` + SHA-256 of the canonical JSON of ``material``."""
    blob = json.dumps(material, sort_keys=True, separators=(",", ":"), default=str)
    return f"{namespace}:{hashlib.sha256(blob.encode('utf-8')).hexdigest()}"


class Cache:
    """Bounded, expiring entries; made by ``open_cache``, which owns the store."""

    def __init__(self, store: diskcache.Cache) -> None:
        self._store = store
        self.hits = 0
        self.misses = 0

    async def get(self, namespace: str, material: Any) -> Any | None:
        """The cached value, or None when absent or expired."""
        key = cache_key(namespace, material)
        value = await trio.to_thread.run_sync(self._store.get, key)
        if value is None:
            self.misses += 1
        else:
            self.hits += 1
        return value

    async def set(self, namespace: str, material: Any, value: Any, *, ttl_s: float) -> None:
        key = cache_key(namespace, material)
        await trio.to_thread.run_sync(
            lambda: self._store.set(key, value, expire=ttl_s, tag=namespace)
        )

    async def invalidate(self, namespace: str) -> int:
        """Drop every entry of ``namespace`` (an API's reads after one of its writes)."""
        return int(await trio.to_thread.run_sync(self._store.evict, namespace))

    def volume_bytes(self) -> int:
        return int(self._store.volume())


@asynccontextmanager
async def open_cache(directory: str, *, size_limit_bytes: int) -> AsyncIterator[Cache]:
    """Open the cache in ``directory`` (created 0700); closed on exit."""

    def make() -> diskcache.Cache:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        store = diskcache.Cache(directory, size_limit=size_limit_bytes)
        store.create_tag_index()
        return store

    store = await trio.to_thread.run_sync(make)
    try:
        yield Cache(store)
    finally:
        await trio.to_thread.run_sync(store.close)
