"""The shared response cache: hashed keys, expiry, namespaces, size bound."""

from __future__ import annotations

import functools
import os
import pickle
import re
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from csp_web.infra.cache import MEMO_BYTES, MemoryTier, approximate_size, cache_key, open_cache
from csp_web.infra.cache_disk import UnsafeCacheRow


def test_key_is_a_hash_that_never_holds_the_input() -> None:
    key = cache_key("fetch", {"url": "https://example.com/?token=s3cret"})
    assert key.startswith("fetch:")
    assert "s3cret" not in key
    assert len(key.split(":")[1]) == 64
    assert key == cache_key("fetch", {"url": "https://example.com/?token=s3cret"})
    assert key != cache_key("search", {"url": "https://example.com/?token=s3cret"})


async def test_value_round_trips_until_its_ttl(tmp_path: Path) -> None:
    async with open_cache(str(tmp_path / "c"), size_limit_bytes=1 << 20) as cache:
        await cache.set("search", "q", {"results": [1, 2]}, ttl_s=3600)
        assert await cache.get("search", "q") == {"results": [1, 2]}
        _, expires = cache._store.get(cache_key("search", "q"), expire_time=True)
        assert 3590 < expires - time.time() <= 3600
        await cache.set("search", "gone", "v", ttl_s=1e-9)  # expired on arrival
        assert await cache.get("search", "gone") is None
        assert (cache.hits, cache.misses) == ({"search": 1}, {"search": 1})


async def test_invalidating_a_namespace_drops_only_its_entries(tmp_path: Path) -> None:
    async with open_cache(str(tmp_path / "c"), size_limit_bytes=1 << 20) as cache:
        await cache.set("api:github", "a", "1", ttl_s=60)
        await cache.set("api:github", "b", "2", ttl_s=60)
        await cache.set("api:other", "a", "3", ttl_s=60)
        assert await cache.invalidate("api:github") == 2
        assert await cache.get("api:github", "a") is None
        assert await cache.get("api:other", "a") == "3"


async def test_cache_directory_is_private_and_size_bounded(tmp_path: Path) -> None:
    directory = str(tmp_path / "c")
    async with open_cache(directory, size_limit_bytes=200_000) as cache:
        for n in range(100):
            await cache.set("fetch", n, "x" * 10_000, ttl_s=60)
        await trio.to_thread.run_sync(cache._store.cull)
        assert cache.volume_bytes() < 400_000
        keys = list(cache._store)
    assert os.stat(directory).st_mode & 0o077 == 0
    assert keys
    assert all(str(k).startswith("fetch:") for k in keys)


async def test_entries_are_stored_as_json_never_pickle(tmp_path: Path) -> None:
    """A rewritten cache file must not run code when read back (diskcache's pickle mode 4)."""
    directory = str(tmp_path / "c")
    async with open_cache(directory, size_limit_bytes=1 << 20) as cache:
        await cache.set("exec", "k", {"data": "exit:0", "fields": [["A", "b"]]}, ttl_s=60)
    with sqlite3.connect(os.path.join(directory, "cache.db")) as db:
        modes = {row[0] for row in db.execute("SELECT mode FROM Cache")}
    assert 4 not in modes  # diskcache's MODE_PICKLE


def test_memory_tier_evicts_least_recent_by_bytes() -> None:
    tier = MemoryTier(max_bytes=8000)
    for n in range(3):
        tier.put(f"fetch:{n}", "x" * 900, expires_at=time.time() + 60)
    assert tier.get("fetch:0") is not None  # now the most recent
    for n in range(3, 12):
        tier.put(f"fetch:{n}", "x" * 900, expires_at=time.time() + 60)
    assert tier.bytes <= 8000
    assert tier.get("fetch:1") is None
    assert tier.get("fetch:11") is not None


def test_memory_tier_skips_an_entry_over_an_eighth_and_honours_expiry() -> None:
    tier = MemoryTier(max_bytes=8000)
    tier.put("fetch:big", "x" * 2000, expires_at=time.time() + 60)
    assert tier.get("fetch:big") is None
    tier.put("fetch:old", "v", expires_at=time.time() - 1)
    assert tier.get("fetch:old") is None
    assert tier.bytes == 0


async def test_a_hit_from_memory_needs_no_disk(tmp_path: Path) -> None:
    async with open_cache(str(tmp_path / "c"), size_limit_bytes=1 << 20) as cache:
        await cache.set("fetch", "u", {"page": 1}, ttl_s=60)
        await trio.to_thread.run_sync(cache._store.clear)  # the disk copy is gone
        assert await cache.get("fetch", "u") == {"page": 1}
        await cache.invalidate("fetch")
        assert await cache.get("fetch", "u") is None


def test_size_estimate_is_iterative_for_deeply_nested_values() -> None:
    nested: list[object] = []
    for _ in range(100_000):
        nested = [nested]
    assert approximate_size(nested) > 100_000 * 56
    assert approximate_size({"a": "x" * 1000}) > 1000


