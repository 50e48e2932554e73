"""The shared response cache: one daemon's write is every daemon's hit, invalidations reach
every memory tier, values are JSON, and a Redis that is down or stopped is a miss."""

from __future__ import annotations

import json

import redis
import trio

from csp_web.infra.cache import cache_key
from csp_web.infra.redis_cache import RedisCache
from csp_web.infra.redis_link import RedisLink
from tests.redis.conftest import OpenLink, past_down_window, wait_live
from tests.redis_server import RedisServer

MEMORY = 1 << 20


def raw_client(server: RedisServer) -> redis.Redis:
    return redis.Redis(unix_socket_path=server.socket)


def event_seen(
    link: RedisLink, kind: str = "cache:web", *, sender: RedisLink | None = None
) -> trio.Event:
    """An event set when ``link`` next receives an event of ``kind`` (from any daemon, or
    from ``sender``'s only: a daemon's own earlier write may still be on its way)."""
    seen = trio.Event()

    def heard(message: dict[str, object]) -> None:
        if sender is None or message.get("from") == sender.daemon_id:
            seen.set()

    link.on_event(kind, heard)
    return seen


async def test_a_page_cached_by_one_daemon_is_a_one_round_trip_hit_on_another(
    open_link: OpenLink,
) -> None:
    async with open_link() as one, open_link() as two:
        writer, reader = RedisCache(one, memory_bytes=MEMORY), RedisCache(two, memory_bytes=MEMORY)
        await writer.set("fetch", "https://example.com/", {"title": "Example"}, ttl_s=86400)
        before = two.round_trips
        assert await reader.get("fetch", "https://example.com/") == {"title": "Example"}
        assert two.round_trips - before == 1
        # The second hit comes from the reader's memory tier: no round trip at all.
        assert await reader.get("fetch", "https://example.com/") == {"title": "Example"}
        assert two.round_trips - before == 1
        assert (reader.hits.total(), reader.misses.total()) == (2, 0)


async def test_values_are_json_with_the_ttl_and_namespace_tag_of_the_entry(
    open_link: OpenLink, redis_server: RedisServer
) -> None:
    async with open_link() as link:
        cache = RedisCache(link, memory_bytes=MEMORY)
        await cache.set("search", {"q": "trio"}, {"hits": [1, 2]}, ttl_s=3600)
        digest = cache_key("search", {"q": "trio"}).split(":")[1]
        client = raw_client(redis_server)
        value_key = f"csp-web:web:c:{{search}}:{digest}"
        assert json.loads(client.get(value_key) or b"") == {"hits": [1, 2]}
        assert 3_590_000 < client.pttl(value_key) <= 3_600_000
        assert client.zrange("csp-web:web:t:{search}", 0, -1) == [value_key.encode()]
        client.close()


async def test_an_invalidation_by_one_daemon_is_never_answered_from_anothers_memory(
    open_link: OpenLink,
) -> None:
    async with open_link() as one, open_link() as two:
        a, b = RedisCache(one, memory_bytes=MEMORY), RedisCache(two, memory_bytes=MEMORY)
        await a.set("api:github", "/repos/x", {"stars": 1}, ttl_s=300)
        await a.set("api:other", "/x", "kept", ttl_s=300)
        assert await b.get("api:github", "/repos/x") == {"stars": 1}  # now in b's memory
        assert await a.invalidate("api:github") == 1
        # No wait for the event: b's memory hit in an API namespace is checked against Redis.
        assert await b.get("api:github", "/repos/x") is None
        assert await b.get("api:other", "/x") == "kept"


async def test_a_write_begun_before_a_peers_invalidation_is_not_stored(
    open_link: OpenLink,
) -> None:
    async with open_link() as one, open_link() as two:
        a, b = RedisCache(one, memory_bytes=MEMORY), RedisCache(two, memory_bytes=MEMORY)
        assert await b.get("api:github", "/issues") is None  # b's read starts (a miss)
        await a.invalidate("api:github")  # a writes through the API meanwhile
        await b.set("api:github", "/issues", ["old"], ttl_s=300)  # b's answer is from before
        assert await a.get("api:github", "/issues") is None
        assert await b.get("api:github", "/issues") is None


