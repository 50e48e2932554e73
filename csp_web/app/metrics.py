"""The daemon's figures in Prometheus' text format (docs/metrics.md), read when scraped.

Nothing here runs per op: the dispatcher counts each reply once where it writes the op's one
audit record (``Stats.record``: a counter and a histogram bucket), and this collector turns
those counters, the pools, the outbox and the specialists' ``REQ:stats`` lines into metric
families at each scrape. Label strings are made then, never on an op's path.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from csp_web.core.api.ports import CounterFamily
from csp_web.core.daemon.compose import Daemon
from csp_web.core.dispatch.stats import LATENCY_BUCKETS_MS, Stats
from csp_web.core.dispatch.sysops import SysServices

PREFIX = "csp_web_"
_BOUNDS_S = [f"{bound / 1000:g}" for bound in LATENCY_BUCKETS_MS] + ["+Inf"]
# A number a REQ:stats line gives as key:value (BROWSER, NODES, EXEC_LIMITS...).
_PAIR = re.compile(r"(?:^|[\s,])([A-Za-z_]\w*):(-?\d+(?:\.\d+)?)(?=[\s,]|$)")


class DaemonCollector(Collector):
    """The metric families of one composed daemon, read from its live state at each
    ``collect`` (on the trio thread: the state is not shared with other threads)."""

    def __init__(self, daemon: Daemon) -> None:
        self._daemon = daemon
        self._outbox_progress = _Progress()

    def collect(self) -> Iterator[Metric]:
        sys = self._daemon.sys
        yield from _requests(sys.stats)
        yield from _daemon_gauges(sys.stats)
        yield from _pools(self._daemon)
        yield from self._outbox(sys)
        yield from _storage(sys)
        yield from _lines(sys)
        yield from counter_metrics(sys.counters)

    def _outbox(self, sys: SysServices) -> Iterator[Metric]:
        outbox = sys.memory.outbox if sys.memory is not None else None
        if outbox is None:
            return
        room, delivery = outbox.room, outbox.delivery
        yield _gauge("outbox_depth", "memory writes waiting for delivery", room.depth)
        yield _counter("outbox_delivered", "memory writes delivered", delivery.delivered)
        yield _counter("outbox_rejected", "writes the Memory Specialist refused", delivery.rejected)
        yield _counter("outbox_refused", "writes refused for want of room", room.refused)
        yield _gauge(
            "outbox_connected", "1 while the Memory Specialist is connected", room.connected
        )
        yield _gauge(
            "outbox_waiting_turns", "ops waiting for outbox room (O-5)", room.waiting_turns
        )
        stalled = self._outbox_progress.stalled_s(room.depth, delivery.delivered)
        yield _gauge(
            "outbox_delivery_lag_seconds",
            "how long writes have waited with none delivered, as seen by scrapes (0: none wait)",
            stalled,
        )


class _Progress:
    """Delivery lag as scrapes see it: the time since the outbox was last seen empty or
    delivering; the outbox keeps no per-write time, so it is resolved to the scrape interval."""

    def __init__(self) -> None:
        self._delivered = -1
        self._since = time.monotonic()

    def stalled_s(self, depth: int, delivered: int) -> float:
        now = time.monotonic()
        if depth == 0 or delivered != self._delivered:
            self._delivered, self._since = delivered, now
        return 0.0 if depth == 0 else now - self._since


def registry_for(daemon: Daemon) -> CollectorRegistry:
    """A registry holding only ``daemon``'s collector (not the process-wide default one,
    whose process and GC collectors would differ between a test and the daemon)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DaemonCollector(daemon))
    return registry


def _requests(stats: Stats) -> Iterator[Metric]:
    requests = CounterMetricFamily(
        PREFIX + "requests", "replies by op, status and error code", labels=["op", "status", "code"]
    )
    durations = HistogramMetricFamily(
        PREFIX + "request_duration_seconds", "time from a task's start to its reply", labels=["op"]
    )
    for op, entry in sorted(stats.ops.items()):
        for (status, code), count in sorted(entry.outcomes.items()):
            requests.add_metric([op, status, code], count)
        cumulative, buckets = 0, []
        for bound, count in zip(_BOUNDS_S, entry.buckets, strict=True):
            cumulative += count
            buckets.append((bound, cumulative))
        durations.add_metric([op], buckets, entry.total_ms / 1000)
    failed = CounterMetricFamily(
        PREFIX + "failed_replies",
        "FAIL replies by code: ops' and frames refused before any op ran (REQ:stats REJECTED)",
        labels=["code"],
    )
    for code, count in sorted(stats.rejections.items()):
        failed.add_metric([code], count)
    return iter((requests, durations, failed))


