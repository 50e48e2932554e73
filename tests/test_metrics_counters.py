"""The labelled counters behind the metrics: cache hits and misses by namespace, rate-limit
waits and refusals by bucket, and Redis' state; each read back with Prometheus' own parser
(``prometheus_client.parser``), from a real daemon's scrape where a daemon is needed."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import trio
import trio.testing
from prometheus_client.core import Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector, CollectorRegistry

from csp_web.app.metrics import counter_metrics, redis_metrics
from csp_web.client.trio_client import open_client
from csp_web.config import Config, with_section
from csp_web.core.api.errors import OpError
from csp_web.core.api.ports import CounterFamily
from csp_web.infra.cache import open_cache
from csp_web.infra.counters import cache_counters, limit_counters
from csp_web.infra.ratelimit import Rate, RateLimits
from protocol import Status, Task
from specialists.tool.config import ToolConfig
from tests.conftest import Sink
from tests.test_metrics import Samples, samples, scrape, serving, value, with_metrics
from tests.tool.exec_support import make_config, scratch_dir


class Families(Collector):
    """A registry's collector of ``families``, as the daemon's collector reads them."""

    def __init__(self, families: Sequence[CounterFamily]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return counter_metrics(self.families)


def scraped(*families: CounterFamily) -> Samples:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Families(families))
    return samples(generate_latest(registry).decode())


async def test_cache_reads_are_counted_by_namespace_so_a_hit_ratio_can_be_computed(
    tmp_path: Path,
) -> None:
    async with open_cache(str(tmp_path / "c"), size_limit_bytes=1 << 20) as cache:
        await cache.set("fetch", "a", {"page": 1}, ttl_s=60)
        for material in ("a", "a", "b"):
            await cache.get("fetch", material)
        await cache.get("api:weather", "x")
        found = scraped(*cache_counters("web", lambda: cache))
    assert value(found, "csp_web_cache_hits_total", store="web", namespace="fetch") == 2
    assert value(found, "csp_web_cache_misses_total", store="web", namespace="fetch") == 1
    assert value(found, "csp_web_cache_misses_total", store="web", namespace="api:weather") == 1
    assert (
        "csp_web_cache_hits_total",
        frozenset({("store", "web"), ("namespace", "api:weather")}),
    ) not in found


def test_a_cache_not_open_has_no_samples() -> None:
    found = scraped(*cache_counters("exec", lambda: None))
    assert [name for name, _ in found] == []


async def test_rate_limit_waits_seconds_and_refusals_are_counted_by_bucket(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limits = RateLimits({"fetch": Rate(per_minute=60, burst=1), "api:x": Rate(60, 1)})
    bucket = limits.bucket("fetch")
    assert bucket is not None
    start = trio.current_time()
    await bucket.acquire(deadline=start)  # a token: no wait
    await bucket.acquire(deadline=start + 5)  # waits 1 s for the next
    with pytest.raises(OpError):
        await bucket.acquire(deadline=trio.current_time() + 0.5)  # refused
    bucket.pause_until(trio.current_time() + 3)
    await bucket.acquire(deadline=trio.current_time() + 10)  # waits the pause out
    limits.reload({"fetch": Rate(per_minute=120, burst=1)})
    remade = limits.bucket("fetch")
    assert remade is not None
    assert (remade is not bucket, remade.counts is limits.counts) == (True, True)
    found = scraped(*limit_counters(lambda: limits.counts))
    assert value(found, "csp_web_ratelimit_waits_total", bucket="fetch") == 2
    assert value(found, "csp_web_ratelimit_wait_seconds_total", bucket="fetch") == pytest.approx(4)
    assert value(found, "csp_web_ratelimit_refusals_total", bucket="fetch") == 1
    assert ("csp_web_ratelimit_waits_total", frozenset({("bucket", "api:x")})) not in found


async def test_a_cancelled_wait_counts_the_seconds_really_waited(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limits = RateLimits({"fetch": Rate(per_minute=6, burst=1)})
    bucket = limits.bucket("fetch")
    assert bucket is not None
    await bucket.acquire(deadline=trio.current_time())
    with trio.move_on_after(2):
        await bucket.acquire(deadline=trio.current_time() + 60)  # a 10 s wait, cut at 2
    assert limits.counts.waited_s["fetch"] == pytest.approx(2)


def test_families_of_one_name_from_two_specialists_are_one_metric() -> None:
    web = cache_counters("web", lambda: None)
    rows = CounterFamily(
        "cache_hits", "x", ("store", "namespace"), lambda: [(("exec", "exec"), 3.0)]
    )
    found = scraped(*web, rows)
    assert value(found, "csp_web_cache_hits_total", store="exec", namespace="exec") == 3


@pytest.mark.parametrize("mode", ["single", "cluster", "sentinel"])
def test_redis_state_is_up_its_mode_its_failures_and_fallbacks_by_kind(mode: str) -> None:
    line = json.dumps(
        {
            "state": "down",
            "mode": mode,
            "events": "lost",
            "calls": 9,
            "failures": 2,
            "round_trips": 9,
            "fallbacks": {"cache_miss": 3, "unreplicated": 1},
            "error": "probe: no reply",
        }
    )
    registry = CollectorRegistry(auto_describe=False)

    class Redis(Collector):
        def collect(self) -> Iterator[Metric]:
            return redis_metrics(line)

    registry.register(Redis())
    found = samples(generate_latest(registry).decode())
    assert value(found, "csp_web_redis_up") == 0
    assert value(found, "csp_web_redis_mode", mode=mode) == 1
    assert value(found, "csp_web_redis_failures_total") == 2
    assert value(found, "csp_web_redis_fallbacks_total", kind="cache_miss") == 3
    assert value(found, "csp_web_redis_fallbacks_total", kind="unreplicated") == 1


async def test_a_daemons_scrape_has_the_exec_caches_hits_and_every_counter_family(
    config: Config, sink: Sink, sock_dir: str
) -> None:
    """A real daemon: the exec cache's miss then hit by namespace, its op counted; the web
    cache's and the rate limits' families are served (empty until used)."""
    with scratch_dir() as workspace:
        exec_config = make_config(workspace, cache_safe_patterns=(r"cat .*",))
        config = with_section(config, "tool", ToolConfig(exec=exec_config))
        socket_path = os.path.join(sock_dir, "csp.sock")
        command = Task("exec", "SHELL", "EXEC_RESULT", "cat /etc/hostname")
        with trio.fail_after(60):
            async with serving(with_metrics(config, "127.0.0.1:0"), socket_path) as where:
                assert where is not None
                async with open_client(socket_path) as client:
                    replies = [await client.call(command) for _ in range(2)]
                text = (await scrape(where)).text
    assert [reply.status for reply in replies] == [Status.OK, Status.OK]
    found = samples(text)
    assert value(found, "csp_web_cache_misses_total", store="exec", namespace="exec") == 1
    assert value(found, "csp_web_cache_hits_total", store="exec", namespace="exec") == 1
    assert value(found, "csp_web_requests_total", op="exec", status="OK", code="") == 2
    names = {family.name for family in text_string_to_metric_families(text)}
    expected = {"cache_hits", "cache_misses", "ratelimit_waits", "ratelimit_wait_seconds"}
    assert {f"csp_web_{name}" for name in (*expected, "ratelimit_refusals")} <= names
