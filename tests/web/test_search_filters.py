"""REQ:search's filters and ranking end to end (issue 27), against a real HTTPS origin that
answers in each backend's recorded format and IGNORES every filter it is sent: the hits that
come back obey SITE, EXCLUDE_SITE and the date range because the op holds them to it."""

from __future__ import annotations

import json
import math
import ssl
import urllib.parse
from collections.abc import Callable

import pytest
import trio

from csp_web.config import Config
from csp_web.core.dispatch.dispatcher import DispatchPort
from protocol import Reply, Status
from specialists.web.pages.fetch_fields import SUMMARY_NAMESPACE
from specialists.web.pages.filekeys import file_key, held
from specialists.web.pages.loading import load_page
from specialists.web.search.ops_search import OPS
from specialists.web.search.task_query import MAX_SITES
from tests.net._dns import FixedResolver
from tests.net._origin import Origin, Seen
from tests.net._origin import Reply as OriginReply
from tests.web.fixtures import (
    BRAVE_KEY,
    BRAVE_KEY_ENV,
    load,
    open_web_dispatcher,
    run,
    serve,
    with_search,
)

WAIT_S = 10.0
ROUTES = {
    "brave": ("/brave", "brave_web_search.json"),
    "duckduckgo": ("/ddg/html/", "ddg_results.html"),
    "searxng": ("/searx/search", "searxng_results.json"),
}


@pytest.fixture(autouse=True)
def _brave_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BRAVE_KEY_ENV, BRAVE_KEY)


async def ask(
    config: Config, dns: FixedResolver, trust: ssl.SSLContext, *fields: tuple[str, str]
) -> Reply:
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            return await run(dispatcher, "search", "URL_REFS", *fields)


def sent(seen: Seen) -> dict[str, str]:
    """The parameters a backend was sent: the form of a POST, the query of a GET."""
    text = seen.body.decode() if seen.method == "POST" else urllib.parse.urlsplit(seen.target).query
    return dict(urllib.parse.parse_qsl(text))


def searx_json(*items: tuple[str, str | None]) -> Callable[[Seen], OriginReply]:
    """SearXNG's recorded answer with one result per (url, publishedDate), best first."""
    document = json.loads(load("searxng_results.json"))
    template = document["results"][0]
    document["results"] = [
        {**template, "url": url, "title": url, "publishedDate": date, "score": 10.0 - n}
        for n, (url, date) in enumerate(items)
    ]
    body = json.dumps(document).encode()
    return lambda seen: OriginReply(200, [("content-type", "application/json")], body)


# --- fields of a hit ---------------------------------------------------------------------


