"""What every web op shares: the guarded client, the cache, rate limits, the web_op record.

The daemon opens these once (``open_web_services``, WEB's ``open_services``) and binds them
to every web handler as its third argument; a web op never builds its own client or cache.
"""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import trio

from csp_web.config import Config, WebConfig
from csp_web.core.api.context import OpContext
from csp_web.core.api.errors import OpError
from csp_web.core.api.records import json_record
from csp_web.infra.ratelimit import Rate
from csp_web.infra.redis_cache import ResponseCache, open_response_cache
from csp_web.infra.redis_flight import SharedFlights
from csp_web.infra.redis_link import RedisLink
from csp_web.infra.redis_ratelimit import BucketSource, shared_or_local
from csp_web.net import GuardedClient, Resolver, TransportWrapper, open_guarded_client

from .board import Board
from .breaker import Breaker
from .flights import Flights
from .jobs import ResearchJobs
from .prefetch import Prefetcher


@dataclass
class WebServices:
    """Shared web infrastructure; ``state_dir`` holds persistent counters (quotas)."""

    config: WebConfig
    client: GuardedClient
    cache: ResponseCache
    limits: BucketSource
    state_dir: str
    # State the ops keep for the daemon's life, made here, typed (no dicts by name).
    flights: Flights = field(default_factory=dict)  # downloads in progress, by URL
    breakers: dict[str, Breaker] = field(default_factory=dict)  # search backends' circuits
    quota_lock: trio.Lock = field(default_factory=trio.Lock)  # monthly quota file, one writer
    prefetch: Prefetcher = field(default_factory=Prefetcher)  # search's background loads
    redis: RedisLink | None = None  # the fleet's shared state (redis.url), else None
    fleet_flights: SharedFlights | None = None  # downloads in flight across the fleet
    board: Board = field(default_factory=Board)  # the announcement board (board.py)
    jobs: ResearchJobs = field(default_factory=ResearchJobs)  # research jobs (research.py)

    def prepare_reload(self, config: Config) -> Callable[[], None]:
        """The reload hook (``csp_web.config.reload``): new fetch, search, api and summarize
        settings and rate limits for the ops that start after it. The guard and the cache
        stay as opened."""
        rates = _rates(config.web)

        def commit() -> None:
            self.config = config.web
            self.limits.reload(rates)

        return commit


def _rates(config: WebConfig) -> dict[str, Rate]:
    rates = {"fetch": Rate(config.fetch.rate.per_minute, config.fetch.rate.burst)}
    rates["summarize"] = Rate(config.summarize.rate.per_minute, config.summarize.rate.burst)
    for name, provider in config.search.providers.items():
        rates[f"search:{name}"] = Rate(provider.rate.per_minute, provider.rate.burst)
    for name, api in config.apis.items():
        rates[f"api:{name}"] = Rate(api.rate.per_minute, api.rate.burst)
    return rates


@asynccontextmanager
async def open_web_services(
    config: Config,
    *,
    resolver: Resolver | None = None,
    ssl_context: ssl.SSLContext | None = None,
    link: RedisLink | None = None,
    wrap_transport: TransportWrapper | None = None,
) -> AsyncIterator[WebServices]:
    """Open the guarded client and the cache; both are closed on exit.

    ``resolver`` and ``ssl_context`` exist for tests (fixed DNS, a trustme CA);
    ``wrap_transport`` for ``csp-web replay`` (recording and serving cassettes).
    """
    web = config.web
    async with (
        open_guarded_client(
            web.guard, resolver=resolver, ssl_context=ssl_context, wrap_transport=wrap_transport
        ) as client,
        open_response_cache(
            config.cache_dir,
            size_limit_bytes=web.cache.size_limit_bytes,
            memory_bytes=web.cache.memory_bytes,
            link=link,
            store="web",
        ) as cache,
    ):
        limits = shared_or_local(link, _rates(web))  # the fleet's on Redis, else local
        flights = None if link is None else SharedFlights(link)
        state_dir = config.daemon.state_dir
        yield WebServices(web, client, cache, limits, state_dir, redis=link, fleet_flights=flights)


@asynccontextmanager
async def record_web_op(ctx: OpContext, op: str, target: str) -> AsyncIterator[dict[str, Any]]:
    """Send one ``web_op`` memory write when the op ends, however it ends.

    The body may set ``cache_hit`` and ``backend`` in the yielded dict. The record holds the
    op, its query or URL, outcome, duration and cache hit, never headers or credentials.
    """
    started = time.monotonic()
    details: dict[str, Any] = {"cache_hit": False}
    outcome = "OK"
    try:
        yield details
    except OpError as exc:
        outcome = f"FAIL {exc.code}"
        raise
    except BaseException:
        outcome = "FAIL cancelled"
        raise
    finally:
        if outcome != "FAIL cancelled":
            record = json_record(
                op=op,
                target=target,
                outcome=outcome,
                duration_ms=round((time.monotonic() - started) * 1000, 3),
                peer_uid=ctx.peer.uid,
                task_id=ctx.task_id,
                **details,
            )
            await ctx.remember("web", "web_op", "web-ops", record)


def quota_path(services: WebServices) -> str:
    return os.path.join(services.state_dir, "quotas.json")
