"""The disk tier under the memory tier while Redis is down (issue 21 §5): a working set larger
than the memory tier is served locally, bounded by ``redis.fallback_cache_bytes``, never past
its TTL, never once Redis is back, and a full disk is a miss, not a crash."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from csp_web.infra.cache import cache_key
from csp_web.infra.cache_local import ROW_OVERHEAD_BYTES, LocalTier
from csp_web.infra.redis_cache import RedisCache, open_response_cache
from csp_web.infra.redis_link import RedisLink
from tests.redis.conftest import OpenLink, past_down_window, wait_live
from tests.redis_server import RedisServer
from tests.storage.conftest import Tmpfs, tmpfs  # noqa: F401  (the fixture)

MEMORY = 8 * 1024  # the memory tier: a 1 KiB value is over its 1/8 cap, so never held there
VALUE = "x" * 1024


def text(value: object) -> str:
    """A value's JSON text, as written to Redis: its length counts against the local tier."""
    return json.dumps(value, separators=(",", ":"))


@asynccontextmanager
async def response_cache(link: RedisLink, directory: Path) -> AsyncIterator[RedisCache]:
    async with open_response_cache(
        str(directory), size_limit_bytes=1 << 20, memory_bytes=MEMORY, link=link, store="web"
    ) as cache:
        assert isinstance(cache, RedisCache)
        yield cache


async def stop(server: RedisServer, link: RedisLink) -> None:
    server.stop()
    await wait_live(link, False)


async def read_all(cache: RedisCache, count: int) -> list[object]:
    with trio.fail_after(10):
        return [await cache.get("fetch", f"u{n}") for n in range(count)]


async def test_with_redis_stopped_a_working_set_larger_than_the_memory_tier_is_read_back_locally(
    open_link: OpenLink, redis_server: RedisServer, tmp_path: Path
) -> None:
    async with open_link() as link, response_cache(link, tmp_path) as cache:
        await stop(redis_server, link)
        with trio.fail_after(10):
            for n in range(40):  # 40 KiB of values: five times the memory tier
                await cache.set("fetch", f"u{n}", f"{n}{VALUE}", ttl_s=60)
        assert await read_all(cache, 40) == [f"{n}{VALUE}" for n in range(40)]
        assert link.fallbacks["cache_local"] == 40
        assert link.fallbacks["cache_miss"] == 0


async def test_a_copy_read_from_redis_before_the_outage_outlives_its_memory_eviction(
    open_link: OpenLink, redis_server: RedisServer, tmp_path: Path
) -> None:
    """Pages the memory tier held when Redis stopped are copied to disk at their first hit,
    so the pages fetched later in the outage cannot push them out to the origin."""
    small = "s" * 500  # under the memory tier's 1/8 cap: held in memory
    async with open_link() as link, response_cache(link, tmp_path) as cache:
        with trio.fail_after(10):
            for n in range(4):
                await cache.set("fetch", f"u{n}", small, ttl_s=60)
        await stop(redis_server, link)
        assert await read_all(cache, 4) == [small] * 4  # memory hits, copied to disk
        with trio.fail_after(10):
            for n in range(40):  # 20 KB more than the memory tier: the four are evicted
                await cache.set("fetch", f"w{n}", small, ttl_s=60)
        assert await read_all(cache, 4) == [small] * 4
        assert link.fallbacks["cache_miss"] == 0


async def test_redis_up_never_touches_the_local_tier(open_link: OpenLink, tmp_path: Path) -> None:
    async with open_link() as link, response_cache(link, tmp_path) as cache:
        with trio.fail_after(10):
            await cache.set("fetch", "u", VALUE, ttl_s=60)
            assert await cache.get("fetch", "u") == VALUE
    assert not (tmp_path / "redis-down").exists()


async def test_once_redis_is_back_its_fresh_value_wins_over_the_local_copy(
    open_link: OpenLink, redis_server: RedisServer, tmp_path: Path
) -> None:
    async with open_link() as link, response_cache(link, tmp_path) as cache:
        await stop(redis_server, link)
        with trio.fail_after(10):
            await cache.set("fetch", "fresh", f"old{VALUE}", ttl_s=60)
            await cache.set("fetch", "gone", f"old{VALUE}", ttl_s=60)
            assert await cache.get("fetch", "fresh") == f"old{VALUE}"
        redis_server.start()  # empty: no persistence
        async with open_link() as peer:
            await RedisCache(peer, memory_bytes=MEMORY).set("fetch", "fresh", "new", ttl_s=60)
        await wait_live(link)
        await past_down_window(link)
        with trio.fail_after(10):
            assert await cache.get("fetch", "fresh") == "new"
            assert await cache.get("fetch", "gone") is None  # Redis has none: not the copy
        assert link.up


