"""The shared infrastructure's labelled counters as metric families (csp_web.app.metrics):
a cache's hits and misses by namespace, and the rate limits' waits and refusals by bucket.

The counters themselves are plain ``Counter`` increments where they happen (a cache hit
stays a dict lookup and an increment); the families here read them at each scrape, through
a callable, so a cache or bucket source swapped by a reload is read as it is then.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping

from csp_web.core.api.ports import CounterFamily
from csp_web.infra.ratelimit import LimitCounts
from csp_web.infra.redis_cache import ResponseCache

Rows = list[tuple[tuple[str, ...], float]]


def cache_counters(
    store: str, cache: Callable[[], ResponseCache | None]
) -> tuple[CounterFamily, ...]:
    """``cache_hits`` and ``cache_misses`` of ``cache()`` (None: not open) as the store
    ``store`` (``web``, ``exec``), by namespace: hits / (hits + misses) is the hit ratio."""

    def rows(pick: Callable[[ResponseCache], Counter[str]]) -> Callable[[], Rows]:
        def read() -> Rows:
            current = cache()
            counts = Counter[str]() if current is None else pick(current)
            return [((store, name), float(count)) for name, count in sorted(counts.items())]

        return read

    labels = ("store", "namespace")
    return (
        CounterFamily(
            "cache_hits", "cache reads answered from the cache", labels, rows(lambda c: c.hits)
        ),
        CounterFamily(
            "cache_misses", "cache reads that found nothing", labels, rows(lambda c: c.misses)
        ),
    )


def limit_counters(counts: Callable[[], LimitCounts]) -> tuple[CounterFamily, ...]:
    """The rate limits' ``ratelimit_waits``, ``ratelimit_wait_seconds`` and
    ``ratelimit_refusals``, by bucket name."""

    def rows(pick: Callable[[LimitCounts], Mapping[str, float]]) -> Callable[[], Rows]:
        def read() -> Rows:
            return [((name,), float(n)) for name, n in sorted(pick(counts()).items())]

        return read

    labels = ("bucket",)
    return (
        CounterFamily(
            "ratelimit_waits", "calls that waited for a token", labels, rows(lambda c: c.waits)
        ),
        CounterFamily(
            "ratelimit_wait_seconds",
            "seconds calls waited for a token, in all",
            labels,
            rows(lambda c: c.waited_s),
        ),
        CounterFamily(
            "ratelimit_refusals",
            "calls refused rate_limited (no token before their deadline)",
            labels,
            rows(lambda c: c.refusals),
        ),
    )
