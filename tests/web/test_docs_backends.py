"""Perplexity as a search backend and Firecrawl as a fetch backend (issue 14), each against a
local HTTPS stand-in answering in the provider's documented format, behind the same guard,
buckets, cache and fallback chain as the other backends."""

from __future__ import annotations

import json
import logging
import ssl
import urllib.parse
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
import trio

from csp_web.config import Config, with_section
from protocol import Status
from specialists.web import WEB
from specialists.web.config import SearchProvider, web_section
from specialists.web.docs.config import DocsConfig, FirecrawlConfig
from specialists.web.search.ops_search import OPS as SEARCH_OPS
from tests.net._dns import FixedResolver
from tests.net._origin import Origin, Seen
from tests.net._origin import Reply as OriginReply
from tests.web.fixtures import open_web_dispatcher, run, serve, web_audits, with_search
from tests.web.pages_support import ARTICLE, TITLE
from tests.web.pages_support import serve as serve_page

WAIT_S = 10.0
PPLX_ENV, PPLX_KEY = "TEST_PPLX_KEY", "pplx-test-key-93c1d0"
FC_ENV, FC_KEY = "TEST_FIRECRAWL_KEY", "fc-test-key-5e7a21"


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PPLX_ENV, PPLX_KEY)
    monkeypatch.setenv(FC_ENV, FC_KEY)


def json_reply(document: object, status: int = 200) -> Callable[[Seen], OriginReply]:
    body = json.dumps(document).encode()
    return lambda seen: OriginReply(status, [("content-type", "application/json")], body)


def recording(
    seen: list[Seen], route: Callable[[Seen], OriginReply]
) -> Callable[[Seen], OriginReply]:
    def serve_and_record(request: Seen) -> OriginReply:
        seen.append(request)
        return route(request)

    return serve_and_record


# --- Perplexity ---------------------------------------------------------------------------

SEARCH_ANSWER = {
    "id": "e38104d5-6bd7-4d82-bc4e-0a21179d1f77",
    "results": [
        {
            "title": "Structured concurrency",
            "url": "https://vorpus.org/blog/structured",
            "snippet": "Notes on structured concurrency.",
            "date": "2018-04-25",
            "last_updated": "2025-01-01",
        },
        {
            "title": "Trio tutorial",
            "url": "https://trio.readthedocs.io/en/stable/tutorial.html",
            "snippet": "A friendly introduction.",
            "date": None,
        },
    ],
}
CHAT_ANSWER = {
    "id": "c1",
    "model": "sonar",
    "object": "chat.completion",
    "choices": [
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": "Trio is a library [1][2]."},
        }
    ],
    "search_results": [
        {"title": "Trio docs", "url": "https://trio.readthedocs.io/", "date": "2024-01-01"}
    ],
    "citations": ["https://trio.readthedocs.io/", "https://github.com/python-trio/trio"],
}


def perplexity(web_config: Config, origin: Origin, path: str, *order: str) -> Config:
    config = with_search(web_config, origin, order=list(order or ("perplexity",)))
    provider = SearchProvider(
        "perplexity", base_url=origin.url("search.test", path), api_key_env=PPLX_ENV
    )
    providers = {**web_section(config).search.providers, "perplexity": provider}
    search = replace(web_section(config).search, providers=providers)
    return with_section(config, "web", replace(web_section(config), search=search))