async def test_a_copy_made_in_an_earlier_outage_is_not_served_in_the_next(
    open_link: OpenLink, redis_server: RedisServer, tmp_path: Path
) -> None:
    async with open_link() as link, response_cache(link, tmp_path) as cache:
        await stop(redis_server, link)
        with trio.fail_after(10):
            await cache.set("fetch", "u", VALUE, ttl_s=60)
        redis_server.start()
        await wait_live(link)
        await past_down_window(link)
        with trio.fail_after(10):
            assert await cache.get("fetch", "other") is None  # Redis answers: back
        await stop(redis_server, link)
        with trio.fail_after(10):
            assert await cache.get("fetch", "u") is None
        assert link.fallbacks["cache_miss"] == 1


async def test_an_invalidation_while_redis_is_down_drops_the_namespaces_local_rows(
    open_link: OpenLink, redis_server: RedisServer, tmp_path: Path
) -> None:
    async with open_link() as link, response_cache(link, tmp_path) as cache:
        await stop(redis_server, link)
        with trio.fail_after(10):
            await cache.set("fetch", "u", VALUE, ttl_s=60)
            await cache.set("search", "q", VALUE, ttl_s=60)
            await cache.invalidate("fetch")
            assert await cache.get("fetch", "u") is None
            assert await cache.get("search", "q") == VALUE


async def test_a_zero_budget_keeps_no_local_tier(
    open_link: OpenLink, redis_server: RedisServer, tmp_path: Path
) -> None:
    async with (
        open_link(fallback_cache_bytes=0) as link,
        response_cache(link, tmp_path) as cache,
    ):
        await stop(redis_server, link)
        with trio.fail_after(10):
            await cache.set("fetch", "u", VALUE, ttl_s=60)
            assert await cache.get("fetch", "u") is None
    assert not (tmp_path / "redis-down").exists()


# --- the tier itself ------------------------------------------------------------------------


def fill(tier: LocalTier, values: list[str]) -> None:
    for n, value in enumerate(values):
        tier.set(f"fetch:{n}", value, text=text(value), ttl_s=60, namespace="fetch")


def kept(tier: LocalTier, count: int) -> list[bool]:
    return [tier.get(f"fetch:{n}") is not None for n in range(count)]


ROW = 1026 + ROW_OVERHEAD_BYTES  # a row holding 1,024 characters: its JSON text is 1,026


@pytest.mark.parametrize(("budget", "first_kept"), [(3 * ROW, True), (3 * ROW - 1, False)])
def test_the_local_tier_holds_at_most_its_budget_oldest_dropped_first(
    tmp_path: Path, budget: int, first_kept: bool
) -> None:
    """Three rows of ROW bytes each: a budget of exactly that keeps all three, one byte less
    drops the oldest."""
    tier = LocalTier(str(tmp_path), max_bytes=budget)
    fill(tier, ["a" * 1024, "b" * 1024, "c" * 1024])
    assert kept(tier, 3) == [first_kept, True, True]
    assert tier.bytes == (3 if first_kept else 2) * ROW
    tier.close()


@pytest.mark.parametrize(("budget", "stored"), [(ROW, True), (ROW - 1, False)])
def test_a_value_is_kept_only_when_it_fits_the_budget_alone(
    tmp_path: Path, budget: int, stored: bool
) -> None:
    tier = LocalTier(str(tmp_path), max_bytes=budget)
    fill(tier, ["a" * 1024])
    assert kept(tier, 1) == [stored]
    tier.close()


def test_a_row_never_outlives_its_ttl(tmp_path: Path) -> None:
    tier = LocalTier(str(tmp_path), max_bytes=1 << 20)
    before = time.time()
    tier.set("fetch:a", "v", text='"v"', ttl_s=60, namespace="fetch")
    tier.set("fetch:b", "v", text='"v"', ttl_s=1e-6, namespace="fetch")
    found = tier.get("fetch:a")
    assert found is not None
    assert found[1] <= time.time() + 60  # the memory tier's copy ends no later either
    assert found[1] >= before + 60
    assert tier.get("fetch:b") is None  # its microsecond has passed
    tier.close()


