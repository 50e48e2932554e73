"""Each search backend, sans I/O: the request it builds and what it reads from recorded
answers; the ranking, the circuit breaker and the upstream back-off headers."""

from __future__ import annotations

import email.utils
import urllib.parse

import httpx
import pytest
import trio
import trio.testing

from csp_web.infra.ratelimit import MAX_PAUSE_S, resume_at
from csp_web.net import FetchResult
from specialists.web.search import brave, duckduckgo, searxng
from specialists.web.search.base import BackendFailure, Hit, SearchQuery, clean_text
from specialists.web.search.breaker import Breaker
from specialists.web.search.rank import clean_url, dedupe_key, domain, pick
from tests.web.fixtures import load

_TYPES = {"json": "application/json", "html": "text/html"}


def answer(name: str, status: int = 200, body: bytes | None = None) -> FetchResult:
    """A FetchResult as the guarded client returns it, from recorded file ``name``."""
    content_type = _TYPES[name.rsplit(".", 1)[-1]]
    return FetchResult(
        url="https://search.test/",
        status_code=status,
        headers=httpx.Headers({"content-type": content_type}),
        body=load(name) if body is None else body,
        content_type=content_type,
        charset="utf-8",
        redirect_chain=("https://search.test/",),
        elapsed_s=0.01,
    )


def query_of(url: str) -> dict[str, str]:
    return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))


# --- Brave -------------------------------------------------------------------------------


def test_brave_request_carries_the_key_header_and_twice_the_count() -> None:
    request = brave.build(SearchQuery("neo4j python", 5), brave.DEFAULT_BASE_URL, "k3y")
    assert request.url.startswith("https://api.search.brave.com/res/v1/web/search?")
    assert query_of(request.url) == {
        "q": "neo4j python",
        "count": "10",
        "text_decorations": "false",
        "result_filter": "web",
    }
    assert request.headers["X-Subscription-Token"] == "k3y"
    assert request.secret_headers == ("X-Subscription-Token",)


def test_brave_count_stops_at_its_maximum_of_20() -> None:
    request = brave.build(SearchQuery("q", 10), brave.DEFAULT_BASE_URL, "k")
    assert query_of(request.url)["count"] == "20"


def test_brave_parses_its_recorded_web_results_as_plain_text() -> None:
    hits = brave.parse(answer("brave_web_search.json"))
    assert len(hits) == 7
    assert hits[0] == Hit(
        "https://neo4j.com/docs/python-manual/current/",
        "Neo4j Python Driver Manual - Neo4j Docs",
        "The official Neo4j driver for Python supports Neo4j 5 and 4.4 & connects over the "
        "Bolt protocol.",
        published="2024-05-02T09:12:44Z",
        extra_snippets=(
            "Install the driver with pip install neo4j.",
            "The driver supports both synchronous and async sessions.",
        ),
        favicon="https://imgs.search.brave.com/def/favicon.png",
        lang="en",
    )


def test_brave_answer_without_web_section_is_no_results() -> None:
    assert brave.parse(answer("brave_no_results.json")) == []


def test_brave_error_body_names_the_failure() -> None:
    with pytest.raises(BackendFailure) as info:
        brave.parse(answer("brave_token_invalid.json", 422))
    assert info.value.reason == "subscription_token_invalid"
    assert info.value.hint == "The provided subscription token is invalid."


@pytest.mark.parametrize(
    ("status", "body"), [(200, b"<html>oops</html>"), (200, b'{"type":"other"}')]
)
def test_brave_answer_that_is_not_its_json_is_bad_response(status: int, body: bytes) -> None:
    with pytest.raises(BackendFailure) as info:
        brave.parse(answer("brave_no_results.json", status, body))
    assert info.value.reason == "bad_response"


def test_brave_error_status_without_its_json_is_http_status() -> None:
    with pytest.raises(BackendFailure) as info:
        brave.parse(answer("brave_no_results.json", 502, b"bad gateway"))
    assert info.value.reason == "http_502"


# --- DuckDuckGo --------------------------------------------------------------------------


def test_duckduckgo_request_is_the_html_form_post() -> None:
    request = duckduckgo.build(SearchQuery("trio", 5), duckduckgo.DEFAULT_BASE_URL, None)
    assert (request.method, request.url) == ("POST", "https://html.duckduckgo.com/html/")
    assert request.headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert request.content is not None
    assert dict(urllib.parse.parse_qsl(request.content.decode(), keep_blank_values=True)) == {
        "q": "trio",
        "b": "",
    }


def test_duckduckgo_parses_results_unwrapping_redirects_and_skipping_ads() -> None:
    hits = duckduckgo.parse(answer("ddg_results.html"))
    assert [hit.url for hit in hits] == [
        "https://trio.readthedocs.io/en/stable/",
        "https://vorpus.org/blog/notes-on-structured-concurrency-or-go-statement-considered-harmful/",
        "https://github.com/python-trio/trio",
        "https://trio.readthedocs.io/en/stable/reference-core.html?utm_source=ddg",
    ]
    assert hits[1].title == ("Notes on structured concurrency, or: Go statement considered harmful")
    assert hits[1].snippet == (
        "Every concurrency API needs a way to run code concurrently. Here's some examples of "
        "what that looks like using different APIs."
    )


