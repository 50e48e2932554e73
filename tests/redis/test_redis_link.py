"""The link itself: with every worker thread stuck on a stopped server, a call still ends at
its deadline (it waits for a thread within it), and the threads come back by themselves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
import trio.testing

from csp_web.config.redis import RedisConfig
from csp_web.infra.redis_link import RedisLink, RedisUnavailable, open_redis_link
from tests.redis.conftest import OpenLink, past_down_window
from tests.redis_server import RedisServer


async def test_calls_beyond_max_threads_end_at_their_deadline_on_a_stopped_server(
    open_link: OpenLink, redis_server: RedisServer
) -> None:
    async with open_link(max_threads=1, call_timeout_s=0.2, retry_s=1e-3) as link:
        await link.call(lambda r: r.ping(), "ping")
        redis_server.pause()
        errors: list[str] = []

        async def ping() -> None:
            with pytest.raises(RedisUnavailable) as caught:
                await link.call(lambda r: r.ping(), "ping")
            errors.append(str(caught.value))

        try:
            with trio.fail_after(5):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(ping)  # takes the one thread, stuck until its timeout
                    nursery.start_soon(ping)  # N+1: waits for a thread, within its deadline
        finally:
            redis_server.resume()
        assert len(errors) == 2
        assert all("no reply within 0.200 s" in error for error in errors)
        assert link.in_flight == 0
        with trio.fail_after(5):  # the abandoned thread ended at its socket timeout
            while link.seconds_to_retry() > 0:
                await trio.sleep(link.seconds_to_retry())
            assert await link.call(lambda r: r.ping(), "ping")
        assert link.up


@pytest.mark.parametrize(
    "forged",
    [
        b'{"kind": ["flight"]}',  # unhashable kind
        b'{"kind": {"a": 1}}',
        b"[" * 100_000 + b"]" * 100_000,  # past json's recursion limit
        b'{"kind": "ping", "n": 1' + b"0" * 5000 + b"}",  # past the int digit limit
        b"\xff\xfe not utf-8",
        b'"just a string"',
    ],
)
async def test_a_malformed_event_on_the_channel_is_ignored_and_the_next_one_delivered(
    open_link: OpenLink, forged: bytes
) -> None:
    # Before: an unhashable kind (TypeError) or deep nesting (RecursionError) escaped
    # _deliver and ended serve_events, and with it the daemon's background tasks.
    async with open_link() as link:
        seen: list[dict[str, object]] = []
        arrived = trio.Event()

        def handler(message: dict[str, object]) -> None:
            seen.append(message)
            arrived.set()

        link.on_event("ping", handler)
        await link.call(lambda r: r.publish(link.channel, forged), "publish")
        await link.call(lambda r: r.publish(link.channel, link.event("ping")), "publish")
        with trio.fail_after(10):
            await arrived.wait()
        assert seen == [{"from": link.daemon_id, "kind": "ping"}]
        assert link.events_live


async def test_after_the_down_window_one_call_tries_redis_and_the_others_fall_back_at_once(
    open_link: OpenLink, redis_server: RedisServer
) -> None:
    """Issue 21: when the down window ends, one call (the probe) tries the server; calls made
    while it waits fall back at once, with no thread and no deadline of their own."""
    async with open_link(call_timeout_s=0.5, retry_s=1e-3) as link:
        redis_server.pause()
        try:
            with trio.fail_after(5), pytest.raises(RedisUnavailable):
                await link.call(lambda r: r.ping(), "ping")  # the link goes down
            await past_down_window(link)
            calls = link.calls
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_fails, link)  # the probe, stuck until its deadline
                await trio.testing.wait_all_tasks_blocked()
                with trio.fail_after(5), pytest.raises(RedisUnavailable, match="down"):
                    await link.call(lambda r: r.ping(), "ping")
                assert link.calls == calls + 1  # only the probe was tried
        finally:
            redis_server.resume()


async def _fails(link: RedisLink) -> None:
    with trio.fail_after(5), pytest.raises(RedisUnavailable):
        await link.call(lambda r: r.ping(), "ping")


@pytest.mark.parametrize(("policy", "warned"), [("noeviction", False), ("allkeys-lru", True)])
async def test_a_redis_that_may_evict_keys_is_warned_of_at_start_and_shown_in_stats(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, policy: str, warned: bool
) -> None:
    """Run claims, quotas and buckets must never be evicted (docs/scaling.md): a server whose
    maxmemory-policy is not noeviction is logged once as a warning and named in the REDIS
    stats line; noeviction says nothing."""
    server = RedisServer(str(tmp_path), extra=("--maxmemory-policy", policy))
    server.start()
    try:
        config = RedisConfig(url=server.url, call_timeout_s=0.5, retry_s=1e-3)
        async with open_redis_link(config) as link, trio.open_nursery() as nursery:
            assert link is not None
            nursery.start_soon(link.serve_events)
            with trio.fail_after(10):
                while link.eviction_policy is None:
                    await trio.sleep(0.01)
            line = json.loads(link.stats_line())
            nursery.cancel_scope.cancel()
    finally:
        server.stop()
    assert link.eviction_policy == policy
    assert ("eviction" in line) is warned
    warnings = [r for r in caplog.records if "maxmemory-policy" in r.getMessage()]
    assert bool(warnings) is warned