async def test_one_query_reply_carries_published_extra_snippets_favicon_and_lang(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    origin.routes["/brave"] = serve("brave_web_search.json")
    config = with_search(web_config, origin, order=["brave"])
    reply = await ask(config, dns, trust, ("QUERY", "neo4j"), ("MAX_RESULTS", "2"))
    docs, repo = (
        "https://neo4j.com/docs/python-manual/current/",
        "https://github.com/neo4j/neo4j-python-driver",
    )
    new = {"PUBLISHED", "EXTRA_SNIPPET", "FAVICON", "LANG", "SOURCES"}
    assert [field for field in reply.fields if field[0] in new] == [
        ("PUBLISHED", f"{docs} 2024-05-02T09:12:44Z"),
        ("EXTRA_SNIPPET", f'{docs} "Install the driver with pip install neo4j."'),
        ("EXTRA_SNIPPET", f'{docs} "The driver supports both synchronous and async sessions."'),
        ("FAVICON", f"{docs} https://imgs.search.brave.com/def/favicon.png"),
        ("LANG", f"{docs} en"),
        ("PUBLISHED", f"{repo} 2024-06-11T17:03:10Z"),
        ("LANG", f"{repo} en"),
    ]


async def test_several_queries_carry_the_fields_as_json_attributes_of_hit(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    origin.routes["/brave"] = serve("brave_web_search.json")
    config = with_search(web_config, origin, order=["brave"])
    reply = await ask(
        config, dns, trust, ("QUERY", "neo4j"), ("QUERY", "neo4j driver"), ("MAX_RESULTS", "1")
    )
    assert reply.get_all("HIT")[0] == (
        "1 https://neo4j.com/docs/python-manual/current/ score:1.0 "
        'published:"2024-05-02T09:12:44Z" extra_snippets:["Install the driver with pip install '
        'neo4j.", "The driver supports both synchronous and async sessions."] '
        'favicon:"https://imgs.search.brave.com/def/favicon.png" lang:"en" '
        '"Neo4j Python Driver Manual - Neo4j Docs"'
    )


async def test_the_fields_survive_the_cache(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    origin.routes["/brave"] = serve("brave_web_search.json")
    config = with_search(web_config, origin, order=["brave"])
    fields = (("QUERY", "neo4j"), ("MAX_RESULTS", "2"))
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            fresh = await run(dispatcher, "search", "URL_REFS", *fields)
            cached = await run(dispatcher, "search", "URL_REFS", *fields)
    assert cached.get("CACHED") == "true"
    assert [f for f in cached.fields if f[0] != "CACHED"] == [
        f for f in fresh.fields if f[0] != "CACHED"
    ]


# --- filters enforced on what an ignoring backend answers --------------------------------


@pytest.mark.parametrize("backend", ["brave", "duckduckgo", "searxng"])
async def test_site_is_sent_to_the_backend_and_enforced_on_its_results(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext, backend: str
) -> None:
    path, name = ROUTES[backend]
    origin.routes[path] = serve(name)  # answers the same whatever it is asked
    site = {"brave": "github.com", "duckduckgo": "readthedocs.io", "searxng": "wikipedia.org"}
    config = with_search(web_config, origin, order=[backend])
    reply = await ask(config, dns, trust, ("QUERY", "q"), ("SITE", site[backend]))
    (seen,) = origin.requests
    assert sent(seen)["q"] == f"q site:{site[backend]}"
    hosts = [
        urllib.parse.urlsplit(u.removeprefix("url:")).hostname or ""
        for u in (reply.get("DATA") or "").split(",")
    ]
    assert hosts
    assert all(h == site[backend] or h.endswith("." + site[backend]) for h in hosts)


@pytest.mark.parametrize("backend", ["brave", "duckduckgo", "searxng"])
async def test_exclude_site_is_sent_and_enforced(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext, backend: str
) -> None:
    path, name = ROUTES[backend]
    origin.routes[path] = serve(name)
    config = with_search(web_config, origin, order=[backend])
    reply = await ask(
        config,
        dns,
        trust,
        ("QUERY", "q"),
        ("EXCLUDE_SITE", "vorpus.org"),
        ("EXCLUDE_SITE", "neo4j.com"),
    )
    (seen,) = origin.requests
    assert sent(seen)["q"] == "q -site:vorpus.org -site:neo4j.com"
    data = reply.get("DATA") or ""
    assert "vorpus.org" not in data
    assert "neo4j.com" not in data
    assert data != "none"


@pytest.mark.parametrize(
    ("undated", "data"),
    [
        ("drop", "url:https://github.com/neo4j/neo4j-python-driver"),
        (
            "keep",
            "url:https://github.com/neo4j/neo4j-python-driver,"
            "url:https://neo4j.com/developer/python/,"
            "url:https://stackoverflow.com/questions/tagged/neo4j-python-driver,"
            "url:https://pypi.org/project/py2neo/",
        ),
    ],
)
async def test_brave_date_range_is_enforced_on_page_age_and_undated_hits_follow_undated(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    undated: str,
    data: str,
) -> None:
    origin.routes["/brave"] = serve("brave_web_search.json")  # docs: 2024-05-02, github 06-11
    config = with_search(web_config, origin, order=["brave"])
    reply = await ask(
        config,
        dns,
        trust,
        ("QUERY", "q"),
        ("AFTER", "2024-06-01"),
        ("BEFORE", "2024-06-30"),
        ("UNDATED", undated),
        ("MAX_RESULTS", "4"),
    )
    (seen,) = origin.requests
    assert sent(seen)["freshness"] == "2024-06-01to2024-06-30"
    assert reply.get("DATA") == data


async def test_searxng_range_asks_the_widened_time_range_and_keeps_only_dated_hits_in_it(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    origin.routes["/searx/search"] = searx_json(
        ("https://old.test/", "2019-12-31T23:00:00"),
        ("https://in.test/", "2020-01-01T00:00:00"),
        ("https://zoned.test/", "2020-03-01T23:30:00-02:00"),  # 03-02 in UTC: out
        ("https://undated.test/", None),
    )
    config = with_search(web_config, origin, order=["searxng"])
    reply = await ask(
        config,
        dns,
        trust,
        ("QUERY", "q"),
        ("AFTER", "2020-01-01"),
        ("BEFORE", "2020-03-01"),
        ("UNDATED", "drop"),
    )
    assert reply.get("DATA") == "url:https://in.test/"
    assert reply.get_all("PUBLISHED") == ["https://in.test/ 2020-01-01"]
    (seen,) = origin.requests
    assert "time_range" not in sent(seen)  # 2020 is more than a year ago: no time_range covers it


async def test_duckduckgo_range_goes_as_df_and_is_enforced_on_the_dates_its_page_shows(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    origin.routes["/ddg/html/"] = serve("ddg_results.html")  # vorpus: 2018-04-25, others none
    config = with_search(web_config, origin, order=["duckduckgo"])
    reply = await ask(
        config, dns, trust, ("QUERY", "q"), ("BEFORE", "2018-12-31"), ("UNDATED", "drop")
    )
    (seen,) = origin.requests
    assert sent(seen)["df"] == "1990-01-01..2018-12-31"
    assert reply.get("DATA") == (
        "url:https://vorpus.org/blog/notes-on-structured-concurrency-or-go-statement-considered-harmful/"
    )


async def test_country_and_lang_reach_brave(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    origin.routes["/brave"] = serve("brave_web_search.json")
    config = with_search(web_config, origin, order=["brave"])
    reply = await ask(config, dns, trust, ("QUERY", "q"), ("COUNTRY", "DE"), ("LANG", "en"))
    (seen,) = origin.requests
    assert (sent(seen)["country"], sent(seen)["search_lang"]) == ("de", "en")
    assert reply.status is Status.OK


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("COUNTRY", "zz", "COUNTRY"),
        ("COUNTRY", "usa", "COUNTRY"),
        ("LANG", "english!", "LANG"),
        ("SITE", "https://python.org/", "SITE"),
        ("SITE", "localhost", "SITE"),
        ("EXCLUDE_SITE", "a b.com", "EXCLUDE_SITE"),
        ("AFTER", "2024-02-30", "AFTER"),
        ("AFTER", "yesterday", "AFTER"),
        ("BEFORE", "20240101", "BEFORE"),
        ("VERTICAL", "maps", "VERTICAL"),
        ("UNDATED", "maybe", "UNDATED"),
        ("MODE", "merge", "MODE"),
        ("MAX_PER_DOMAIN", "0", "MAX_PER_DOMAIN"),
        ("MAX_PER_DOMAIN", "11", "MAX_PER_DOMAIN"),
    ],
)
async def test_bad_filter_values_answer_invalid_field_naming_the_field(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    field: str,
    value: str,
    named: str,
) -> None:
    config = with_search(web_config, origin, order=["brave"])
    reply = await ask(config, dns, trust, ("QUERY", "q"), (field, value))
    assert reply.status is Status.FAIL
    error = reply.get("ERROR") or ""
    assert error.startswith("invalid_field:")
    assert named in error
    assert origin.requests == []


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ((("AFTER", "2024-06-02"), ("BEFORE", "2024-06-01")), "BEFORE"),
        ((("AFTER", "2024-06-02"), ("FRESHNESS", "pw")), "FRESHNESS"),
        ((("AFTER", "2200-01-01"),), "AFTER"),
    ],
)
async def test_contradicting_date_fields_answer_invalid_field(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    fields: tuple[tuple[str, str], ...],
    named: str,
) -> None:
    config = with_search(web_config, origin, order=["brave"])
    reply = await ask(config, dns, trust, ("QUERY", "q"), *fields)
    assert (reply.get("ERROR") or "").startswith("invalid_field:")
    assert named in (reply.get("ERROR") or "")


@pytest.mark.parametrize(("count", "ok"), [(MAX_SITES, True), (MAX_SITES + 1, False)])
async def test_site_may_repeat_up_to_its_cap(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    count: int,
    ok: bool,
) -> None:
    origin.routes["/brave"] = serve("brave_web_search.json")
    config = with_search(web_config, origin, order=["brave"])
    sites = [("SITE", f"s{n}.neo4j.com") for n in range(count - 1)] + [("SITE", "github.com")]
    reply = await ask(config, dns, trust, ("QUERY", "q"), *sites)
    if ok:
        assert reply.get("DATA") == "url:https://github.com/neo4j/neo4j-python-driver"
    else:
        assert (reply.get("ERROR") or "").startswith("invalid_field:")
        assert "SITE" in (reply.get("ERROR") or "")


# --- verticals ---------------------------------------------------------------------------


async def test_news_skips_a_backend_without_it_and_brave_answers_from_its_news_endpoint(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    origin.routes["/brave/news"] = serve("brave_news_search.json")
    config = with_search(web_config, origin, order=["duckduckgo", "brave"])
    reply = await ask(config, dns, trust, ("QUERY", "neo4j release"), ("VERTICAL", "news"))
    assert reply.status is Status.PARTIAL
    assert reply.get("DATA") == (
        "url:https://neo4j.com/release-notes/database/neo4j-5/,"
        "url:https://www.theregister.com/2024/05/29/graph_databases/"
    )
    assert reply.get_all("BACKEND_ERROR") == ["duckduckgo:not_available duckduckgo has no news"]
    assert [urllib.parse.urlsplit(seen.target).path for seen in origin.requests] == ["/brave/news"]


async def test_searxng_answers_videos_from_its_category(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    origin.routes["/searx/search"] = searx_json(("https://videos.test/v", None))
    config = with_search(web_config, origin, order=["searxng"])
    reply = await ask(
        config, dns, trust, ("QUERY", "q"), ("VERTICAL", "videos"), ("MAX_RESULTS", "1")
    )
    (seen,) = origin.requests
    assert sent(seen)["categories"] == "videos"
    assert reply.get("DATA") == "url:https://videos.test/v"


async def test_no_backend_with_the_vertical_fails_not_available(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    config = with_search(web_config, origin, order=["duckduckgo"])
    reply = await ask(config, dns, trust, ("QUERY", "q"), ("VERTICAL", "images"))
    assert reply.fields == (
        ("SCOPE", "[]"),
        ("DATA", "none"),
        ("ERROR", "not_available:duckduckgo has no images"),
        ("BACKEND_ERROR", "duckduckgo:not_available duckduckgo has no images"),
    )
    assert origin.requests == []


# --- ranking: one hit per domain, fused backends -----------------------------------------

BRAVE_DATA = [
    "https://neo4j.com/docs/python-manual/current/",
    "https://github.com/neo4j/neo4j-python-driver",
    "https://neo4j.com/developer/python/",
    "https://stackoverflow.com/questions/tagged/neo4j-python-driver",
    "https://pypi.org/project/py2neo/",
]


@pytest.mark.parametrize(
    ("fields", "setting", "order"),
    [
        ((), 1, [0, 1, 3, 4, 2]),  # one per domain, then neo4j.com fills the last place
        ((("MAX_PER_DOMAIN", "2"),), 1, [0, 1, 2, 3, 4]),
        ((), 2, [0, 1, 2, 3, 4]),  # web.search.max_per_domain
        ((("MAX_PER_DOMAIN", "1"),), 2, [0, 1, 3, 4, 2]),  # the task's field wins
    ],
)
async def test_max_per_domain_caps_a_domain_before_the_others_have_theirs(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    fields: tuple[tuple[str, str], ...],
    setting: int,
    order: list[int],
) -> None:
    origin.routes["/brave"] = serve("brave_web_search.json")
    config = with_search(web_config, origin, order=["brave"], max_per_domain=setting)
    reply = await ask(config, dns, trust, ("QUERY", "q"), *fields)
    assert reply.get("DATA") == ",".join(f"url:{BRAVE_DATA[n]}" for n in order)


@pytest.mark.parametrize(("cap", "ok"), [("10", True), ("11", False)])
async def test_max_per_domain_is_capped_at_max_results(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    cap: str,
    ok: bool,
) -> None:
    origin.routes["/brave"] = serve("brave_web_search.json")
    config = with_search(web_config, origin, order=["brave"])
    reply = await ask(config, dns, trust, ("QUERY", "q"), ("MAX_PER_DOMAIN", cap))
    assert (reply.status is Status.OK) is ok
    if not ok:
        assert (reply.get("ERROR") or "").startswith("invalid_field:MAX_PER_DOMAIN")


async def test_fuse_asks_every_backend_and_names_each_hits_sources(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    origin.routes["/brave"] = serve("brave_web_search.json")
    origin.routes["/searx/search"] = searx_json(
        ("https://www.github.com/neo4j/neo4j-python-driver/?utm_source=searx", "2024-06-11"),
        ("https://graphacademy.neo4j.com/", None),
    )
    config = with_search(web_config, origin, order=["brave", "searxng"])
    reply = await ask(config, dns, trust, ("QUERY", "q"), ("MODE", "fuse"), ("MAX_RESULTS", "3"))
    assert reply.status is Status.OK
    assert reply.get("BACKEND") == "brave,searxng"
    assert reply.get("DATA") == (
        # 2nd in brave, 1st in searxng: shown as searxng, which ranked it best, spelt it
        "url:https://www.github.com/neo4j/neo4j-python-driver/,"
        "url:https://neo4j.com/docs/python-manual/current/,"
        "url:https://graphacademy.neo4j.com/"
    )
    assert reply.get_all("SOURCES") == [
        "https://www.github.com/neo4j/neo4j-python-driver/ brave,searxng",
        "https://neo4j.com/docs/python-manual/current/ brave",
        "https://graphacademy.neo4j.com/ searxng",
    ]
    assert reply.get_all("SCORE")[0] == (
        f"https://www.github.com/neo4j/neo4j-python-driver/ {round(61 / 62 + 1, 3)}"
    )
    assert sorted(urllib.parse.urlsplit(s.target).path for s in origin.requests) == [
        "/brave",
        "/searx/search",
    ]


async def test_fuse_drops_a_backend_out_of_quota_and_says_so(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    origin.routes["/brave"] = serve("brave_web_search.json")
    origin.routes["/searx/search"] = searx_json(
        ("https://one.test/", None), ("https://two.test/", None)
    )
    config = with_search(
        web_config, origin, order=["brave", "searxng"], mode="fuse", brave={"monthly_quota": 1}
    )
    fields = (("QUERY", "q"), ("MAX_RESULTS", "2"), ("NO_CACHE", "true"))
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            first = await run(dispatcher, "search", "URL_REFS", *fields)
            second = await run(dispatcher, "search", "URL_REFS", *fields)
    assert first.get("BACKEND") == "brave,searxng"
    assert first.get_all("BACKEND_ERROR") == []
    assert second.status is Status.OK
    assert second.get("BACKEND") == "searxng"
    assert second.get("DATA") == "url:https://one.test/,url:https://two.test/"
    assert second.get_all("BACKEND_ERROR") == ["brave:rate_limit_exceeded monthly quota of 1 spent"]
    assert [urllib.parse.urlsplit(s.target).path for s in origin.requests].count("/brave") == 1


# --- prefetch per task -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prefetch", "setting", "loaded", "prefetched"),
    [("1", 0, ["/page0"], "1"), ("0", 2, [], None), (None, 2, ["/page0", "/page1"], "2")],
)
async def test_prefetch_field_overrides_the_setting_and_the_reply_says_how_many(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    nursery: trio.Nursery,
    prefetch: str | None,
    setting: int,
    loaded: list[str],
    prefetched: str | None,
) -> None:
    html = [("content-type", "text/html")]
    for n in range(3):
        origin.routes[f"/page{n}"] = lambda seen: OriginReply(200, html, b"<p>tide</p>")
    origin.routes["/searx/search"] = searx_json(
        *((origin.url("origin.test", f"/page{n}"), None) for n in range(3))
    )
    config = with_search(web_config, origin, order=["searxng"], prefetch_top=setting)
    fields = [("QUERY", "q"), ("MAX_RESULTS", "3")]
    fields += [("PREFETCH", prefetch)] if prefetch is not None else []
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, web):
        await nursery.start(web.prefetch.serve, DispatchPort(dispatcher))  # WEB's background
        with trio.fail_after(WAIT_S):
            reply = await run(dispatcher, "search", "URL_REFS", *fields)
            await web.prefetch.wait_idle()
    assert reply.get("PREFETCHED") == prefetched
    assert sorted(p for p in origin.paths() if p.startswith("/page")) == loaded


@pytest.mark.parametrize(("top", "ok"), [("10", True), ("11", False)])
async def test_prefetch_is_capped_at_max_results(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    top: str,
    ok: bool,
) -> None:
    origin.routes["/brave"] = serve("brave_web_search.json")
    config = with_search(web_config, origin, order=["brave"])
    reply = await ask(config, dns, trust, ("QUERY", "q"), ("PREFETCH", top))
    if ok:  # no background task here: nothing could be queued, and the reply says so
        assert reply.get("PREFETCHED") == "0"
    else:
        assert (reply.get("ERROR") or "").startswith("invalid_field:PREFETCH")


async def test_a_prefetched_page_is_held_under_its_file_key_with_its_summary(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    nursery: trio.Nursery,
) -> None:
    """What a default fetch computes is ready before the fetch (bench/prefetch.py): the
    fileKey's snapshot and, for a page longer than one reply, its SUMMARY."""
    long_page = b"<html><title>t</title><body>" + b"<p>The tide turns twice a day.</p>" * 400
    origin.routes["/long"] = lambda seen: OriginReply(
        200, [("content-type", "text/html")], long_page
    )
    origin.routes["/searx/search"] = searx_json((origin.url("origin.test", "/long"), None))
    config = with_search(web_config, origin, order=["searxng"])
    fields = (("QUERY", "q"), ("MAX_RESULTS", "1"), ("PREFETCH", "1"))
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, web):
        await nursery.start(web.prefetch.serve, DispatchPort(dispatcher))
        with trio.fail_after(WAIT_S):
            await run(dispatcher, "search", "URL_REFS", *fields)
            await web.prefetch.wait_idle()
        page = await load_page(web, origin.url("origin.test", "/long"), deadline=math.inf)
        key = file_key(page)
        assert file_key(await held(web, key)) == key
        assert await web.cache.get(SUMMARY_NAMESPACE, f"{key}:text")
