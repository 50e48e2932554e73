"""``keep``: a value named by its content is written once, not at every cache hit (issue 26),
and the memory tier never answers for longer than the disk would."""

from __future__ import annotations

import os
import sqlite3
import time
from contextlib import closing
from pathlib import Path

import trio

from csp_web.infra.cache import Cache, cache_key, open_cache

SNAPSHOT = {"url": "https://example.com/", "markdown": "# Tides\n\nTwo a day.", "v": 5}


class Commits:
    """Counts the commits the cache makes to its SQLite file: SQLite's ``data_version``, read
    on a connection of this own, moves with every commit another connection makes."""

    def __init__(self, directory: Path) -> None:
        self._db = sqlite3.connect(os.path.join(directory, "cache.db"))

    def seen(self) -> int:
        return int(self._db.execute("PRAGMA data_version").fetchone()[0])

    def close(self) -> None:
        self._db.close()


async def test_keeping_a_value_the_memory_tier_holds_writes_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "c"
    async with open_cache(str(directory), size_limit_bytes=1 << 20) as cache:
        await cache.keep("filekey", "fk_a", SNAPSHOT, ttl_s=3600)
        with closing(Commits(directory)) as commits:
            before = commits.seen()
            for _ in range(3):
                await cache.keep("filekey", "fk_a", dict(SNAPSHOT), ttl_s=3600)  # equal copies
            assert commits.seen() == before
        assert await cache.get("filekey", "fk_a") == SNAPSHOT


async def test_keeping_a_changed_value_or_one_with_under_half_its_ttl_left_writes_it(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "c"
    async with open_cache(str(directory), size_limit_bytes=1 << 20) as cache:
        await cache.set("filekey", "fk_a", SNAPSHOT, ttl_s=1000)
        with closing(Commits(directory)) as commits:
            before = commits.seen()
            await cache.keep("filekey", "fk_a", SNAPSHOT, ttl_s=3000)  # 1000 s left < 1500 s
            assert commits.seen() > before
            expires = await _disk_expiry(cache, "filekey", "fk_a")
            assert expires is not None
            assert expires - time.time() > 2900
            changed = {**SNAPSHOT, "markdown": "# Tides\n\nThree a day."}
            before = commits.seen()
            await cache.keep("filekey", "fk_a", changed, ttl_s=3000)
            assert commits.seen() > before
        assert await cache.get("filekey", "fk_a") == changed


async def test_a_value_kept_after_its_namespace_was_invalidated_is_written_again(
    tmp_path: Path,
) -> None:
    async with open_cache(str(tmp_path / "c"), size_limit_bytes=1 << 20) as cache:
        await cache.keep("filekey", "fk_a", SNAPSHOT, ttl_s=3600)
        await cache.invalidate("filekey")
        await cache.keep("filekey", "fk_a", SNAPSHOT, ttl_s=3600)
        cache._memory.drop_namespace("filekey")  # as after a restart: only the disk has it
        assert await cache.get("filekey", "fk_a") == SNAPSHOT


async def test_the_memory_copy_never_outlives_the_row_on_disk(tmp_path: Path) -> None:
    async with open_cache(str(tmp_path / "c"), size_limit_bytes=1 << 20) as cache:
        await cache.set("fetch", "u", SNAPSHOT, ttl_s=60)
        in_memory = cache._memory.expires_at(cache_key("fetch", "u"))
        on_disk = await _disk_expiry(cache, "fetch", "u")
        assert in_memory is not None
        assert on_disk is not None
        assert in_memory <= on_disk


async def test_an_entry_read_from_disk_answers_from_memory_afterwards(tmp_path: Path) -> None:
    async with open_cache(str(tmp_path / "c"), size_limit_bytes=1 << 20) as cache:
        await cache.set("fetch", "u", SNAPSHOT, ttl_s=60)
        cache._memory.drop_namespace("fetch")  # as after a restart
        assert await cache.get("fetch", "u") == SNAPSHOT  # from disk, then kept in memory
        await trio.to_thread.run_sync(cache._store.clear)
        assert await cache.get("fetch", "u") == SNAPSHOT
        await cache.invalidate("fetch")
        assert await cache.get("fetch", "u") is None


async def _disk_expiry(cache: Cache, namespace: str, material: str) -> float | None:
    key = cache_key(namespace, material)
    _, expires = await trio.to_thread.run_sync(lambda: cache._store.get(key, expire_time=True))
    return expires if isinstance(expires, float) else None


async def test_peek_answers_only_an_unexpired_memory_entry_and_counts_no_hit(
    tmp_path: Path,
) -> None:
    """The hot route's read (``peek``): what the memory tier holds, never past its expiry
    nor across an invalidation, without waiting; a hit is counted once it answers."""
    async with open_cache(str(tmp_path / "c"), size_limit_bytes=1 << 20) as cache:
        await cache.set("fetch", "a", SNAPSHOT, ttl_s=3600)
        await cache.set("fetch", "gone", SNAPSHOT, ttl_s=-1)  # expired as it was written
        assert cache.peek("fetch", "a") == SNAPSHOT
        assert cache.peek("fetch", "gone") is None
        assert cache.peek("fetch", "never") is None
        assert cache.hits["fetch"] == 0
        cache.count_hit("fetch")
        assert cache.hits["fetch"] == 1
        await cache.invalidate("fetch")
        assert cache.peek("fetch", "a") is None


async def test_holds_says_whether_keep_would_write(tmp_path: Path) -> None:
    async with open_cache(str(tmp_path / "c"), size_limit_bytes=1 << 20) as cache:
        await cache.set("filekey", "fk_a", SNAPSHOT, ttl_s=1000)
        assert cache.holds("filekey", "fk_a", dict(SNAPSHOT), ttl_s=1900)  # over half left
        assert not cache.holds("filekey", "fk_a", SNAPSHOT, ttl_s=3000)  # under half left
        assert not cache.holds("filekey", "fk_a", {**SNAPSHOT, "v": 6}, ttl_s=1900)
        assert not cache.holds("filekey", "fk_b", SNAPSHOT, ttl_s=1900)
