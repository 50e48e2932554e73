"""REQ:search with several QUERY fields, and what every reply adds for documents (issue 14):
the query, the total a backend reported, a relevance score per result, thumbnails. A real
HTTPS origin answers in SearXNG's and Brave's documented formats."""

from __future__ import annotations

import json
import ssl
import urllib.parse
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

import httpx
import pytest
import trio

from csp_web.config import Config, with_section
from csp_web.net import FetchResult
from protocol import Reply, Status
from specialists.web.config import web_section
from specialists.web.docs.config import DocsConfig
from specialists.web.search import brave
from specialists.web.search.ops_search import OPS, scores
from tests.net._dns import FixedResolver
from tests.net._origin import Origin, Seen
from tests.net._origin import Reply as OriginReply
from tests.web.fixtures import load, open_web_dispatcher, run, with_search

WAIT_S = 10.0
THUMB = "https://img.example/t.png"


def searx(seen: Seen) -> OriginReply:
    """SearXNG's JSON: two results per query (the second with a thumbnail), a total of 42;
    the query ``broken`` gets HTTP 500."""
    q = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(seen.target).query))["q"]
    if q == "broken":
        return OriginReply(500, body=b"oops")
    word = q.split()[0]
    results = [
        {
            "url": f"https://{word}.example/a",
            "title": f"{word} A",
            "content": "first",
            "score": 2.5,
        },
        {
            "url": f"https://{word}.org/b",
            "title": f"{word} B",
            "content": "second",
            "score": 1.25,
            "thumbnail": THUMB,
        },
    ]
    body = {"query": q, "number_of_results": 42, "results": results, "unresponsive_engines": []}
    return OriginReply(200, [("content-type", "application/json")], json.dumps(body).encode())


Ask = Callable[..., Awaitable[list[Reply]]]


@pytest.fixture
def ask(web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext) -> Ask:
    """``await ask(["alpha"], ["a", "b"], max_queries=3)``: one search per list of queries, in
    turn, on one daemon searching ``searx`` with ``docs`` settings; their replies."""
    origin.routes["/searx/search"] = searx

    async def ask_each(*batches: Sequence[str], **docs: Any) -> list[Reply]:
        config = with_search(web_config, origin, order=["searxng"])
        config = with_section(
            config, "web", replace(web_section(config), docs=replace(DocsConfig(), **docs))
        )
        async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
            with trio.fail_after(WAIT_S):
                return [
                    await run(dispatcher, "search", "URL_REFS", *(("QUERY", q) for q in queries))
                    for queries in batches
                ]

    return ask_each


async def test_one_query_reply_adds_query_total_scores_and_thumbnails(ask: Ask) -> None:
    (reply,) = await ask(["alpha  beta"])
    assert reply.fields[-5:] == (
        ("QUERY", "alpha beta"),
        ("TOTAL", "42"),
        ("SCORE", "https://alpha.example/a 2.5"),
        ("SCORE", "https://alpha.org/b 1.25"),
        ("THUMBNAIL", f"https://alpha.org/b {THUMB}"),
    )


async def test_several_queries_are_answered_each_with_its_own_status(ask: Ask) -> None:
    """R-3, R-4: a SEARCH line and its HIT, SNIPPET and THUMBNAIL lines per query answered,
    SEARCH_ERROR and its BACKEND_ERROR lines per query failed, PARTIAL."""
    (reply,) = await ask(["alpha", "broken"])
    assert reply == Reply(
        Status.PARTIAL,
        (
            ("SCOPE", "[alpha.example,alpha.org]"),
            ("DATA", "queries:2,answered:1,failed:1"),
            ("SEARCH", '1 results:2 total:42 backend:searxng cached:false "alpha"'),
            ("HIT", '1 https://alpha.example/a score:2.5 "alpha A"'),
            ("SNIPPET", '1 alpha.example:"first"'),
            ("HIT", '1 https://alpha.org/b score:1.25 "alpha B"'),
            ("SNIPPET", '1 alpha.org:"second"'),
            ("THUMBNAIL", f"1 https://alpha.org/b {THUMB}"),
            ("SEARCH_ERROR", '2 search_api_error:http_500 "broken"'),
            ("BACKEND_ERROR", "2 searxng:http_500 HTTP 500"),
            ("CITE", 'https://alpha.example/a "alpha A"'),
            ("CITE", 'https://alpha.org/b "alpha B"'),
        ),
    )


async def test_every_query_failing_fails_with_each_search_error(ask: Ask) -> None:
    (reply,) = await ask(["broken", "broken"])
    assert reply.status is Status.FAIL
    assert reply.get("ERROR") == "search_api_error:http_500"
    assert reply.get_all("SEARCH_ERROR") == [
        '1 search_api_error:http_500 "broken"',
        '2 search_api_error:http_500 "broken"',
    ]


async def test_query_count_is_capped_at_max_queries(ask: Ask) -> None:
    """N and N+1: three QUERY fields under max_queries 3 are answered, four are invalid."""
    words = ("alpha", "beta", "gamma", "delta")
    three, four = await ask(words[:3], words, max_queries=3)
    assert (three.status, three.get("DATA")) == (Status.OK, "queries:3,answered:3,failed:0")
    assert four.get("ERROR") == "invalid_field:more than 3 QUERY fields"


async def test_a_cached_answer_keeps_scores_thumbnails_and_total(ask: Ask) -> None:
    first, second = await ask(["alpha"], ["alpha"])
    assert second.get("CACHED") == "true"
    assert [f for f in second.fields if f[0] != "CACHED"] == [
        f for f in first.fields if f[0] != "CACHED"
    ]


def test_brave_thumbnails_are_read_and_ranks_give_the_score() -> None:
    document = json.loads(load("brave_web_search.json"))
    document["web"]["results"][0]["thumbnail"] = {"src": THUMB, "original": "x"}
    document["web"]["results"][1]["thumbnail"] = {"src": "http://plain.example/t.png"}
    url = "https://api.search.brave.com/"
    body = json.dumps(document).encode()
    result = FetchResult(url, 200, httpx.Headers(), body, "application/json", None, (url,), 0.1)
    hits = brave.parse(result)
    assert [hit.thumbnail for hit in hits[:2]] == [THUMB, None]  # https only
    assert scores(hits[:3]) == [1.0, 0.5, 0.333]