async def test_a_read_racing_an_invalidation_does_not_bring_the_old_value_back(
    tmp_path: Path,
) -> None:
    async with open_cache(str(tmp_path / "c"), size_limit_bytes=1 << 20) as cache:
        await cache.set("api:x", "k", {"v": "old"}, ttl_s=60)
        cache._memory.drop_namespace("api:x")  # as after a restart: only the disk has it
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cache.get, "api:x", "k")  # its disk read runs in a thread...
            await cache.invalidate("api:x")  # ...while the API's write empties the namespace
        assert await cache.get("api:x", "k") is None


class _Payload:
    """What a planted pickle would run on load: it creates the file at ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (self.path, "w"))


async def test_a_planted_pickle_key_is_never_unpickled(tmp_path: Path) -> None:
    """CVE-2025-69872, keys: a row whose key is stored as a pickle (``raw = 0``) is refused
    by anything that reads keys back, and its payload never runs."""
    directory, ran = str(tmp_path / "c"), tmp_path / "payload-ran"
    async with open_cache(directory, size_limit_bytes=1 << 20) as cache:
        await cache.set("fetch", "u", "page", ttl_s=60)
        with sqlite3.connect(os.path.join(directory, "cache.db")) as db:
            db.execute("UPDATE Cache SET raw = 0, key = ?", (pickle.dumps(_Payload(str(ran))),))
        with pytest.raises(UnsafeCacheRow):
            list(cache._store)
    assert not ran.exists()


async def test_a_row_naming_a_file_outside_the_cache_is_neither_read_nor_removed(
    tmp_path: Path,
) -> None:
    """A planted row whose file is elsewhere (``/…`` or ``..``) would put that file's bytes in
    a reply, and its eviction would delete it: it is a miss, dropped, and the file stays."""
    directory, secret = str(tmp_path / "c"), tmp_path / "secret"
    secret.write_text('"the secret"')
    async with open_cache(directory, size_limit_bytes=1 << 20) as cache:
        await cache.set("fetch", "u", "page", ttl_s=60)
        cache._memory.drop_namespace("fetch")
        with sqlite3.connect(os.path.join(directory, "cache.db")) as db:
            db.execute("UPDATE Cache SET mode = 3, filename = ?, value = NULL", (str(secret),))
        assert await cache.get("fetch", "u") is None
        assert cache.unsafe_rows == 1
        assert list(cache._store) == []
    assert secret.read_text() == '"the secret"'


def test_every_diskcache_store_in_the_repository_reads_with_the_safe_disk() -> None:
    """CVE-2025-69872: a diskcache store built with any other Disk unpickles planted rows;
    every construction (Cache, FanoutCache, Index, Deque) passes ``disk=SafeJSONDisk``."""
    root = Path(__file__).resolve().parent.parent
    built = re.compile(r"\bdiskcache\.(Cache|FanoutCache|Index|Deque)\(")
    found = []
    for folder in ("csp_web", "specialists", "bench", "scripts"):
        for path in sorted((root / folder).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            if "diskcache" not in text:
                continue
            assert "from diskcache import" not in text, path  # constructions stay findable
            for match in built.finditer(text):
                call = text[match.start() : text.find("\n", match.start())]
                found.append((path.name, call.strip()))
    assert found == [
        (
            "cache.py",
            "diskcache.Cache(directory, size_limit=size_limit_bytes, disk=SafeJSONDisk)",
        ),
        (
            "cache_local.py",
            "diskcache.Cache(self.directory, size_limit=limit, disk=SafeJSONDisk)",
        ),
    ]


def test_an_entry_memo_lives_while_its_entry_does_and_is_born_empty_with_a_new_one() -> None:
    """The memo (what callers derive from a value) goes with its entry: replaced, dropped,
    its namespace dropped or expired, the next entry starts with an empty one."""
    tier = MemoryTier(max_bytes=8000)
    later = time.time() + 60
    tier.put("fetch:a", "v1", expires_at=later)
    held = tier.held("fetch:a")
    assert held is not None
    held[1]["derived"] = "from v1"
    assert tier.held("fetch:a") == ("v1", {"derived": "from v1"})
    tier.put("fetch:a", "v2", expires_at=later)  # a new value under the same key
    assert tier.held("fetch:a") == ("v2", {})
    drops: list[Callable[[], None]] = [
        functools.partial(tier.drop, "fetch:a"),
        functools.partial(tier.drop_namespace, "fetch"),
    ]
    for drop in drops:
        tier.put("fetch:a", "v3", expires_at=later)
        held = tier.held("fetch:a")
        assert held is not None
        held[1]["derived"] = "from v3"
        drop()
        assert tier.held("fetch:a") is None
        tier.put("fetch:a", "v3", expires_at=later)
        assert tier.held("fetch:a") == ("v3", {})
    tier.put("fetch:old", "v", expires_at=time.time() - 1)
    assert tier.held("fetch:old") is None


def test_an_entry_memo_is_evicted_with_its_entry_at_the_byte_bound() -> None:
    """The memo is bounded by the tier's own bound: N entries that fit keep theirs, the
    N+1th evicts the least recent entry and its memo with it."""
    size = approximate_size("x" * 900)
    fits = 8000 // (size + MEMO_BYTES)  # each memo counted from its entry's first ``held``
    tier = MemoryTier(max_bytes=8000)
    for n in range(fits):
        tier.put(f"fetch:{n}", "x" * 900, expires_at=time.time() + 60)
        held = tier.held(f"fetch:{n}")
        assert held is not None
        held[1]["n"] = n
    assert all(tier.held(f"fetch:{n}") == ("x" * 900, {"n": n}) for n in range(fits))
    tier.put(f"fetch:{fits}", "x" * 900, expires_at=time.time() + 60)
    assert tier.held(f"fetch:{fits}") == ("x" * 900, {})
    assert tier.get("fetch:0") is None
    assert tier.held("fetch:1") == ("x" * 900, {"n": 1})


def test_what_a_memo_keeps_counts_toward_the_tiers_bound_at_n_and_n_plus_1() -> None:
    """A memo counts from its entry's first ``held``, and ``Memo.keep`` counts what it keeps:
    a memo that brings the tier to its bound exactly evicts nothing, one byte more evicts the
    least recent entry, never the entry whose memo grew (it was just used). An entry only
    read (``get``) carries no memo."""
    size = approximate_size("x" * 900)
    tier = MemoryTier(max_bytes=8 * size + MEMO_BYTES + 100)  # eight, each at most an eighth
    for n in range(8):
        tier.put(f"fetch:{n}", "x" * 900, expires_at=time.time() + 60)
    assert tier.get("fetch:3") is not None
    assert tier.bytes == 8 * size
    held = tier.held("fetch:7")
    assert held is not None
    assert tier.bytes == 8 * size + MEMO_BYTES
    held[1].keep("derived", "d", 100)
    assert tier.bytes == tier.max_bytes
    assert tier.get("fetch:0") is not None  # N: nothing evicted; fetch:0 now recent
    held[1].keep("more", "m", 1)
    assert tier.bytes == 7 * size + MEMO_BYTES + 101
    assert tier.get("fetch:1") is None  # N+1: the least recent goes
    assert tier.held("fetch:7") == ("x" * 900, {"derived": "d", "more": "m"})


def test_a_replaced_entrys_old_memo_counts_nothing_against_the_new_entry() -> None:
    tier = MemoryTier(max_bytes=1 << 20)
    tier.put("fetch:u", "old", expires_at=time.time() + 60)
    held = tier.held("fetch:u")
    assert held is not None
    tier.put("fetch:u", "new", expires_at=time.time() + 60)
    before = tier.bytes
    held[1].keep("derived", "from old", 5000)  # a hit still holding the old entry's memo
    assert tier.bytes == before
    assert tier.held("fetch:u") == ("new", {})
    tier.drop("fetch:u")
    assert tier.bytes == 0


async def test_peek_memo_answers_what_peek_does_and_a_set_or_invalidation_empties_it(
    tmp_path: Path,
) -> None:
    async with open_cache(str(tmp_path / "c"), size_limit_bytes=1 << 20) as cache:
        assert cache.peek_memo("fetch", "u") is None
        await cache.set("fetch", "u", {"page": 1}, ttl_s=60)
        held = cache.peek_memo("fetch", "u")
        assert held is not None
        assert held[0] == cache.peek("fetch", "u") == {"page": 1}
        held[1]["derived"] = 1
        assert cache.peek_memo("fetch", "u") == ({"page": 1}, {"derived": 1})
        await cache.set("fetch", "u", {"page": 2}, ttl_s=60)
        assert cache.peek_memo("fetch", "u") == ({"page": 2}, {})
        await cache.invalidate("fetch")
        assert cache.peek_memo("fetch", "u") is None


def test_a_text_key_is_the_key_of_its_json() -> None:
    """Remembered text keys are the keys ``cache_key`` makes of any material's JSON."""
    import hashlib
    import json

    for text in ("https://example.com/a", "fk_abcdefghijklmnop:text", 'quote " é \ud800'):
        digest = hashlib.sha256(json.dumps(text).encode()).hexdigest()
        assert cache_key("fetch", text) == cache_key("fetch", text) == f"fetch:{digest}"
    assert cache_key("fetch", "1") != cache_key("fetch", 1)


def test_remembered_text_keys_are_bounded_at_1024() -> None:
    """The text keys a hit asks for are remembered, 1,024 at most: the 1,025th evicts one."""
    from csp_web.infra.cache import _text_key

    _text_key.cache_clear()
    for n in range(1024):
        cache_key("bound", f"https://example.com/{n}")
    assert _text_key.cache_info().currsize == 1024
    cache_key("bound", "https://example.com/1024")
    assert _text_key.cache_info().currsize == 1024
    misses = _text_key.cache_info().misses
    cache_key("bound", "https://example.com/0")  # the least recent: evicted by the 1,025th
    assert _text_key.cache_info().misses == misses + 1
