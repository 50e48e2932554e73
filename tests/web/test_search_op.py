"""REQ:search end to end: the dispatcher, the guarded client and a real HTTPS origin that
answers in each provider's recorded format."""

from __future__ import annotations

import json
import pathlib
import ssl
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest
import trio
import trio.testing

from csp_web.config import Config
from csp_web.core.api.ports import TaskPort
from csp_web.core.dispatch.dispatcher import DispatchPort
from csp_web.infra.ratelimit import Bucket
from protocol import Reply as CspReply
from protocol import Status
from specialists.web.config import RateConfig
from specialists.web.pages.loading import load_page
from specialists.web.search import Hit, breaker
from specialists.web.search.ops_search import OPS, start_prefetch
from specialists.web.search.prefetch import Prefetcher
from specialists.web.search.services import quota_path
from tests.harness import outbox_of
from tests.net._dns import FixedResolver
from tests.net._origin import Origin, Reply, Seen
from tests.web.fixtures import (
    BRAVE_KEY,
    BRAVE_KEY_ENV,
    load,
    open_web_dispatcher,
    run,
    serve,
    web_audits,
    with_search,
)

WAIT_S = 10.0


@pytest.fixture(autouse=True)
def _brave_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BRAVE_KEY_ENV, BRAVE_KEY)


def search_fields(
    query: str = "neo4j graph database python", *more: tuple[str, str]
) -> tuple[tuple[str, str], ...]:
    return (("QUERY", query), *more)


def hits_of(origin: Origin, path: str) -> list[Seen]:
    return [seen for seen in origin.requests if urllib.parse.urlsplit(seen.target).path == path]


def brave_json(*urls: str) -> bytes:
    """A Brave answer in its recorded shape with one result per URL."""
    document = json.loads(load("brave_web_search.json"))
    template = document["web"]["results"][0]
    document["web"]["results"] = [
        {**template, "url": url, "title": f"Title {index}", "description": f"About {index}"}
        for index, url in enumerate(urls)
    ]
    return json.dumps(document).encode()


def json_route(
    body: bytes, status: int = 200, headers: tuple[tuple[str, str], ...] = ()
) -> Callable[[Seen], Reply]:
    return lambda seen: Reply(status, [("content-type", "application/json"), *headers], body)


# --- each backend through the op ---------------------------------------------------------