def test_duckduckgo_no_results_page_is_an_empty_answer() -> None:
    assert duckduckgo.parse(answer("ddg_no_results.html")) == []


@pytest.mark.parametrize("status", [202, 200])
def test_duckduckgo_bot_challenge_is_a_rate_limit_failure(status: int) -> None:
    with pytest.raises(BackendFailure) as info:
        duckduckgo.parse(answer("ddg_anomaly.html", status))
    assert (info.value.reason, info.value.rate, info.value.counts) == ("anomaly_page", True, True)


def test_duckduckgo_page_without_results_or_notice_is_bad_response() -> None:
    body = b"<html><body><div id='links'>redesigned</div></body></html>"
    with pytest.raises(BackendFailure) as info:
        duckduckgo.parse(answer("ddg_no_results.html", 200, body))
    assert info.value.reason == "bad_response"


@pytest.mark.parametrize(
    ("href", "url"),
    [
        ("//duckduckgo.com/l/?uddg=https%3A%2F%2Fa.org%2Fx%3Fy%3D1&rut=ab", "https://a.org/x?y=1"),
        ("/l/?uddg=https%3A%2F%2Fb.org%2F", "https://b.org/"),
        ("https://c.org/page", "https://c.org/page"),
        ("https://duckduckgo.com/y.js?ad_domain=x.com", None),
        ("//duckduckgo.com/l/?rut=only", None),
        ("javascript:alert(1)", None),
    ],
)
def test_duckduckgo_links_unwrap_to_the_real_url(href: str, url: str | None) -> None:
    assert duckduckgo.unwrap(href) == url


# --- SearXNG -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "endpoint"),
    [
        ("https://searx.test/", "https://searx.test/search"),
        ("https://searx.test", "https://searx.test/search"),
        ("https://host.test/searx", "https://host.test/searx/search"),
        ("https://searx.test/search", "https://searx.test/search"),
    ],
)
def test_searxng_endpoint_is_search_under_the_instance(base: str, endpoint: str) -> None:
    assert searxng.endpoint(base) == endpoint


def test_searxng_request_asks_for_json() -> None:
    request = searxng.build(SearchQuery("trio", 5), "https://searx.test/", None)
    assert request.url.startswith("https://searx.test/search?")
    assert query_of(request.url) == {"q": "trio", "format": "json", "pageno": "1"}


def test_searxng_parses_results_best_score_first() -> None:
    hits = searxng.parse(answer("searxng_results.json"))
    assert [domain(hit.url) for hit in hits] == [
        "vorpus.org",
        "en.wikipedia.org",
        "trio.readthedocs.io",
    ]
    assert hits[2].title == "Tutorial — Trio documentation"


def test_searxng_403_says_json_must_be_enabled_in_search_formats() -> None:
    with pytest.raises(BackendFailure) as info:
        searxng.parse(answer("searxng_forbidden.html", 403))
    assert info.value.reason == "json_format_disabled"
    assert "search.formats" in info.value.hint


def test_searxng_with_every_engine_failing_is_a_failure_not_an_empty_answer() -> None:
    with pytest.raises(BackendFailure) as info:
        searxng.parse(answer("searxng_engines_failed.json"))
    assert info.value.reason == "engines_unresponsive"
    assert "google" in info.value.hint


# --- FRESHNESS per backend ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("freshness", "brave_value", "ddg_value", "searxng_value"),
    [
        ("pd", "pd", "d", "day"),
        ("pw", "pw", "w", "week"),
        ("pm", "pm", "m", "month"),
        ("py", "py", "y", "year"),
    ],
)
def test_freshness_maps_to_each_backends_parameter(
    freshness: str, brave_value: str, ddg_value: str, searxng_value: str
) -> None:
    query = SearchQuery("q", 5, freshness)
    assert query_of(brave.build(query, brave.DEFAULT_BASE_URL, "k").url)["freshness"] == brave_value
    ddg = duckduckgo.build(query, duckduckgo.DEFAULT_BASE_URL, None)
    assert ddg.content is not None
    assert dict(urllib.parse.parse_qsl(ddg.content.decode()))["df"] == ddg_value
    searx = searxng.build(query, "https://searx.test/", None)
    assert query_of(searx.url)["time_range"] == searxng_value


# --- text and ranking ---------------------------------------------------------------------


def test_clean_text_keeps_300_chars_and_cuts_301_at_a_word() -> None:
    assert clean_text("a" * 300) == "a" * 300
    cut = clean_text("word " * 60 + "x")
    assert len(cut) <= 300
    assert cut.endswith("word…")


def test_clean_text_drops_tags_controls_and_collapses_space() -> None:
    assert clean_text("<b>bold</b>\n\tand&nbsp;&amp;\x85\u200bmore  ") == "bold and & more"