def _daemon_gauges(stats: Stats) -> Iterator[Metric]:
    yield _counter("frames", "frames read from clients", stats.frames)
    yield _gauge("in_flight", "tasks running or queued now", stats.in_flight)
    yield _gauge("connections", "client connections open now", stats.connections)
    yield _gauge("uptime_seconds", "seconds since the daemon started", stats.uptime_s)


def _pools(daemon: Daemon) -> Iterator[Metric]:
    running = GaugeMetricFamily(PREFIX + "pool_running", "tasks running", labels=["pool"])
    queued = GaugeMetricFamily(PREFIX + "pool_queued", "tasks waiting for a slot", labels=["pool"])
    limit = GaugeMetricFamily(PREFIX + "pool_max_running", "the pool's slots", labels=["pool"])
    for name, slots in sorted(daemon.dispatcher.pools.items()):
        running.add_metric([name], slots.running)
        queued.add_metric([name], slots.queued)
        limit.add_metric([name], slots.max_running)
    return iter((running, queued, limit))


def _storage(sys: SysServices) -> Iterator[Metric]:
    full = GaugeMetricFamily(
        PREFIX + "storage_full", "1 while the store's disk is full (SPEC O-6)", labels=["store"]
    )
    for store, is_full in sys.storage:
        full.add_metric([store], float(is_full()))
    yield full


def _lines(sys: SysServices) -> Iterator[Metric]:
    """The numbers of the specialists' ``REQ:stats`` lines (BROWSER, NODES, REDIS, MCP...),
    each a gauge sample labelled by line, name (an MCP server's) and key; and Redis' state."""
    values = GaugeMetricFamily(
        PREFIX + "component",
        "a number from a REQ:stats line (docs/ops.md): exec, browser, nodes, MCP, Redis",
        labels=["line", "name", "key"],
    )
    seen: set[tuple[str, str, str]] = set()
    redis_line: str | None = None
    for line, value in sorted(sys.lines.items()):
        current = value() if callable(value) else value
        for text in (current,) if isinstance(current, str) else current:
            for name, key, number in _numbers(text):
                if (line, name, key) not in seen:  # one sample per label set, as Prometheus asks
                    seen.add((line, name, key))
                    values.add_metric([line, name, key], number)
            if line == "REDIS":
                redis_line = text
    yield values
    if redis_line is not None:
        yield from redis_metrics(redis_line)


def redis_metrics(text: str) -> Iterator[Metric]:
    """Redis' state from its REDIS line: up, how it is reached, fallbacks by kind (the
    link's own names: a bounded set)."""
    data = json.loads(text)
    yield _gauge("redis_up", "1 while the shared Redis answers (redis.url)", data["state"] == "up")
    mode = GaugeMetricFamily(
        PREFIX + "redis_mode",
        "1 for how Redis is reached: single, cluster or sentinel",
        labels=["mode"],
    )
    mode.add_metric([data["mode"]], 1.0)
    yield mode
    fallbacks = CounterMetricFamily(
        PREFIX + "redis_fallbacks",
        "calls that fell back while Redis was unavailable, by kind",
        labels=["kind"],
    )
    for kind, count in sorted(data["fallbacks"].items()):
        fallbacks.add_metric([kind], count)
    yield fallbacks
    yield _counter("redis_failures", "Redis calls that failed or ran out of time", data["failures"])


def counter_metrics(counters: Iterable[CounterFamily]) -> Iterator[Metric]:
    """The specialists' labelled counters (cache hits by namespace, rate-limit waits by
    bucket), families of one name merged into one metric."""
    families: dict[str, CounterMetricFamily] = {}
    for family in counters:
        metric = families.get(family.name)
        if metric is None:
            metric = CounterMetricFamily(PREFIX + family.name, family.doc, labels=family.labels)
            families[family.name] = metric
        for labels, count in family.samples():
            metric.add_metric(labels, count)
    yield from families.values()


def _numbers(text: str) -> Iterable[tuple[str, str, float]]:
    """(name, key, value) for each number in one stats line: a JSON object's (nested objects'
    keys joined with ``_``; ``name`` its ``server`` or ``name`` field), else its key:value
    pairs."""
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            return ()
        if isinstance(data, dict):
            name = data.get("server") or data.get("name") or ""
            return [(str(name), key, number) for key, number in _flat(data, "")]
        return ()
    return [("", key, float(number)) for key, number in _PAIR.findall(text)]


def _flat(data: dict[str, object], prefix: str) -> Iterator[tuple[str, float]]:
    for key, value in data.items():
        if isinstance(value, int | float):  # bool is an int: true is 1
            yield prefix + key, float(value)
        elif isinstance(value, dict):
            yield from _flat(value, f"{prefix}{key}_")


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, doc, value=float(value))


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(PREFIX + name, doc, value=float(value))
