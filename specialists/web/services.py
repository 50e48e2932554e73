"""What every web op shares: the guarded client, the cache, rate limits, its audit.

The daemon opens these once (``open_web_services``, WEB's ``open_services``) and binds them
to every web handler as its third argument; a web op never builds its own client or cache.
Each product reads only its part, declared as a Protocol in its folder (``PagesServices``,
``SearchServices``, ``DocsServices``, ``ResearchServices``), which ``WebServices`` fulfils.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field, replace

import trio

from csp_web.config import Config
from csp_web.core.api.audit import OpAudit
from csp_web.core.api.errors import OpError
from csp_web.core.api.ports import Port, Renderer
from csp_web.core.api.replies import Result
from csp_web.infra.ratelimit import Rate
from csp_web.infra.redis_cache import ResponseCache, open_response_cache
from csp_web.infra.redis_flight import SharedFlights
from csp_web.infra.redis_link import RedisLink
from csp_web.infra.redis_ratelimit import BucketSource, shared_or_local
from csp_web.infra.workers import WorkerPool, open_worker_pool
from csp_web.net import (
    GuardedClient,
    Resolver,
    TransportWrapper,
    open_guarded_client,
    parse_proxy,
    trust_context,
)
from specialists.web.config import WebConfig, web_section

from .docs.board import Board
from .pages.flights import Flights
from .research.jobs import ResearchJobs
from .search.breaker import Breaker
from .search.prefetch import Prefetcher

EXTRACTION = "specialists.web.pages.loading"  # what the pool's workers import as they start


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
    render_flights: Flights = field(default_factory=dict)  # renders in progress, by URL
    breakers: dict[str, Breaker] = field(default_factory=dict)  # search backends' circuits
    quota_lock: trio.Lock = field(default_factory=trio.Lock)  # monthly quota file, one writer
    prefetch: Prefetcher = field(default_factory=Prefetcher)  # search's background loads
    redis: RedisLink | None = None  # the fleet's shared state (redis.url), else None
    fleet_flights: SharedFlights | None = None  # downloads in flight across the fleet
    board: Board = field(default_factory=Board)  # the announcement board (board.py)
    jobs: ResearchJobs = field(default_factory=ResearchJobs)  # research jobs (research/run.py)
    # The browser's Renderer while the browser specialist is open (csp_web.core.api.ports).
    renderer: Port[Renderer] = field(default_factory=lambda: Port("renderer"))
    # The worker processes CPU-heavy work runs in (web.workers; size 0: the daemon's threads).
    pool: WorkerPool = field(default_factory=lambda: WorkerPool(0))

    def prepare_reload(self, config: Config) -> Callable[[], None]:
        """The reload hook (``csp_web.config.reload``): new fetch, search, api and summarize
        settings and rate limits for the ops that start after it. The guard, the cache and
        the worker pool stay as opened."""
        rates = _rates(web_section(config))

        def commit() -> None:
            self.config = web_section(config)
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
    """Open the guarded client, the cache and the worker pool (``web.workers``, whose
    processes start on first use); all are closed on exit.

    ``resolver`` and ``ssl_context`` exist for tests (fixed DNS, a trustme CA); without
    ``ssl_context``, ``web.tls`` says whom to trust (``csp_web.net.trust``), and ``web.proxy``
    where egress goes; ``wrap_transport`` for ``csp-web replay`` (recording and serving
    cassettes).
    """
    web = web_section(config)
    if ssl_context is None and (web.tls.ca_file is not None or web.tls.system_store):
        ssl_context = await trio.to_thread.run_sync(trust_context, web.tls)
    proxy = parse_proxy(web.proxy) if web.proxy is not None else None
    async with (
        open_guarded_client(
            web.guard,
            resolver=resolver,
            ssl_context=ssl_context,
            wrap_transport=wrap_transport,
            proxy=proxy,
        ) as client,
        open_response_cache(
            config.cache_dir,
            size_limit_bytes=web.cache.size_limit_bytes,
            memory_bytes=web.cache.memory_bytes,
            link=link,
            store="web",
        ) as cache,
        open_worker_pool(web.worker_count(), warm=EXTRACTION) as pool,
    ):
        limits = shared_or_local(link, _rates(web))  # the fleet's on Redis, else local
        flights = None if link is None else SharedFlights(link)
        state_dir = config.daemon.state_dir
        yield WebServices(
            web, client, cache, limits, state_dir, redis=link, fleet_flights=flights, pool=pool
        )


@dataclass(frozen=True)
class WebAudit(OpAudit):
    """What a web op adds to its audit record: the URLs, query or fileKey it worked on and
    how it was answered; never headers, bodies or credentials."""

    target: str
    cache_hit: bool = False
    backend: str | None = None  # search: the backends that answered, comma-separated
    method: str | None = None  # summarize: how the bullets were made
    status_code: int | None = None  # api: the endpoint's HTTP status


class WebNotes:
    """What a web op learns while it runs, set as it goes; ``audit`` freezes it."""

    __slots__ = ("backend", "cache_hit", "method", "status_code", "target")

    def __init__(self, target: str) -> None:
        self.target = target
        self.cache_hit = False
        self.backend: str | None = None
        self.method: str | None = None
        self.status_code: int | None = None

    def audit(self) -> WebAudit:
        return WebAudit(self.target, self.cache_hit, self.backend, self.method, self.status_code)

    def attach(self, result: Result) -> Result:
        """``result`` carrying this op's audit."""
        return replace(result, audit=self.audit())


@contextmanager
def web_audit(target: str) -> Iterator[WebNotes]:
    """The notes of a web op on ``target``: an OpError leaving the block carries their audit
    (the body attaches it to its result itself, ``WebNotes.attach``)."""
    notes = WebNotes(target)
    try:
        yield notes
    except OpError as exc:
        if exc.audit is None:
            exc.audit = notes.audit()
        raise