async def test_a_peers_new_value_replaces_the_memory_copy_once_its_event_arrives(
    open_link: OpenLink,
) -> None:
    async with open_link() as one, open_link() as two:
        a, b = RedisCache(one, memory_bytes=MEMORY), RedisCache(two, memory_bytes=MEMORY)
        await a.set("fetch", "u", "v1", ttl_s=60)
        assert await b.get("fetch", "u") == "v1"
        seen = event_seen(two)
        await a.set("fetch", "u", "v2", ttl_s=60)
        with trio.fail_after(10):
            await seen.wait()
        assert await b.get("fetch", "u") == "v2"


async def test_a_stopped_redis_leaves_the_memory_tier_as_the_local_cache_until_it_returns(
    open_link: OpenLink, redis_server: RedisServer
) -> None:
    """Issue 21: with Redis stopped the memory tier stands in for it (a copy made before, and
    a write skipped in Redis, are both hits), as the embedded store's would; a checked
    namespace still misses; once Redis and its events are back the local copies are gone."""
    async with open_link() as link:
        cache = RedisCache(link, memory_bytes=MEMORY)
        await cache.set("fetch", "u", "v", ttl_s=60)
        await cache.set("api:x", "u", "v", ttl_s=60)
        redis_server.stop()
        await wait_live(link, False)
        with trio.fail_after(5):
            assert await cache.get("fetch", "u") == "v"  # its copy, once Redis did not answer
            await cache.set("fetch", "w", "x", ttl_s=60)
            assert await cache.get("fetch", "w") == "x"
            assert await cache.get("api:x", "u") is None  # checked: never answered alone
        assert not link.up
        # At least one: a read after the retry window asks Redis again and falls back anew.
        assert link.fallbacks["cache_local"] >= 1
        assert link.fallbacks["cache_skip"] == 1
        assert json.loads(link.stats_line())["state"] == "down"
        redis_server.start()  # empty: no persistence
        await wait_live(link)
        await past_down_window(link)
        assert await cache.get("fetch", "w") is None  # made alone: dropped, Redis asked
        await cache.set("fetch", "w", "y", ttl_s=60)
        assert await cache.get("fetch", "w") == "y"
        assert link.up
        assert json.loads(link.stats_line())["state"] == "up"


async def test_a_memory_copy_is_dropped_when_redis_answers_but_its_events_were_lost(
    open_link: OpenLink, redis_server: RedisServer
) -> None:
    """Events lost while Redis still answers: a peer's write may have gone unheard, so the
    memory tier is emptied and Redis's value is the answer."""
    async with open_link() as link:
        cache = RedisCache(link, memory_bytes=MEMORY)
        await cache.set("fetch", "u", "v", ttl_s=60)
        link._set_live(False)  # the subscription dropped; Redis itself is up
        with raw_client(redis_server) as raw:
            raw.flushall()
        assert await cache.get("fetch", "u") is None
        assert link.up


async def test_a_paused_redis_costs_a_read_at_most_its_call_deadline_then_nothing(
    open_link: OpenLink, redis_server: RedisServer
) -> None:
    async with open_link(call_timeout_s=0.2, retry_s=600.0) as link:
        cache = RedisCache(link, memory_bytes=MEMORY)
        redis_server.pause()
        try:
            with trio.fail_after(5):
                assert await cache.get("search", "q") is None
            assert "no reply within" in link.last_error
            calls = link.calls
            with trio.fail_after(5):  # inside the down window: at once, no thread, no call
                assert await cache.get("search", "q") is None
            assert link.calls == calls
        finally:
            redis_server.resume()
        assert link.fallbacks["cache_miss"] == 2
        assert not link.available()


async def test_an_invalidation_while_redis_is_down_is_applied_when_it_returns(
    open_link: OpenLink, redis_server: RedisServer
) -> None:
    async with open_link() as one:
        cache = RedisCache(one, memory_bytes=MEMORY)
        await cache.set("api:github", "/x", "old", ttl_s=300)
        redis_server.pause()
        try:
            with trio.fail_after(5):
                assert await cache.invalidate("api:github") == 0
                assert await cache.get("api:github", "/x") is None  # pending: a miss
        finally:
            redis_server.resume()
        async with open_link() as two:
            peer = RedisCache(two, memory_bytes=MEMORY)
            assert await cache.get("api:github", "/x") is None  # flushes the invalidation
            assert await peer.get("api:github", "/x") is None


