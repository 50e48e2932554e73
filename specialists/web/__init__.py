"""The web specialist under IN:WEB: search, fetch, meta, resolve, api, summarize, the
document ops (board, save, cabinet, write_file), research jobs (research, result) and
verify (quotes checked against snapshots).

``WEB`` is the value the composition root (csp_web.app.catalog) lists; ``make_web`` builds
it with a test resolver or TLS trust store, and with the daemon's ``Seams``: web consumes the
browser's ``Renderer`` and provides the ``FileStore`` on its fileKeys (pages/filestore.py).
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from csp_web.config import Config, SectionSpec
from csp_web.core.api.ops import Op
from csp_web.core.api.ports import CounterFamily, Seams, StatsLine
from csp_web.core.api.specialist import Background, Commit, Specialist
from csp_web.infra.counters import cache_counters, limit_counters
from csp_web.infra.redis_link import RedisLink
from csp_web.net import Resolver, TransportWrapper

from .config import SECTION, WebConfig, web_section
from .docs import ops_docs
from .pages import ops_api, ops_fetch, ops_summarize
from .pages.filestore import CacheFileStore
from .research import ops_research
from .search import ops_search
from .services import WebServices, open_web_services
from .verify import ops_verify

OPS: tuple[Op[WebServices], ...] = (
    *ops_fetch.OPS,
    *ops_summarize.OPS,
    *ops_search.OPS,
    *ops_api.OPS,
    *ops_docs.OPS,
    *ops_research.OPS,
    *ops_verify.OPS,
)


def _reload(web: WebServices, section: WebConfig, config: Config) -> Commit:
    """Check the new fetch, search, api, summarize and guard settings (the guarded client
    and its backend read one reference), then apply them together."""
    commit_web = web.prepare_reload(config)
    commit_guard = web.client.prepare_reload(section.guard)

    def commit() -> None:
        commit_web()
        commit_guard()

    return commit


def _background(web: WebServices) -> tuple[Background, ...]:
    # Search prefetches, and research jobs (each in a nursery of its own, cancelled at exit);
    # with redis.url, the fleet's events (cache invalidation, flights, cron table changes).
    tasks: tuple[Background, ...] = (web.prefetch.serve, web.jobs.serve)
    return tasks if web.redis is None else (*tasks, web.redis.serve_background)


def _stats_lines(web: WebServices) -> Mapping[str, StatsLine]:
    return {} if web.redis is None else {"REDIS": web.redis.stats_line}  # at each REQ:stats


def _counters(web: WebServices) -> tuple[CounterFamily, ...]:
    # Read at each scrape: a reload keeps the cache and the bucket source (their counts).
    return (*cache_counters("web", lambda: web.cache), *limit_counters(lambda: web.limits.counts))


@asynccontextmanager
async def _seamed(services: WebServices, seams: Seams | None) -> AsyncIterator[WebServices]:
    """``services`` reading the browser's Renderer and offering the fileKey store through
    ``seams`` while open; as they are without seams."""
    if seams is None:
        yield services
        return
    services.renderer = seams.renderer
    with seams.files.provided(CacheFileStore(services)):
        yield services


def make_web(
    *,
    resolver: Resolver | None = None,
    ssl_context: ssl.SSLContext | None = None,
    link: RedisLink | None = None,
    wrap_transport: TransportWrapper | None = None,
    seams: Seams | None = None,
) -> Specialist[WebConfig, WebServices]:
    """The web specialist; ``resolver`` and ``ssl_context`` exist for tests (fixed DNS, a
    trustme CA); ``link`` is the fleet's shared state (redis.url), whose event task it runs;
    ``wrap_transport`` wraps its guarded client's transport (``csp-web replay`` cassettes);
    ``seams`` are the daemon's ports between specialists (none: web alone)."""

    @asynccontextmanager
    async def open_services(section: WebConfig, config: Config) -> AsyncIterator[WebServices]:
        async with (
            open_web_services(
                config,
                resolver=resolver,
                ssl_context=ssl_context,
                link=link,
                wrap_transport=wrap_transport,
            ) as services,
            _seamed(services, seams) as seamed,
        ):
            yield seamed

    return Specialist(
        name="web",
        ops=OPS,
        slots=lambda slots: slots.web,
        section=web_section,
        own_section=SectionSpec(SECTION, WebConfig),  # specialists/web/config.py
        reloadable=(
            "web.fetch",  # caps and its rate limit
            "web.search",  # providers, order, rate limits, result counts
            "web.apis",  # endpoints, credentials' variable names, rate limits
            "web.summarize",
            "web.docs",  # board, cabinet, research, Firecrawl: read per task
            "web.guard",  # allow-lists, ports, caps, timeouts
        ),
        # The robots cache was built for one user agent, TTL and size.
        restart_only=(
            "web.guard.user_agent",
            "web.guard.robots_ttl_s",
            "web.guard.robots_cache_entries",
            "web.tls",  # the client's TLS context and proxy are built once, at start
            "web.proxy",
        ),
        open_services=open_services,
        background=_background,
        stats_lines=_stats_lines,
        storage=lambda web: {"cache": lambda: web.cache.storage_full},
        reload=_reload,
        counters=_counters,
    )


WEB = make_web()