def test_the_same_text_held_again_keeps_its_earlier_expiry_and_a_new_text_replaces_it(
    tmp_path: Path,
) -> None:
    """A fetch holds its fileKey's snapshot again on every reply: the row is not rewritten
    (its expiry never moves later than the first write gave), unless the text changed or the
    row has expired."""
    tier = LocalTier(str(tmp_path), max_bytes=1 << 20)
    tier.set("file:a", "v", text='"v"', ttl_s=60, namespace="file")
    first = tier.get("file:a")
    tier.set("file:a", "v", text='"v"', ttl_s=3600, namespace="file")
    assert tier.get("file:a") == first
    tier.set("file:a", "w", text='"w"', ttl_s=3600, namespace="file")
    found = tier.get("file:a")
    assert found is not None
    assert found[0] == "w"
    assert (tier.holds("file:a", '"w"'), tier.holds("file:a", '"v"')) == (True, False)
    tier.set("file:b", "v", text='"v"', ttl_s=1e-6, namespace="file")
    tier.set("file:b", "v", text='"v"', ttl_s=60, namespace="file")  # the first has expired
    assert tier.get("file:b") is not None
    tier.retire()  # Redis came back: nothing held any more
    assert not tier.holds("file:a", '"w"')
    assert tier.bytes == 2 * (3 + ROW_OVERHEAD_BYTES)
    tier.close()


def test_rows_of_a_previous_process_are_never_served(tmp_path: Path) -> None:
    first = LocalTier(str(tmp_path), max_bytes=1 << 20)
    first.set("fetch:a", "v", text='"v"', ttl_s=60, namespace="fetch")
    first.close()
    second = LocalTier(str(tmp_path), max_bytes=1 << 20)
    assert second.get("fetch:a") is None
    second.close()


def test_a_planted_pickle_row_is_a_miss_and_is_dropped(tmp_path: Path) -> None:
    tier = LocalTier(str(tmp_path), max_bytes=1 << 20)
    tier.set("fetch:a", "v", text='"v"', ttl_s=60, namespace="fetch")
    with sqlite3.connect(tmp_path / "cache.db") as db:  # someone who can write the file
        db.execute("UPDATE Cache SET mode = 4")  # diskcache's MODE_PICKLE
    assert tier.get("fetch:a") is None
    assert tier.unsafe_rows == 1
    tier.close()


def test_the_local_folder_is_private(tmp_path: Path) -> None:
    tier = LocalTier(str(tmp_path / "redis-down"), max_bytes=1 << 20)
    tier.set(cache_key("fetch", "u"), "v", text='"v"', ttl_s=60, namespace="fetch")
    assert os.stat(tmp_path / "redis-down").st_mode & 0o777 == 0o700
    tier.close()


def test_a_full_disk_is_a_skipped_write_and_a_miss_until_space_returns(
    tmpfs: Tmpfs,  # noqa: F811  (the fixture imported above)
) -> None:
    tier = LocalTier(os.path.join(tmpfs.path, "redis-down"), max_bytes=64 << 20)
    tier.set("fetch:a", "v", text='"v"', ttl_s=60, namespace="fetch")  # opened while there is room
    tmpfs.fill()
    big = "z" * (1 << 20)
    tier.set("fetch:b", big, text=text(big), ttl_s=60, namespace="fetch")
    assert tier.storage_full
    assert tier.get("fetch:b") is None
    tmpfs.free()
    tier.set("fetch:b", big, text=text(big), ttl_s=60, namespace="fetch")
    assert not tier.storage_full
    found = tier.get("fetch:b")
    assert found is not None
    assert found[0] == big
    tier.close()


def test_a_disk_full_from_the_start_is_a_miss(
    tmpfs: Tmpfs,  # noqa: F811  (the fixture imported above)
) -> None:
    tmpfs.fill()
    tier = LocalTier(os.path.join(tmpfs.path, "redis-down"), max_bytes=64 << 20)
    tier.set("fetch:a", "v", text='"v"', ttl_s=60, namespace="fetch")
    assert tier.get("fetch:a") is None
    assert tier.storage_full
    tmpfs.free()
    tier.set("fetch:a", "v", text='"v"', ttl_s=60, namespace="fetch")
    assert tier.get("fetch:a") is not None
    tier.close()