@pytest.mark.parametrize(
    ("url", "cleaned"),
    [
        ("https://Example.COM/a/#frag", "https://example.com/a/"),
        ("https://example.com:443/a?utm_source=x&id=3&UTM_Medium=y", "https://example.com/a?id=3"),
        ("http://example.com:8080", "http://example.com:8080/"),
        (
            "https://en.wikipedia.org/wiki/Washington,_D.C.",
            "https://en.wikipedia.org/wiki/Washington%2C_D.C.",
        ),
        ("https://a.org/a b", "https://a.org/a%20b"),
        ("https://user:pw@a.org/", "https://a.org/"),
        ("ftp://a.org/", None),
        ("https:///nohost", None),
        ("https://a.org:99999/", None),
    ],
)
def test_clean_url(url: str, cleaned: str | None) -> None:
    assert clean_url(url) == cleaned


def test_same_page_spellings_share_a_dedupe_key() -> None:
    keys = {
        dedupe_key(url)
        for url in ("https://a.org/x/", "https://a.org/x", "http://www.a.org/x", "https://a.org/x")
    }
    assert len(keys) == 1
    assert dedupe_key("https://a.org/x?b=2&a=1") == dedupe_key("https://a.org/x?a=1&b=2")


def test_pick_takes_one_per_domain_first_then_fills_in_rank_order() -> None:
    hits = [
        Hit("https://a.com/1", "", ""),
        Hit("https://a.com/1/#dup", "", ""),
        Hit("https://a.com/2", "", ""),
        Hit("https://www.a.com/3", "", ""),
        Hit("https://b.com/1", "", ""),
        Hit("https://c.com/1", "", ""),
    ]
    urls = [hit.url for hit in pick(hits, 4)]
    assert urls == ["https://a.com/1", "https://b.com/1", "https://c.com/1", "https://a.com/2"]
    assert [hit.url for hit in pick(hits, 2)] == ["https://a.com/1", "https://b.com/1"]
    assert len(pick(hits, 10)) == 5


# --- circuit breaker ---------------------------------------------------------------------


async def test_breaker_stays_closed_at_two_failures_and_opens_at_three(
    mock_clock: trio.testing.MockClock,
) -> None:
    breaker = Breaker(3, 60.0)
    for _ in range(2):
        probe = breaker.admit()
        assert probe is False
        breaker.settle(probe, False)
    assert breaker.state == "closed"
    breaker.settle(False, False)
    assert breaker.state == "open"
    assert breaker.admit() is None


async def test_breaker_success_resets_the_count_of_failures(
    mock_clock: trio.testing.MockClock,
) -> None:
    breaker = Breaker(3, 60.0)
    for ok in (False, False, True, False, False):
        breaker.settle(False, ok)
    assert breaker.state == "closed"


async def test_open_breaker_lets_one_probe_through_after_reset(
    mock_clock: trio.testing.MockClock,
) -> None:
    breaker = Breaker(1, 60.0)
    breaker.settle(False, False)
    mock_clock.jump(59.9)
    assert breaker.admit() is None
    mock_clock.jump(0.1)
    assert breaker.state == "half_open"
    assert breaker.admit() is True
    assert breaker.admit() is None  # one probe at a time
    breaker.settle(True, None)  # the probe ended without a verdict: another may go
    assert breaker.admit() is True
    breaker.settle(True, False)
    assert breaker.state == "open"
    mock_clock.jump(60)
    assert breaker.admit() is True
    breaker.settle(True, True)
    assert breaker.state == "closed"


# --- upstream back-off headers -----------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "delay"),
    [
        ({"retry-after": "30"}, 30.0),
        ({"retry-after": email.utils.formatdate(1_000_045, usegmt=True)}, 45.0),
        ({"retry-after": "7", "x-ratelimit-reset": "100"}, 7.0),
        # Brave: one value per window; the per-second window is the spent one.
        ({"x-ratelimit-reset": "1, 1419704", "x-ratelimit-remaining": "0, 958"}, 1.0),
        ({"x-ratelimit-reset": "1, 1419704", "x-ratelimit-remaining": "1, 0"}, 1419704.0),
        # GitHub: a Unix time.
        ({"x-ratelimit-reset": "1700000120", "x-ratelimit-remaining": "0"}, 120.0),
        ({"retry-after": str(10**9)}, MAX_PAUSE_S),
    ],
)
def test_resume_at_reads_retry_after_and_rate_limit_reset(
    headers: dict[str, str], delay: float
) -> None:
    wall = 1_700_000_000.0 if "1700000120" in headers.values() else 1_000_000.0
    assert resume_at(httpx.Headers(headers), now=5.0, wall=wall) == pytest.approx(5.0 + delay)


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"retry-after": "soon"},
        {"retry-after": "²".encode()},  # isdigit() took it and float() raised out of resume_at
        {"x-ratelimit-reset": "nan"},
        {"x-ratelimit-reset": "x"},
        {"x-ratelimit-reset": "١٢".encode()},  # float() reads other scripts' digits
        {"x-ratelimit-reset": "1_0"},
    ],
)
def test_resume_at_without_a_usable_header_is_none(headers: dict[str, str | bytes]) -> None:
    raw = [(k.encode(), v if isinstance(v, bytes) else v.encode()) for k, v in headers.items()]
    assert resume_at(httpx.Headers(raw), now=0.0, wall=0.0) is None