async def test_keeping_a_value_held_in_memory_costs_no_round_trip_until_a_peer_drops_it(
    open_link: OpenLink,
) -> None:
    """A fileKey's snapshot is kept again at every cache hit: it is written once, and again
    only once another daemon's write has dropped this daemon's memory copy."""
    async with open_link() as one, open_link() as two:
        a, b = RedisCache(one, memory_bytes=MEMORY), RedisCache(two, memory_bytes=MEMORY)
        await a.keep("filekey", "fk_a", {"markdown": "# Tides"}, ttl_s=3600)
        before = one.round_trips
        await a.keep("filekey", "fk_a", {"markdown": "# Tides"}, ttl_s=3600)
        assert one.round_trips == before
        seen = event_seen(one, sender=two)
        await b.set("filekey", "fk_a", {"markdown": "# Other"}, ttl_s=3600)
        with trio.fail_after(10):
            await seen.wait()
        heard = event_seen(two, sender=one)
        await a.keep("filekey", "fk_a", {"markdown": "# Tides"}, ttl_s=3600)
        assert one.round_trips > before
        with trio.fail_after(10):
            await heard.wait()
        assert await b.get("filekey", "fk_a") == {"markdown": "# Tides"}


async def test_peek_answers_what_get_answers_from_memory_and_nothing_redis_must_decide(
    open_link: OpenLink, redis_server: RedisServer
) -> None:
    """The hot route's read: a memory copy while Redis and its events are live, never in a
    checked namespace, never once a peer's write or invalidation dropped it, never while
    Redis is down (then ``get`` decides, with its disk tier and its settling)."""
    async with open_link() as one, open_link() as two:
        a, b = RedisCache(one, memory_bytes=MEMORY), RedisCache(two, memory_bytes=MEMORY)
        written = event_seen(two, sender=one)
        await a.set("fetch", "u", "v1", ttl_s=60)
        await a.set("api:x", "u", "v", ttl_s=60)
        with trio.fail_after(10):  # else its event, late on a loaded host, drops b's copy
            await written.wait()
        assert b.peek("fetch", "u") is None  # not read yet
        assert await b.get("fetch", "u") == "v1"
        assert await b.get("api:x", "u") == "v"
        assert b.peek("fetch", "u") == "v1"
        assert b.peek("api:x", "u") is None  # checked against Redis at each hit
        seen = event_seen(two, sender=one)
        await a.invalidate("fetch")
        with trio.fail_after(10):
            await seen.wait()
        assert b.peek("fetch", "u") is None
        assert await b.get("fetch", "u") is None
        await b.set("fetch", "u", "v2", ttl_s=60)
        assert b.peek("fetch", "u") == "v2"
        redis_server.stop()
        await wait_live(two, False)
        assert b.peek("fetch", "u") is None


async def test_a_memo_goes_with_its_memory_copy_when_a_peer_writes_the_key(
    open_link: OpenLink,
) -> None:
    """What a hit derived from a memory copy (``peek_memo``) never outlives the copy: a
    peer's write of the key drops both, and the next copy starts with an empty memo."""
    async with open_link() as one, open_link() as two:
        a, b = RedisCache(one, memory_bytes=MEMORY), RedisCache(two, memory_bytes=MEMORY)
        written = event_seen(two, sender=one)
        await a.set("fetch", "u", "v1", ttl_s=60)
        with trio.fail_after(10):  # heard before the read: a late event would drop its copy
            await written.wait()
        assert await b.get("fetch", "u") == "v1"
        held = b.peek_memo("fetch", "u")
        assert held is not None
        held[1]["derived"] = "from v1"
        assert b.peek_memo("fetch", "u") == ("v1", {"derived": "from v1"})
        seen = event_seen(two, sender=one)
        await a.set("fetch", "u", "v2", ttl_s=60)
        with trio.fail_after(10):
            await seen.wait()
        assert b.peek_memo("fetch", "u") is None
        assert await b.get("fetch", "u") == "v2"
        assert b.peek_memo("fetch", "u") == ("v2", {})