async def test_brave_answer_is_deduplicated_and_replied_in_the_seed_form(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    """R-4, V-5: one CITE per result; SCOPE and DATA keep the seeds' list spelling."""
    origin.routes["/brave"] = serve("brave_web_search.json")
    config = with_search(web_config, origin, order=["brave", "duckduckgo"])
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            reply = await run(dispatcher, "search", "URL_REFS", *search_fields())
    assert reply.status is Status.OK
    assert reply.fields == (
        ("SCOPE", "[neo4j.com,github.com,stackoverflow.com,pypi.org]"),
        (
            "DATA",
            "url:https://neo4j.com/docs/python-manual/current/,"
            "url:https://github.com/neo4j/neo4j-python-driver,"
            "url:https://stackoverflow.com/questions/tagged/neo4j-python-driver,"
            "url:https://pypi.org/project/py2neo/,"
            "url:https://neo4j.com/developer/python/",
        ),
        (
            "SNIPPET",
            'neo4j.com:"The official Neo4j driver for Python supports Neo4j 5 and 4.4 & '
            'connects over the Bolt protocol."',
        ),
        (
            "SNIPPET",
            'github.com:"Neo4j Python Driver - Bolt protocol implementation. Contribute to '
            'neo4j/neo4j-python-driver development by creating an account on GitHub."',
        ),
        ("SNIPPET", 'stackoverflow.com:"Questions tagged [neo4j-python-driver]"'),
        (
            "SNIPPET",
            'pypi.org:"py2neo is a client library and toolkit for working with Neo4j from '
            'within Python applications."',
        ),
        ("SNIPPET", 'neo4j.com:"Learn how to connect to Neo4j from Python."'),
        ("TITLE", "Neo4j Python Driver Manual - Neo4j Docs"),
        ("TITLE", "neo4j/neo4j-python-driver: Neo4j Bolt driver for Python - GitHub"),
        ("TITLE", "Neo4j Python Driver - Stack Overflow"),
        ("TITLE", "py2neo (end of life) – PyPI"),
        ("TITLE", "Using Neo4j from Python - Getting Started"),
        (
            "CITE",
            "https://neo4j.com/docs/python-manual/current/ "
            '"Neo4j Python Driver Manual - Neo4j Docs"',
        ),
        (
            "CITE",
            "https://github.com/neo4j/neo4j-python-driver "
            '"neo4j/neo4j-python-driver: Neo4j Bolt driver for Python - GitHub"',
        ),
        (
            "CITE",
            "https://stackoverflow.com/questions/tagged/neo4j-python-driver "
            '"Neo4j Python Driver - Stack Overflow"',
        ),
        ("CITE", 'https://pypi.org/project/py2neo/ "py2neo (end of life) – PyPI"'),
        ("CITE", 'https://neo4j.com/developer/python/ "Using Neo4j from Python - Getting Started"'),
        ("BACKEND", "brave"),
        ("CACHED", "false"),
        ("QUERY", "neo4j graph database python"),
        ("SCORE", "https://neo4j.com/docs/python-manual/current/ 1.0"),
        ("SCORE", "https://github.com/neo4j/neo4j-python-driver 0.5"),
        ("SCORE", "https://stackoverflow.com/questions/tagged/neo4j-python-driver 0.333"),
        ("SCORE", "https://pypi.org/project/py2neo/ 0.25"),
        ("SCORE", "https://neo4j.com/developer/python/ 0.2"),
        # Issue 27: what Brave tells of each hit (page_age, extra_snippets, favicon, language)
        ("PUBLISHED", "https://neo4j.com/docs/python-manual/current/ 2024-05-02T09:12:44Z"),
        (
            "EXTRA_SNIPPET",
            'https://neo4j.com/docs/python-manual/current/ "Install the driver with pip install '
            'neo4j."',
        ),
        (
            "EXTRA_SNIPPET",
            "https://neo4j.com/docs/python-manual/current/ "
            '"The driver supports both synchronous and async sessions."',
        ),
        (
            "FAVICON",
            "https://neo4j.com/docs/python-manual/current/ "
            "https://imgs.search.brave.com/def/favicon.png",
        ),
        ("LANG", "https://neo4j.com/docs/python-manual/current/ en"),
        ("PUBLISHED", "https://github.com/neo4j/neo4j-python-driver 2024-06-11T17:03:10Z"),
        ("LANG", "https://github.com/neo4j/neo4j-python-driver en"),
        ("LANG", "https://stackoverflow.com/questions/tagged/neo4j-python-driver en"),
        ("LANG", "https://pypi.org/project/py2neo/ en"),
        ("LANG", "https://neo4j.com/developer/python/ en"),
    )
    (seen,) = origin.requests
    assert seen.headers["x-subscription-token"] == BRAVE_KEY
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(seen.target).query))
    assert (query["q"], query["count"]) == ("neo4j graph database python", "10")


