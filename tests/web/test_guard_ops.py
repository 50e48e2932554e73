"""Issue 22: every web op that takes a URL (fetch, meta, resolve, summarize, api, search's
configured backends, a redirect's Location, a meta refresh) refuses cloud metadata services by
address and by name, and answers a malformed URL with a catalogue FAIL code, never
internal_error: each runs the one URL gate before anything else parses the URL."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import replace

import pytest

from csp_web.config import Config, with_section
from csp_web.core.api.errors import OpError
from csp_web.net import GuardConfig
from protocol import ErrorCode, Status
from specialists.web.config import ApiConfig, RateConfig, SearchConfig, SearchProvider, web_section
from specialists.web.pages import ops_api, ops_fetch, ops_summarize
from specialists.web.search import ops_search
from tests.net._dns import FixedResolver
from tests.net._hostile_urls import assert_catalogued_failure, malformed
from tests.net._metadata import METADATA_NAMES, METADATA_TARGETS
from tests.net._origin import Origin, Seen
from tests.net._origin import Reply as OriginReply
from tests.web.conftest import CERT_NAMES, DispatcherFactory
from tests.web.fixtures import open_web_dispatcher
from tests.web.pages_support import run

PAGE_OPS = [("fetch", "CONTENT"), ("meta", "META"), ("resolve", "URL"), ("summarize", "SUMMARY")]
WEB_OPS = [*ops_fetch.OPS, *ops_summarize.OPS, *ops_api.OPS, *ops_search.OPS]


@pytest.fixture
def web_config(web_config: Config) -> Config:
    """The web tests' config with room in the op rate limits for a table of URLs a test."""
    roomy = RateConfig(per_minute=10_000, burst=1_000)
    web = web_section(web_config)
    return with_section(
        web_config,
        "web",
        replace(
            web,
            fetch=replace(web.fetch, rate=roomy),
            summarize=replace(web.summarize, rate=roomy),
        ),
    )


@pytest.fixture
def dns() -> FixedResolver:
    """The origin's names, and every metadata name answering 127.0.0.1, which the test config
    opens for the origin: only the name rule stands between a fetch and that address."""
    answers = {name: ["127.0.0.1"] for name in CERT_NAMES}
    answers.update({name.lower().rstrip("."): ["127.0.0.1"] for name, _ in METADATA_NAMES})
    return FixedResolver(answers)


@pytest.mark.parametrize(("req", "out"), PAGE_OPS)
@pytest.mark.parametrize(("host", "error"), METADATA_TARGETS)
async def test_each_page_op_refuses_cloud_metadata_by_address_and_by_name(
    make_dispatcher: DispatcherFactory, origin: Origin, req: str, out: str, host: str, error: str
) -> None:
    url = f"https://{host}:{origin.port}/latest/meta-data/"
    reply = await run(make_dispatcher(WEB_OPS), req, out, None, ("URL", url))
    assert (reply.status, reply.get("ERROR")) == (Status.FAIL, error)
    assert origin.requests == []


@pytest.mark.parametrize(("host", "error"), METADATA_TARGETS)
async def test_a_redirect_to_cloud_metadata_is_refused_by_the_same_rule(
    make_dispatcher: DispatcherFactory, origin: Origin, host: str, error: str
) -> None:
    target = f"https://{host}:{origin.port}/latest/meta-data/"
    origin.routes["/go"] = lambda _seen: OriginReply(302, [("location", target)], b"")
    url = origin.url("origin.test", "/go")
    reply = await run(make_dispatcher(WEB_OPS), "fetch", "CONTENT", url)
    assert (reply.status, reply.get("ERROR")) == (Status.FAIL, error)
    assert [path for path in origin.paths() if path != "/robots.txt"] == ["/go"]


def with_api(config: Config, base_url: str) -> Config:
    return with_section(
        config, "web", replace(web_section(config), apis={"target": ApiConfig(base_url)})
    )


@pytest.mark.parametrize(("host", "error"), METADATA_TARGETS)
async def test_the_api_op_refuses_an_api_configured_at_cloud_metadata(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    host: str,
    error: str,
) -> None:
    config = with_api(web_config, f"https://{host}:{origin.port}/")
    async with open_web_dispatcher(config, WEB_OPS, dns=dns, trust=trust) as (dispatcher, _):
        reply = await run(dispatcher, "api", "API_RESPONSE", None, ("ENDPOINT", "target:latest"))
    assert (reply.status, reply.get("ERROR"), reply.get("ENDPOINT")) == (
        Status.FAIL,
        error,
        "target:latest",
    )
    assert origin.requests == []


