"""Pages across a fleet (redis.url): a URL two daemons load at once is downloaded once, a
prefetch by one is a hit for the other, and the leader's failure about the URL is shared."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import replace

import pytest
import trio

from csp_web.config import Config, with_section
from csp_web.core.api.errors import OpError
from protocol import ErrorCode
from specialists.web.config import web_section
from specialists.web.pages.loading import Page, load_page
from specialists.web.services import WebServices, open_web_services
from tests.conftest import wait_until
from tests.net._dns import FixedResolver
from tests.net._origin import Origin
from tests.net._origin import Reply as OriginReply
from tests.redis.conftest import (  # noqa: F401  (fixtures)
    OpenLink,
    open_link,
    redis_config,
    redis_server,
)
from tests.web.pages_support import ARTICLE, TITLE, hits, serve

WAIT_S = 10


class GatedResolver(FixedResolver):
    """Holds every lookup until ``release`` is set: a download caught mid-way."""

    def __init__(self, answers: dict[str, Sequence[str]]) -> None:
        super().__init__(answers)
        self.entered = trio.Event()
        self.release = trio.Event()

    async def resolve(self, host: str, port: int) -> Sequence[str]:
        self.entered.set()
        await self.release.wait()
        return await super().resolve(host, port)


Daemon = Callable[..., AbstractAsyncContextManager[WebServices]]


@pytest.fixture
def daemon(
    web_config: Config,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    open_link: OpenLink,  # noqa: F811  (the fixture imported above)
) -> Daemon:
    """``async with daemon(resolver)``: one daemon's web services on the shared Redis."""

    @asynccontextmanager
    async def opened(
        resolver: FixedResolver | None = None, **link_overrides: object
    ) -> AsyncIterator[WebServices]:
        # The gated resolvers hold lookups on purpose and the flights ride on Redis: bounds
        # of 2 s (DNS) and 0.5 s (a Redis call) are honest for production, but a loaded 2-core
        # host outlasts them and the test then measures the host (seen: dns_failed:timeout).
        guard = replace(web_section(web_config).guard, dns_timeout_s=WAIT_S)
        config = with_section(web_config, "web", replace(web_section(web_config), guard=guard))
        async with (
            open_link(**{"call_timeout_s": 5.0, **link_overrides}) as link,
            open_web_services(
                config, resolver=resolver or dns, ssl_context=trust, link=link
            ) as services,
        ):
            yield services

    return opened


async def load(web: WebServices, url: str, **options: bool) -> Page:
    return await load_page(web, url, deadline=trio.current_time() + WAIT_S, **options)


async def test_a_url_two_daemons_load_at_once_is_downloaded_once(
    daemon: Daemon, dns: FixedResolver, origin: Origin
) -> None:
    url = serve(origin, "/tides", ARTICLE)
    gated = GatedResolver(dns.answers)
    pages: dict[str, Page] = {}

    async def load_into(name: str, web: WebServices, **options: bool) -> None:
        pages[name] = await load(web, url, **options)

    async with daemon(gated) as first, daemon() as second:
        flights = second.fleet_flights
        assert flights is not None
        with trio.fail_after(WAIT_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(load_into, "first", first)
                await gated.entered.wait()  # the first daemon holds the claim, mid-download
                nursery.start_soon(load_into, "second", second)
                # It waits on the first: a counter set on Redis's answer in a worker thread,
                # which no event marks, so polled on the real clock (no MockClock here).
                await wait_until(lambda: flights.followed == 1)
                gated.release.set()
    assert hits(origin, "/tides") == 1
    assert (pages["first"].title, pages["first"].cached) == (TITLE, False)
    assert (pages["second"].title, pages["second"].cached) == (TITLE, True)


async def test_a_prefetch_by_one_daemon_is_joined_by_anothers_fetch(
    daemon: Daemon, dns: FixedResolver, origin: Origin
) -> None:
    url = serve(origin, "/prefetched", ARTICLE)
    gated = GatedResolver(dns.answers)
    async with daemon(gated) as first, daemon() as second:
        flights = second.fleet_flights
        assert flights is not None
        with trio.fail_after(WAIT_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lambda: load(first, url, background=True))
                await gated.entered.wait()
                nursery.start_soon(load, second, url)
                await wait_until(lambda: flights.followed == 1)
                gated.release.set()
        assert (await load(second, url)).cached
    assert hits(origin, "/prefetched") == 1


async def test_the_leaders_failure_about_the_url_is_the_followers_answer(
    daemon: Daemon, dns: FixedResolver, origin: Origin
) -> None:
    origin.routes["/gone"] = lambda _seen: OriginReply(404, [], b"no")
    url = origin.url("origin.test", "/gone")
    gated = GatedResolver(dns.answers)
    errors: list[OpError] = []

    async def failing(web: WebServices) -> None:
        with pytest.raises(OpError) as caught:
            await load(web, url)
        errors.append(caught.value)

    async with daemon(gated) as first, daemon() as second:
        flights = second.fleet_flights
        assert flights is not None
        with trio.fail_after(WAIT_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(failing, first)
                await gated.entered.wait()
                nursery.start_soon(failing, second)
                await wait_until(lambda: flights.followed == 1)
                gated.release.set()
    assert [(e.code, e.detail) for e in errors] == [(ErrorCode.FETCH_FAILED, "http_404")] * 2
    assert hits(origin, "/gone") == 1


async def test_a_peer_that_never_finishes_is_waited_for_only_flight_wait_s(
    daemon: Daemon, dns: FixedResolver, origin: Origin
) -> None:
    url = serve(origin, "/slow", ARTICLE)
    hung = GatedResolver(dns.answers)  # never released: the leader hangs mid-download
    async with daemon(hung) as first, daemon(flight_wait_s=0.05) as second:
        assert second.redis is not None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(load, first, url)
            await hung.entered.wait()
            with trio.fail_after(WAIT_S):
                page = await load(second, url)
            nursery.cancel_scope.cancel()
        assert (page.title, page.cached) == (TITLE, False)
        assert second.redis.fallbacks["flight_lead_after_wait"] == 1
    assert hits(origin, "/slow") == 1