async def test_inline_query_text_fills_query(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    """D-4: inline text fills QUERY."""
    from csp_web.core.api.context import Peer
    from protocol import Task

    origin.routes["/brave"] = serve("brave_web_search.json")
    config = with_search(web_config, origin, order=["brave"])
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        task = Task(
            "search", "WEB", "URL_REFS", "neo4j graph database python", (("MAX_RESULTS", "2"),)
        )
        with trio.fail_after(WAIT_S):
            reply = await dispatcher.run(task, Peer("test"))
    assert reply.get("SCOPE") == "[neo4j.com,github.com]"


async def test_duckduckgo_backend_answers_with_unwrapped_urls(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    origin.routes["/ddg/html/"] = serve("ddg_results.html")
    config = with_search(web_config, origin, order=["duckduckgo"])
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            reply = await run(
                dispatcher, "search", "URL_REFS", *search_fields("trio structured concurrency")
            )
    assert reply.status is Status.OK
    assert reply.get("SCOPE") == "[trio.readthedocs.io,vorpus.org,github.com]"
    assert reply.get("DATA") == (
        "url:https://trio.readthedocs.io/en/stable/,"
        "url:https://vorpus.org/blog/notes-on-structured-concurrency-or-go-statement-considered-harmful/,"
        "url:https://github.com/python-trio/trio,"
        "url:https://trio.readthedocs.io/en/stable/reference-core.html"
    )
    assert reply.get("BACKEND") == "duckduckgo"
    (seen,) = origin.requests
    assert seen.method == "POST"
    assert dict(urllib.parse.parse_qsl(seen.body.decode()))["q"] == "trio structured concurrency"


async def test_searxng_backend_answers_ranked_by_score(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    origin.routes["/searx/search"] = serve("searxng_results.json")
    config = with_search(web_config, origin, order=["searxng"])
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            reply = await run(
                dispatcher, "search", "URL_REFS", *search_fields("trio structured concurrency")
            )
    assert reply.get("SCOPE") == "[vorpus.org,en.wikipedia.org,trio.readthedocs.io]"
    assert reply.get_all("TITLE")[1] == "Structured concurrency - Wikipedia"
    assert reply.get("BACKEND") == "searxng"
    (seen,) = origin.requests
    assert "format=json" in seen.target


@pytest.mark.parametrize(
    ("backend", "path", "expected"),
    [
        ("brave", "/brave", ("freshness", "pm")),
        ("duckduckgo", "/ddg/html/", ("df", "m")),
        ("searxng", "/searx/search", ("time_range", "month")),
    ],
)
async def test_freshness_reaches_each_backend_in_its_own_spelling(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    backend: str,
    path: str,
    expected: tuple[str, str],
) -> None:
    routes = {
        "/brave": "brave_web_search.json",
        "/ddg/html/": "ddg_results.html",
        "/searx/search": "searxng_results.json",
    }
    origin.routes[path] = serve(routes[path])
    config = with_search(web_config, origin, order=[backend])
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            reply = await run(
                dispatcher, "search", "URL_REFS", *search_fields("q", ("FRESHNESS", "pm"))
            )
    assert reply.status is Status.OK
    (seen,) = origin.requests
    sent = seen.body.decode() if seen.method == "POST" else urllib.parse.urlsplit(seen.target).query
    assert expected in urllib.parse.parse_qsl(sent)


# --- fallback ----------------------------------------------------------------------------


async def test_brave_without_key_is_skipped_for_duckduckgo(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(BRAVE_KEY_ENV)
    origin.routes["/brave"] = serve("brave_web_search.json")
    origin.routes["/ddg/html/"] = serve("ddg_results.html")
    config = with_search(web_config, origin, order=["brave", "duckduckgo"])
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            reply = await run(
                dispatcher, "search", "URL_REFS", *search_fields("trio", ("MAX_RESULTS", "3"))
            )
    assert (reply.status, reply.get("BACKEND")) == (Status.OK, "duckduckgo")
    assert hits_of(origin, "/brave") == []


async def test_brave_429_pauses_its_bucket_and_falls_back_to_duckduckgo(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    origin.routes["/brave"] = serve(
        "brave_rate_limited.json",
        429,
        [
            ("retry-after", "30"),
            ("x-ratelimit-limit", "1, 2000"),
            ("x-ratelimit-remaining", "0, 1983"),
        ],
    )
    origin.routes["/ddg/html/"] = serve("ddg_results.html")
    config = with_search(web_config, origin, order=["brave", "duckduckgo"])
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, web):
        fields = search_fields("trio", ("MAX_RESULTS", "3"), ("NO_CACHE", "true"))
        with trio.fail_after(WAIT_S):
            first = await run(dispatcher, "search", "URL_REFS", *fields)
            bucket = web.limits.bucket("search:brave")
            assert isinstance(bucket, Bucket)  # local mode: its wait is readable
            assert 29 < bucket.wait_s() <= 30
            second = await run(dispatcher, "search", "URL_REFS", *fields)
    assert (first.status, first.get("BACKEND")) == (Status.OK, "duckduckgo")
    assert (second.status, second.get("BACKEND")) == (Status.OK, "duckduckgo")
    assert len(hits_of(origin, "/brave")) == 1  # the paused bucket kept the second call home
    assert len(hits_of(origin, "/ddg/html/")) == 2


async def test_searxng_limiter_429_pauses_its_bucket_and_falls_back(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    origin.routes["/searx/search"] = serve(
        "searxng_too_many_requests.html", 429, [("retry-after", "5")]
    )
    origin.routes["/ddg/html/"] = serve("ddg_results.html")
    config = with_search(web_config, origin, order=["searxng", "duckduckgo"])
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, web):
        with trio.fail_after(WAIT_S):
            reply = await run(
                dispatcher, "search", "URL_REFS", *search_fields("q", ("MAX_RESULTS", "3"))
            )
        bucket = web.limits.bucket("search:searxng")
        assert isinstance(bucket, Bucket)  # local mode: its wait is readable
        assert 4 < bucket.wait_s() <= 5
    assert (reply.status, reply.get("BACKEND")) == (Status.OK, "duckduckgo")


async def test_duckduckgo_bot_challenge_falls_through_to_searxng(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    origin.routes["/ddg/html/"] = serve("ddg_anomaly.html", 202)
    origin.routes["/searx/search"] = serve("searxng_results.json")
    config = with_search(web_config, origin, order=["duckduckgo", "searxng"])
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            reply = await run(
                dispatcher, "search", "URL_REFS", *search_fields("trio", ("MAX_RESULTS", "3"))
            )
    assert (reply.status, reply.get("BACKEND")) == (Status.OK, "searxng")
    assert len(hits_of(origin, "/ddg/html/")) == 1


async def test_short_answer_is_filled_from_the_next_backend(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    origin.routes["/brave"] = json_route(brave_json("https://one.org/", "https://two.org/"))
    origin.routes["/ddg/html/"] = serve("ddg_results.html")
    config = with_search(web_config, origin, order=["brave", "duckduckgo"])
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            reply = await run(
                dispatcher, "search", "URL_REFS", *search_fields("q", ("MAX_RESULTS", "4"))
            )
    assert reply.status is Status.OK
    assert reply.get("BACKEND") == "brave,duckduckgo"
    assert reply.get("SCOPE") == "[one.org,two.org,trio.readthedocs.io,vorpus.org]"


async def test_short_answer_after_a_backend_failed_is_partial(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    """R-3: fewer results after a backend failed is PARTIAL, saying what is missing."""
    origin.routes["/brave"] = json_route(brave_json("https://one.org/", "https://two.org/"))
    origin.routes["/ddg/html/"] = serve("ddg_anomaly.html", 202)
    config = with_search(web_config, origin, order=["brave", "duckduckgo"])
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            reply = await run(
                dispatcher, "search", "URL_REFS", *search_fields("q", ("MAX_RESULTS", "5"))
            )
            again = await run(
                dispatcher, "search", "URL_REFS", *search_fields("q", ("MAX_RESULTS", "5"))
            )
    assert reply.status is Status.PARTIAL
    assert reply.get("DATA") == "url:https://one.org/,url:https://two.org/"
    assert reply.get("MISSING_RESULTS") == "3"
    assert reply.get_all("BACKEND_ERROR") == [
        "duckduckgo:anomaly_page DuckDuckGo answered with its bot challenge"
    ]
    assert again.get("CACHED") == "false"  # a partial answer is not cached


async def test_every_backend_failing_replies_search_api_error(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    """R-2: SCOPE [], DATA none, ERROR, then further fields."""
    origin.routes["/brave"] = serve("brave_rate_limited.json", 429, [("retry-after", "12")])
    origin.routes["/ddg/html/"] = serve("ddg_anomaly.html", 202)
    config = with_search(web_config, origin, order=["brave", "duckduckgo"])
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            reply = await run(dispatcher, "search", "URL_REFS", *search_fields())
    assert reply.status is Status.FAIL
    assert reply.fields == (
        ("SCOPE", "[]"),
        ("DATA", "none"),
        ("ERROR", "search_api_error:rate_limit_exceeded"),
        ("BACKEND_ERROR", "brave:rate_limit_exceeded HTTP 429"),
        ("BACKEND_ERROR", "duckduckgo:anomaly_page DuckDuckGo answered with its bot challenge"),
        ("RETRY_AFTER", "12"),
    )


async def test_mixed_failures_reply_all_backends_failed(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    origin.routes["/brave"] = serve("brave_token_invalid.json", 422)
    origin.routes["/ddg/html/"] = lambda seen: Reply(503, body=b"unavailable")
    config = with_search(web_config, origin, order=["brave", "duckduckgo"])
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            reply = await run(dispatcher, "search", "URL_REFS", *search_fields())
    assert reply.get("ERROR") == "search_api_error:all_backends_failed"
    assert reply.get_all("BACKEND_ERROR") == [
        "brave:subscription_token_invalid The provided subscription token is invalid.",
        "duckduckgo:http_503 HTTP 503",
    ]


async def test_searxng_403_fails_saying_json_must_be_enabled(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    origin.routes["/searx/search"] = serve("searxng_forbidden.html", 403)
    config = with_search(web_config, origin, order=["searxng"])
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            reply = await run(dispatcher, "search", "URL_REFS", *search_fields())
    assert reply.get("ERROR") == "search_api_error:json_format_disabled"
    (line,) = reply.get_all("BACKEND_ERROR")
    assert line.startswith("searxng:json_format_disabled ")
    assert "search.formats" in line


async def test_no_usable_backend_replies_no_backend_available(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(BRAVE_KEY_ENV)
    config = with_search(web_config, origin, order=["brave"])
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        reply = await run(dispatcher, "search", "URL_REFS", *search_fields())
    assert reply.get("ERROR") == "search_api_error:no_backend_available"
    assert reply.get_all("BACKEND_ERROR") == [f"brave:no_api_key {BRAVE_KEY_ENV} is not set"]
    assert origin.requests == []


async def test_unknown_or_incomplete_providers_are_reported_not_configured(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    config = with_search(
        web_config, origin, order=["nosuch", "searxng"], searxng={"base_url": None}
    )
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        reply = await run(dispatcher, "search", "URL_REFS", *search_fields())
    assert reply.get("ERROR") == "search_api_error:no_backend_available"
    assert reply.get_all("BACKEND_ERROR") == ["nosuch:not_configured", "searxng:not_configured"]


# --- field bounds ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("count", "error"), [("10", None), ("11", "invalid_field"), ("0", "invalid_field")]
)
async def test_max_results_is_capped_at_ten(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    count: str,
    error: str | None,
) -> None:
    origin.routes["/searx/search"] = serve("searxng_results.json")
    config = with_search(web_config, origin, order=["searxng"])
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            reply = await run(
                dispatcher, "search", "URL_REFS", *search_fields("q", ("MAX_RESULTS", count))
            )
    code = (reply.get("ERROR") or "").partition(":")[0] or None
    assert code == error
    assert len(origin.requests) == (0 if error else 1)


@pytest.mark.parametrize(("length", "error"), [(400, None), (401, "invalid_field")])
async def test_query_is_at_most_400_chars(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    length: int,
    error: str | None,
) -> None:
    origin.routes["/searx/search"] = serve("searxng_results.json")
    config = with_search(web_config, origin, order=["searxng"])
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            reply = await run(dispatcher, "search", "URL_REFS", ("QUERY", "q" * length))
    assert ((reply.get("ERROR") or "").partition(":")[0] or None) == error


# --- cache -------------------------------------------------------------------------------


async def test_repeated_query_is_answered_from_the_cache(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    origin.routes["/brave"] = serve("brave_web_search.json")
    config = with_search(web_config, origin, order=["brave"])
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, web):
        with trio.fail_after(WAIT_S):
            first = await run(dispatcher, "search", "URL_REFS", *search_fields("Neo4j  Python"))
            second = await run(dispatcher, "search", "URL_REFS", *search_fields("neo4j python"))
            other_count = await run(
                dispatcher,
                "search",
                "URL_REFS",
                *search_fields("neo4j python", ("MAX_RESULTS", "3")),
            )
            forced = await run(
                dispatcher,
                "search",
                "URL_REFS",
                *search_fields("neo4j python", ("NO_CACHE", "true")),
            )
        records = [json.loads(data) for data in web_audits(dispatcher)]
    assert [first.get("CACHED"), second.get("CACHED")] == ["false", "true"]

    def same(reply: CspReply) -> list[tuple[str, str]]:
        return [(k, v) for k, v in reply.fields if k not in ("CACHED", "QUERY")]

    assert same(second) == same(first)
    assert [first.get("QUERY"), second.get("QUERY")] == ["Neo4j Python", "neo4j python"]
    assert other_count.get("CACHED") == "false"
    assert forced.get("CACHED") == "false"
    assert len(origin.requests) == 3
    assert [(r["op"], r["target"], r["cache_hit"], r["backend"]) for r in records] == [
        ("search", "Neo4j  Python", False, "brave"),
        ("search", "neo4j python", True, "brave"),
        ("search", "neo4j python", False, "brave"),
        ("search", "neo4j python", False, "brave"),
    ]
    assert web.cache.hits == {"search": 1}


async def test_api_key_is_never_in_the_cache_or_memory_writes(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    origin.routes["/brave"] = serve("brave_web_search.json")
    origin.routes["/ddg/html/"] = serve("ddg_anomaly.html", 202)
    config = with_search(web_config, origin, order=["brave", "duckduckgo"])
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            await run(dispatcher, "search", "URL_REFS", *search_fields())
            await run(dispatcher, "search", "URL_REFS", *search_fields("q", ("MAX_RESULTS", "10")))
        writes = [write for _, write in outbox_of(dispatcher)._store.oldest(1000)]
    assert writes
    assert not any(BRAVE_KEY in write.data or BRAVE_KEY in write.path for write in writes)
    assert_not_on_disk(Path(config.cache_dir), BRAVE_KEY)
    assert_not_on_disk(Path(config.outbox_path).parent, BRAVE_KEY)


def assert_not_on_disk(directory: Path, secret: str) -> None:
    files = [path for path in directory.rglob("*") if path.is_file()]
    assert files
    for path in files:
        assert secret.encode() not in path.read_bytes(), path


# --- circuit breaker, quota, rate limits -------------------------------------------------


@pytest.mark.parametrize(("failures", "state"), [(2, "closed"), (3, "open")])
async def test_breaker_opens_after_three_consecutive_failures(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    mock_clock: trio.testing.MockClock,
    failures: int,
    state: str,
) -> None:
    origin.routes["/brave"] = lambda seen: Reply(500, body=b"internal error")
    origin.routes["/ddg/html/"] = serve("ddg_results.html")
    config = with_search(web_config, origin, order=["brave", "duckduckgo"], breaker_failures=3)
    fields = search_fields("q", ("MAX_RESULTS", "3"), ("NO_CACHE", "true"))
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, web):
        for _ in range(failures):
            reply = await run(dispatcher, "search", "URL_REFS", *fields)
            assert reply.get("BACKEND") == "duckduckgo"
        assert breaker(web, "brave").state == state
        await run(dispatcher, "search", "URL_REFS", *fields)
    assert len(hits_of(origin, "/brave")) == (failures + 1 if state == "closed" else failures)


async def test_open_breaker_probes_again_after_its_reset_time(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    mock_clock: trio.testing.MockClock,
) -> None:
    brave_ok = False

    def brave_route(seen: Seen) -> Reply:
        if brave_ok:
            return Reply(200, [("content-type", "application/json")], load("brave_web_search.json"))
        return Reply(500, body=b"internal error")

    origin.routes["/brave"] = brave_route
    origin.routes["/ddg/html/"] = serve("ddg_results.html")
    config = with_search(
        web_config, origin, order=["brave", "duckduckgo"], breaker_failures=3, breaker_reset_s=60.0
    )
    fields = search_fields("q", ("MAX_RESULTS", "3"), ("NO_CACHE", "true"))
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, web):
        for _ in range(3):
            await run(dispatcher, "search", "URL_REFS", *fields)
        mock_clock.jump(59)
        await run(dispatcher, "search", "URL_REFS", *fields)
        assert len(hits_of(origin, "/brave")) == 3
        mock_clock.jump(1)
        brave_ok = True
        reply = await run(dispatcher, "search", "URL_REFS", *fields)
        assert breaker(web, "brave").state == "closed"
    assert reply.get("BACKEND") == "brave"
    assert len(hits_of(origin, "/brave")) == 4


async def test_monthly_quota_of_two_allows_two_calls_then_falls_back(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    origin.routes["/brave"] = serve("brave_web_search.json")
    origin.routes["/ddg/html/"] = serve("ddg_results.html")
    config = with_search(
        web_config, origin, order=["brave", "duckduckgo"], brave={"monthly_quota": 2}
    )
    fields = search_fields("q", ("MAX_RESULTS", "3"), ("NO_CACHE", "true"))
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, web):
        with trio.fail_after(WAIT_S):
            backends = [
                (await run(dispatcher, "search", "URL_REFS", *fields)).get("BACKEND")
                for _ in range(3)
            ]
        with open(quota_path(web), encoding="utf-8") as file:
            counts = json.load(file)
    assert backends == ["brave", "brave", "duckduckgo"]
    assert list(counts.values()) == [2]
    assert len(hits_of(origin, "/brave")) == 2


async def test_a_search_out_of_budget_spends_none_of_the_providers_monthly_quota(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    """A looping agent whose searches are spent is refused before the quota is counted."""
    origin.routes["/brave"] = serve("brave_web_search.json")
    config = with_search(web_config, origin, order=["brave"], brave={"monthly_quota": 5})
    fields = search_fields("q", ("MAX_RESULTS", "3"), ("NO_CACHE", "true"))
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, web):
        with trio.fail_after(WAIT_S):
            replies = [
                await run(dispatcher, "search", "URL_REFS", *fields, ("BUDGET", "searches:0"))
                for _ in range(3)
            ]
        quota = pathlib.Path(quota_path(web))
        counts = json.loads(quota.read_text(encoding="utf-8")) if quota.exists() else {}
    assert {r.get("ERROR") for r in replies} == {"budget_exhausted:searches"}
    assert sum(counts.values()) == 0
    assert hits_of(origin, "/brave") == []


async def test_spent_local_bucket_skips_to_the_next_backend_without_waiting(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    mock_clock: trio.testing.MockClock,
) -> None:
    origin.routes["/brave"] = serve("brave_web_search.json")
    origin.routes["/ddg/html/"] = serve("ddg_results.html")
    config = with_search(
        web_config, origin, order=["brave", "duckduckgo"], brave={"rate": RateConfig(6, 2)}
    )
    fields = search_fields("q", ("MAX_RESULTS", "3"), ("NO_CACHE", "true"))
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        backends = [
            (await run(dispatcher, "search", "URL_REFS", *fields)).get("BACKEND") for _ in range(3)
        ]
        assert trio.current_time() == 0  # nobody slept
    assert backends == ["brave", "brave", "duckduckgo"]


async def test_last_backend_waits_for_its_token_within_the_deadline(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    mock_clock: trio.testing.MockClock,
) -> None:
    origin.routes["/ddg/html/"] = serve("ddg_results.html")
    config = with_search(
        web_config, origin, order=["duckduckgo"], duckduckgo={"rate": RateConfig(60, 1)}
    )
    fields = search_fields("q", ("MAX_RESULTS", "3"), ("NO_CACHE", "true"))
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        first = await run(dispatcher, "search", "URL_REFS", *fields)
        refused = await run(dispatcher, "search", "URL_REFS", *fields, ("TIMEOUT_MS", "900"))
        replies = []
        async with trio.open_nursery() as nursery:

            async def second() -> None:
                replies.append(await run(dispatcher, "search", "URL_REFS", *fields))

            nursery.start_soon(second)
            await trio.testing.wait_all_tasks_blocked()
            mock_clock.jump(1)
    assert first.status is Status.OK
    assert refused.get("ERROR") == "search_api_error:rate_limit_exceeded"
    assert refused.get("RETRY_AFTER") == "1"
    assert replies[0].status is Status.OK
    assert len(origin.requests) == 2


# --- background prefetch -----------------------------------------------------------------


async def test_top_results_are_prefetched_in_the_background(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    nursery: trio.Nursery,
) -> None:
    pages = [origin.url("origin.test", f"/page{n}") for n in range(3)]
    for n in range(3):
        origin.routes[f"/page{n}"] = lambda seen: Reply(
            200, [("content-type", "text/html")], b"<html><title>t</title><p>body</p></html>"
        )
    origin.routes["/brave"] = json_route(brave_json(*pages))
    config = with_search(web_config, origin, order=["brave"], prefetch_top=2)
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, web):
        await nursery.start(web.prefetch.serve, DispatchPort(dispatcher))  # WEB's background
        with trio.fail_after(WAIT_S):
            reply = await run(
                dispatcher, "search", "URL_REFS", *search_fields("q", ("MAX_RESULTS", "3"))
            )
            await web.prefetch.wait_idle()  # both prefetches ended (their pages cached)
        cached = [await load_page(web, url, deadline=trio.current_time() + 1) for url in pages[:2]]
    assert reply.status is Status.OK
    assert reply.get("PREFETCHED") == "2"
    assert sorted(path for path in origin.paths() if path.startswith("/page")) == [
        "/page0",
        "/page1",
    ]
    assert [page.cached for page in cached] == [True, True]  # the fetch cache has them


async def test_the_prefetcher_runs_loads_only_while_its_background_task_runs(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    config = with_search(web_config, origin, order=["brave"], prefetch_top=1)
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, web):
        async with trio.open_nursery() as nursery:
            await nursery.start(web.prefetch.serve, DispatchPort(dispatcher))
            assert web.prefetch.running
            assert start_prefetch(web, [Hit(origin.url("origin.test", "/page"), "", "")], 1) == 1
            with trio.fail_after(WAIT_S):
                await origin.wait_request("/page")
            nursery.cancel_scope.cancel()
        assert not web.prefetch.running
        assert start_prefetch(web, [Hit(origin.url("origin.test", "/page"), "", "")], 1) == 0


async def test_the_prefetchers_idle_wait_ends_when_its_jobs_end_or_are_dropped_unrun() -> None:
    prefetcher, gate, ran = Prefetcher(), trio.Event(), []

    async def job(name: str) -> None:
        ran.append(name)
        await gate.wait()

    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(prefetcher.serve, cast(TaskPort, None))  # serve never uses it
            assert prefetcher.submit(lambda: job("runs"))
            await trio.testing.wait_all_tasks_blocked()
            assert ran == ["runs"]
            waiter = trio.Event()

            async def wait_idle() -> None:
                await prefetcher.wait_idle()
                waiter.set()

            nursery.start_soon(wait_idle)
            await trio.testing.wait_all_tasks_blocked()
            assert not waiter.is_set()  # a job still runs
            gate.set()
            await waiter.wait()
            # serve ends now: the first job was handed to it (it starts, and is cancelled at
            # its first wait); the second is still queued and ends unrun.
            assert prefetcher.submit(lambda: job("cancelled"))
            assert prefetcher.submit(lambda: job("dropped"))
            nursery.cancel_scope.cancel()
        await prefetcher.wait_idle()
    assert ran == ["runs", "cancelled"]


async def test_no_background_nursery_means_no_prefetch(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    config = with_search(web_config, origin, order=["brave"], prefetch_top=2)
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (_, web):
        assert start_prefetch(web, [Hit("https://origin.test/", "", "")], 2) == 0