@pytest.mark.parametrize(("req", "out"), PAGE_OPS)
async def test_each_page_op_answers_every_malformed_url_with_a_catalogue_code(
    make_dispatcher: DispatcherFactory, origin: Origin, req: str, out: str
) -> None:
    dispatcher = make_dispatcher(WEB_OPS)
    for url in malformed(origin):
        assert_catalogued_failure(await run(dispatcher, req, out, None, ("URL", url)))
    assert origin.requests == []


def replying(reply: OriginReply) -> Callable[[Seen], OriginReply]:
    """A route that answers ``reply`` to every request."""
    return lambda _seen: reply


async def test_a_malformed_location_or_meta_refresh_is_a_catalogue_failure(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    """A redirect's Location went through urljoin before the gate: ``[::1`` was a ValueError
    and internal_error. A meta refresh that does not parse is ignored (WHATWG HTML)."""
    dispatcher = make_dispatcher(WEB_OPS)
    refresh_ok = 0
    for number, target in enumerate(malformed(origin)):
        if target.isascii() and target.isprintable():  # what h11 lets the origin send
            origin.routes[f"/r{number}"] = replying(OriginReply(302, [("location", target)]))
            redirected = await run(
                dispatcher, "fetch", "CONTENT", origin.url("origin.test", f"/r{number}")
            )
            assert_catalogued_failure(redirected)
        page = f'<html><head><meta http-equiv="refresh" content="0; url={target}"></head></html>'
        refresh = OriginReply(200, [("content-type", "text/html")], page.encode())
        origin.routes[f"/m{number}"] = replying(refresh)
        resolved = await run(dispatcher, "resolve", "URL", origin.url("origin.test", f"/m{number}"))
        if resolved.status is Status.OK:
            refresh_ok += 1
        else:
            assert_catalogued_failure(resolved)
    assert refresh_ok > 0  # the unparsable ones were ignored, not failed


async def test_the_api_op_answers_a_malformed_base_url_or_endpoint_with_a_catalogue_code(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    """Issue 22: ``base_url: https://[::1`` was internal_error (the endpoint join split it
    before the gate saw it); fetch said url_rejected."""
    for base_url in malformed(origin):
        config = with_api(web_config, base_url)
        async with open_web_dispatcher(config, WEB_OPS, dns=dns, trust=trust) as (dispatcher, _):
            reply = await run(dispatcher, "api", "API_RESPONSE", None, ("ENDPOINT", "target:x"))
        assert_catalogued_failure(reply)
        assert reply.get("ENDPOINT") == "target:x"
    config = with_api(web_config, origin.url("api.test", "/v1/"))
    async with open_web_dispatcher(config, WEB_OPS, dns=dns, trust=trust) as (dispatcher, _):
        for path in ("[::1", "]x[", "a:99999", "%zz", "\u2100", "\x01", "x@y", "?[::1"):
            reply = await run(
                dispatcher, "api", "API_RESPONSE", None, ("ENDPOINT", f"target:{path}")
            )
            if reply.status is not Status.OK:
                assert_catalogued_failure(reply)


def test_the_endpoint_join_refuses_an_unsplittable_base_url_as_url_rejected() -> None:
    with pytest.raises(OpError) as caught:
        ops_api.join_under("https://[::1/v1/", "x", GuardConfig())
    assert (caught.value.code, caught.value.detail) == (ErrorCode.URL_REJECTED, "bad-ipv6-literal")


async def test_search_answers_a_malformed_backend_url_with_a_catalogue_code(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    for base_url in malformed(origin):
        provider = SearchProvider("searxng", base_url=base_url)
        search = SearchConfig(order=("searxng",), providers={"searxng": provider})
        config = with_section(web_config, "web", replace(web_section(web_config), search=search))
        async with open_web_dispatcher(config, WEB_OPS, dns=dns, trust=trust) as (dispatcher, _):
            reply = await run(dispatcher, "search", "URL_REFS", None, ("QUERY", "tides"))
        assert_catalogued_failure(reply)
    assert origin.requests == []
