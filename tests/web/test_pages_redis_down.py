"""Pages on a fleet daemon while Redis is down (issue 21 §5): a working set larger than the
memory tier is downloaded once and then served from the local disk tier, the origin counting
each page once; once Redis is back a page is Redis's again."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import replace
from pathlib import Path

import pytest
import trio

from csp_web.config import Config, with_section
from protocol import Status
from specialists.web.config import RateConfig, web_section
from specialists.web.pages.loading import Page, load_page
from specialists.web.search.ops_search import OPS as SEARCH_OPS
from specialists.web.services import WebServices, open_web_services
from tests.net._dns import FixedResolver
from tests.net._origin import Origin
from tests.redis.conftest import (  # noqa: F401  (fixtures)
    OpenLink,
    open_link,
    past_down_window,
    redis_config,
    redis_server,
    wait_live,
)
from tests.redis_server import RedisServer
from tests.web.fixtures import (
    BRAVE_KEY,
    BRAVE_KEY_ENV,
    open_web_dispatcher,
    run,
    with_search,
)
from tests.web.fixtures import serve as serve_fixture
from tests.web.pages_support import ARTICLE, TITLE, hits, serve

WAIT_S = 10
PAGES = 12
MEMORY_BYTES = 4096  # a page's entry is over 1/8 of it: the memory tier holds none

Daemon = Callable[..., AbstractAsyncContextManager[WebServices]]


@pytest.fixture
def daemon(
    web_config: Config,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    open_link: OpenLink,  # noqa: F811  (the fixture imported above)
) -> Daemon:
    """``async with daemon()``: one daemon's web services on Redis, a tiny memory tier."""

    @asynccontextmanager
    async def opened() -> AsyncIterator[WebServices]:
        web = web_section(web_config)
        cache = replace(web.cache, memory_bytes=MEMORY_BYTES)
        # Redis down, each daemon has fallback_share of the fetch rate: room for every page.
        fetch = replace(web.fetch, rate=RateConfig(per_minute=600, burst=100))
        config = with_section(web_config, "web", replace(web, cache=cache, fetch=fetch))
        async with (
            open_link() as link,
            open_web_services(config, resolver=dns, ssl_context=trust, link=link) as services,
        ):
            yield services

    return opened


async def load(web: WebServices, url: str) -> Page:
    return await load_page(web, url, deadline=trio.current_time() + WAIT_S)


async def load_all(web: WebServices, urls: list[str]) -> list[tuple[str | None, bool]]:
    with trio.fail_after(WAIT_S):
        return [((page := await load(web, url)).title, page.cached) for url in urls]


async def test_with_redis_stopped_a_second_round_of_pages_reaches_no_origin(
    daemon: Daemon,
    origin: Origin,
    redis_server: RedisServer,  # noqa: F811
) -> None:
    urls = [serve(origin, f"/down-{n}", ARTICLE) for n in range(PAGES)]
    async with daemon() as web:
        assert web.redis is not None
        redis_server.stop()  # mid-run: the daemon is serving
        await wait_live(web.redis, False)
        assert await load_all(web, urls) == [(TITLE, False)] * PAGES
        assert await load_all(web, urls) == [(TITLE, True)] * PAGES
        assert [hits(origin, f"/down-{n}") for n in range(PAGES)] == [1] * PAGES
        assert web.redis.fallbacks["cache_local"] == PAGES


async def test_once_redis_returns_a_page_is_read_from_redis_not_the_local_copy(
    daemon: Daemon,
    origin: Origin,
    redis_server: RedisServer,  # noqa: F811
) -> None:
    url = serve(origin, "/back", ARTICLE)
    async with daemon() as web:
        assert web.redis is not None
        redis_server.stop()
        await wait_live(web.redis, False)
        assert await load_all(web, [url, url]) == [(TITLE, False), (TITLE, True)]
        redis_server.start()  # empty: the page is not in Redis
        await wait_live(web.redis)
        await past_down_window(web.redis)
        assert await load_all(web, [url]) == [(TITLE, False)]  # the copy was not Redis's
        assert hits(origin, "/back") == 2


async def test_with_redis_stopped_the_local_tier_never_holds_the_search_api_key(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    open_link: OpenLink,  # noqa: F811
    redis_server: RedisServer,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(BRAVE_KEY_ENV, BRAVE_KEY)
    origin.routes["/brave"] = serve_fixture("brave_web_search.json")
    config = with_search(web_config, origin, order=["brave"])
    async with (
        open_link() as link,
        open_web_dispatcher(config, SEARCH_OPS, dns=dns, trust=trust, link=link) as (
            dispatcher,
            _,
        ),
    ):
        with trio.fail_after(WAIT_S):  # Redis up: the month's quota is seen
            assert (await run(dispatcher, "search", "URL_REFS", ("QUERY", "a"))).status is Status.OK
        redis_server.stop()
        await wait_live(link, False)
        with trio.fail_after(WAIT_S):
            for query in ("b", "b"):  # kept locally, then a local hit
                reply = await run(dispatcher, "search", "URL_REFS", ("QUERY", query))
                assert reply.status is Status.OK
        assert reply.get("CACHED") == "true"
    local = Path(config.cache_dir) / "redis-down"
    files = [path for path in local.rglob("*") if path.is_file()]
    assert files
    for path in files:
        assert BRAVE_KEY.encode() not in path.read_bytes(), path