async def test_perplexity_search_api_results_become_hits(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    seen: list[Seen] = []
    origin.routes["/pplx/search"] = recording(seen, json_reply(SEARCH_ANSWER))
    config = perplexity(web_config, origin, "/pplx/search")
    async with open_web_dispatcher(config, SEARCH_OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            reply = await run(
                dispatcher, "search", "URL_REFS", ("QUERY", "trio"), ("FRESHNESS", "pw")
            )
    assert reply.status is Status.OK
    assert reply.get("DATA") == (
        "url:https://vorpus.org/blog/structured,"
        "url:https://trio.readthedocs.io/en/stable/tutorial.html"
    )
    assert reply.get_all("SNIPPET") == [
        'vorpus.org:"Notes on structured concurrency."',
        'trio.readthedocs.io:"A friendly introduction."',
    ]
    assert reply.get("BACKEND") == "perplexity"
    (request,) = seen
    assert (request.method, request.headers["authorization"]) == ("POST", f"Bearer {PPLX_KEY}")
    body = json.loads(request.body)
    assert body == {"query": "trio", "max_results": 10, "search_recency_filter": "week"}


async def test_perplexity_chat_citations_become_hits(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    seen: list[Seen] = []
    origin.routes["/pplx/chat/completions"] = recording(seen, json_reply(CHAT_ANSWER))
    config = perplexity(web_config, origin, "/pplx/chat/completions")
    async with open_web_dispatcher(config, SEARCH_OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            reply = await run(dispatcher, "search", "URL_REFS", ("QUERY", "what is trio"))
    assert reply.get_all("CITE") == [
        'https://trio.readthedocs.io/ "Trio docs"',
        'https://github.com/python-trio/trio "github.com"',
    ]
    body = json.loads(seen[0].body)
    assert body == {"model": "sonar", "messages": [{"role": "user", "content": "what is trio"}]}


async def test_perplexity_key_error_falls_back_and_its_key_is_never_logged(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    error = {
        "error": {"message": "Invalid API key provided.", "type": "invalid_api_key", "code": 401}
    }
    origin.routes["/pplx/search"] = json_reply(error, 401)
    origin.routes["/searx/search"] = serve("searxng_results.json")
    config = perplexity(web_config, origin, "/pplx/search", "perplexity", "searxng")
    alone = perplexity(web_config, origin, "/pplx/search")
    async with open_web_dispatcher(config, SEARCH_OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            fell_back = await run(dispatcher, "search", "URL_REFS", ("QUERY", "trio"))
        records = web_audits(dispatcher)
    async with open_web_dispatcher(alone, SEARCH_OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            failed = await run(dispatcher, "search", "URL_REFS", ("QUERY", "trio"))
    assert fell_back.get("BACKEND") == "searxng"
    assert failed.get("ERROR") == "search_api_error:invalid_api_key"
    assert failed.get("BACKEND_ERROR") == "perplexity:invalid_api_key Invalid API key provided."
    assert PPLX_KEY not in json.dumps(records) + str(fell_back) + str(failed)


async def test_perplexity_without_its_key_is_skipped(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(PPLX_ENV)
    origin.routes["/searx/search"] = serve("searxng_results.json")
    config = perplexity(web_config, origin, "/pplx/search", "perplexity", "searxng")
    async with open_web_dispatcher(config, SEARCH_OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            reply = await run(dispatcher, "search", "URL_REFS", ("QUERY", "trio"))
    assert reply.get("BACKEND") == "searxng"
    assert [urllib.parse.urlsplit(s.target).path for s in origin.requests] == ["/searx/search"]


# --- Firecrawl ----------------------------------------------------------------------------

MARKDOWN = "# Walled page\n\nContent only a browser gets to see."


def scrape_answer(url: str, status: int = 200) -> dict[str, Any]:
    metadata = {"title": "Walled page", "sourceURL": url, "url": url, "statusCode": status}
    return {"success": True, "data": {"markdown": MARKDOWN, "metadata": metadata}}


def firecrawl(web_config: Config, origin: Origin, **changes: Any) -> Config:
    settings = FirecrawlConfig(base_url=origin.url("api.test", "/fc"), api_key_env=FC_ENV)
    docs = replace(DocsConfig(), firecrawl=replace(settings, **changes))
    return with_section(web_config, "web", replace(web_section(web_config), docs=docs))


async def test_a_page_the_direct_load_cannot_read_comes_through_firecrawl_and_is_cached(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    url = origin.url("origin.test", "/walled")
    origin.routes["/walled"] = lambda seen: OriginReply(403, body=b"bots go away")
    seen: list[Seen] = []
    origin.routes["/fc/v1/scrape"] = recording(seen, json_reply(scrape_answer(url)))
    config = firecrawl(web_config, origin)
    async with open_web_dispatcher(config, list(WEB.ops), dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            first = await run(dispatcher, "fetch", "CONTENT", ("URL", url))
            second = await run(dispatcher, "fetch", "CONTENT", ("URL", url))
    assert (first.status, first.get("DATA"), first.get("TITLE")) == (
        Status.OK,
        MARKDOWN,
        "Walled page",
    )
    assert (first.get("CACHED"), second.get("CACHED")) == ("false", "true")
    assert first.get("FILE_KEY") == second.get("FILE_KEY")
    (request,) = seen
    assert request.headers["authorization"] == f"Bearer {FC_KEY}"
    assert json.loads(request.body) == {
        "url": url,
        "formats": ["markdown"],
        "onlyMainContent": True,
        "timeout": 30000,
    }


async def test_when_firecrawl_fails_too_the_direct_failure_is_reported(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    url = origin.url("origin.test", "/walled")
    origin.routes["/walled"] = lambda seen: OriginReply(403, body=b"no")
    origin.routes["/fc/v1/scrape"] = json_reply(
        {"success": False, "error": "Payment required"}, 402
    )
    config = firecrawl(web_config, origin)
    async with open_web_dispatcher(config, list(WEB.ops), dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            reply = await run(dispatcher, "fetch", "CONTENT", ("URL", url))
    assert (reply.get("ERROR"), reply.get("URL")) == ("fetch_failed:http_403", url)


async def test_firecrawl_always_goes_first_and_falls_back_to_the_direct_load(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    direct = serve_page(origin, "/tides", ARTICLE)
    walled = origin.url("origin.test", "/walled")

    def scrape(request: Seen) -> OriginReply:
        target = json.loads(request.body)["url"]
        if target == direct:
            return json_reply({"success": False, "error": "boom"}, 500)(request)
        return json_reply(scrape_answer(target))(request)

    origin.routes["/fc/v1/scrape"] = scrape
    config = firecrawl(web_config, origin, mode="always")
    async with open_web_dispatcher(config, list(WEB.ops), dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            scraped = await run(dispatcher, "fetch", "CONTENT", ("URL", walled))
            fell_back = await run(dispatcher, "fetch", "CONTENT", ("URL", direct))
    assert scraped.get("DATA") == MARKDOWN
    assert fell_back.get("TITLE") == TITLE
    paths = [urllib.parse.urlsplit(seen.target).path for seen in origin.requests]
    assert "/walled" not in paths
    assert paths.count("/tides") == 1


async def test_firecrawl_keeps_the_gate_and_robots_txt(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    seen: list[Seen] = []
    origin.routes["/fc/v1/scrape"] = recording(seen, json_reply(scrape_answer("x")))
    origin.robots = OriginReply(
        200, [("content-type", "text/plain")], b"User-agent: *\nDisallow: /"
    )
    config = firecrawl(web_config, origin, mode="always")
    blocked = origin.url("origin.test", "/private")
    async with open_web_dispatcher(config, list(WEB.ops), dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            robots = await run(dispatcher, "fetch", "CONTENT", ("URL", blocked))
            plain = await run(dispatcher, "fetch", "CONTENT", ("URL", "http://origin.test/x"))
            literal = await run(dispatcher, "fetch", "CONTENT", ("URL", "https://10.0.0.1/x"))
            named = origin.url("private.test", "/x")  # the test DNS answers 10.0.0.1
            private = await run(dispatcher, "fetch", "CONTENT", ("URL", named))
    assert (robots.get("ERROR") or "").startswith("robots_disallowed:")
    assert (plain.get("ERROR") or "").startswith("url_rejected:")
    assert (literal.get("ERROR") or "").startswith(("ssrf_blocked:", "url_rejected:"))
    assert (private.get("ERROR") or "").startswith("ssrf_blocked:")
    assert seen == []  # a self-hosted Firecrawl is never asked to reach what we may not


async def test_firecrawl_is_off_without_its_key_and_reports_the_page_status(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = origin.url("origin.test", "/gone")
    origin.routes["/gone"] = lambda seen: OriginReply(500, body=b"x")
    origin.routes["/fc/v1/scrape"] = json_reply(scrape_answer(url, status=404))
    config = firecrawl(web_config, origin)
    async with open_web_dispatcher(config, list(WEB.ops), dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            with_key = await run(dispatcher, "fetch", "CONTENT", ("URL", url), ("NO_CACHE", "true"))
            monkeypatch.delenv(FC_ENV)
            without = await run(dispatcher, "fetch", "CONTENT", ("URL", url), ("NO_CACHE", "true"))
    assert with_key.get("ERROR") == "fetch_failed:http_500"  # Firecrawl's 404 page: still failed
    assert without.get("ERROR") == "fetch_failed:http_500"
    scrapes = [
        s for s in origin.requests if urllib.parse.urlsplit(s.target).path == "/fc/v1/scrape"
    ]
    assert len(scrapes) == 1


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (200, b"not json", "fetch_failed:firecrawl_http_200"),
        (200, b"[" * 100_000 + b"]" * 100_000, "fetch_failed:firecrawl_http_200"),  # RecursionError
        (500, b'{"error": ' * 100_000, "fetch_failed:firecrawl_http_500"),
        (
            200,
            b'{"success": false, "error": "Blocked by robots"}',
            "fetch_failed:firecrawl:blocked_by_robots",
        ),
        (
            429,
            b'{"success": false, "error": "Rate limit exceeded"}',
            "fetch_failed:firecrawl_http_429",
        ),
        (200, b'{"success": true, "data": {"metadata": {}}}', "fetch_failed:firecrawl:no_markdown"),
        (
            200,
            b'{"success": true, "data": {"markdown": "x", "metadata": {"statusCode": 404}}}',
            "fetch_failed:http_404",
        ),
    ],
)
def test_firecrawl_error_answers_are_fetch_failed(status: int, body: bytes, error: str) -> None:
    from csp_web.core.api.errors import OpError
    from specialists.web.pages.firecrawl import parse

    with pytest.raises(OpError) as failed:
        parse((status, body), "https://a.example/")
    assert f"{failed.value.code}:{failed.value.detail}" == error


def test_a_firecrawl_page_names_where_firecrawl_read_it_even_plain_http() -> None:
    from specialists.web.pages.firecrawl import parse

    answer = {
        "success": True,
        "data": {"markdown": "# T\n\nsome words", "metadata": {"url": "http://x/"}},
    }
    page = parse((200, json.dumps(answer).encode()), "https://a.example/")
    assert (page.url, page.kind, page.content_type, page.word_count) == (
        "http://x/",  # scrape refuses it (url_rejected): never silently the target's
        "text",
        "text/markdown",
        3,
    )


@pytest.mark.parametrize(
    ("landing", "error"),
    [
        ("https://private.test:{port}/admin", "ssrf_blocked:private-10/8"),
        ("https://169.254.169.254/latest/meta-data/", "ssrf_blocked:link-local-169.254/16"),
        ("http://origin.test/walled", "url_rejected:http-not-allowed"),
    ],
)
async def test_a_scrape_that_landed_on_an_address_the_guard_refuses_is_refused_and_not_kept(
    landing: str,
    error: str,
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
) -> None:
    # Firecrawl follows redirects itself: a self-hosted one reaches internal addresses.
    url = origin.url("origin.test", "/walled")
    origin.routes["/walled"] = lambda seen: OriginReply(403, body=b"bots go away")
    seen: list[Seen] = []
    answer = scrape_answer(url)
    answer["data"]["metadata"]["url"] = landing.format(port=origin.port)
    origin.routes["/fc/v1/scrape"] = recording(seen, json_reply(answer))
    config = firecrawl(web_config, origin)
    async with open_web_dispatcher(config, list(WEB.ops), dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            first = await run(dispatcher, "fetch", "CONTENT", ("URL", url))
            second = await run(dispatcher, "fetch", "CONTENT", ("URL", url))
    for reply in (first, second):  # nothing was cached: the second asks Firecrawl again
        assert (reply.status, reply.get("ERROR"), reply.get("URL")) == (Status.FAIL, error, url)
        assert MARKDOWN not in str(reply.fields)
    assert len(seen) == 2


async def test_a_firecrawl_error_echoing_its_key_keeps_the_key_out_of_logs_and_replies(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = origin.url("origin.test", "/walled")
    origin.routes["/walled"] = lambda seen: OriginReply(403, body=b"no")

    def echo(request: Seen) -> OriginReply:
        key = request.headers["authorization"].removeprefix("Bearer ")
        error = f"Unauthorized: invalid token {key.upper()}"
        return json_reply({"success": False, "error": error})(request)

    origin.routes["/fc/v1/scrape"] = echo
    config = firecrawl(web_config, origin, mode="always")
    caplog.set_level(logging.DEBUG)
    async with open_web_dispatcher(config, list(WEB.ops), dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            reply = await run(dispatcher, "fetch", "CONTENT", ("URL", url))
    assert reply.get("ERROR") == "fetch_failed:http_403"
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "firecrawl:unauthorized_invalid_token_redacted" in logged
    for text in (logged, str(reply.fields)):
        for spelling in (FC_KEY, FC_KEY.lower().replace("-", "_")):
            assert spelling.lower() not in text.lower()
