"""The fields of a hit each backend reads from its recorded answers (PUBLISHED, EXTRA_SNIPPET,
FAVICON, LANG), dates in each backend's own spelling, and the filters each backend is sent in
its own syntax: all sans I/O."""

from __future__ import annotations

import datetime
import json
import urllib.parse

import pytest

from specialists.web.search import brave, dates, duckduckgo, perplexity, searxng
from specialists.web.search.base import (
    MAX_EXTRA_SNIPPETS,
    MAX_ICON_URL_CHARS,
    SearchQuery,
    https_url,
)
from tests.web.fixtures import load
from tests.web.test_search_backends import answer, query_of

RANGED = SearchQuery(
    "trio",
    5,
    sites=("python.org", "github.com"),
    exclude_sites=("pinterest.com",),
    after=datetime.date(2024, 1, 1),
    before=datetime.date(2024, 6, 30),
    country="de",
    lang="de",
    today=datetime.date(2024, 7, 15),
    widened="py",
)


@pytest.mark.parametrize(
    ("value", "published"),
    [
        ("2024-05-02T09:12:44", "2024-05-02T09:12:44Z"),  # Brave page_age: no zone, UTC
        ("May 2, 2024", "2024-05-02"),  # Brave age
        ("2018-04-25T00:00:00", "2018-04-25"),  # SearXNG publishedDate, a day
        ("2024-05-02T23:30:00+02:00", "2024-05-02T21:30:00Z"),  # SearXNG with a zone
        ("2024-05-02 09:12:44", "2024-05-02T09:12:44Z"),
        ("2018-04-25T00:00:00.0000000", "2018-04-25"),  # DuckDuckGo's seven digits
        ("2024-05-02", "2024-05-02"),  # Perplexity date
        ("2024-05-02T01:00:00Z", "2024-05-02T01:00:00Z"),
        ("3 days ago", None),  # relative: needs a clock
        ("0001-01-01T00:00:00", None),  # a placeholder, not a date
        ("2024-13-45", None),
        ("", None),
        (None, None),
        (20240502, None),
    ],
)
def test_each_backends_date_spelling_becomes_utc_iso_8601(
    value: object, published: str | None
) -> None:
    assert dates.published(value) == published


def test_brave_hit_carries_published_extra_snippets_favicon_and_lang() -> None:
    first, second = brave.parse(answer("brave_web_search.json"))[:2]
    assert (first.published, first.favicon, first.lang) == (
        "2024-05-02T09:12:44Z",
        "https://imgs.search.brave.com/def/favicon.png",
        "en",
    )
    assert first.extra_snippets == (
        "Install the driver with pip install neo4j.",
        "The driver supports both synchronous and async sessions.",
    )
    # No page_age nor age: no date; an empty favicon falls back to none.
    assert (second.published, second.favicon, second.extra_snippets) == (None, None, ())


def test_brave_extra_snippets_are_bounded_in_number_and_length() -> None:
    document = json.loads(load_brave())
    document["web"]["results"][0]["extra_snippets"] = ["x" * 1000] * (MAX_EXTRA_SNIPPETS + 1)
    (hit, *_) = brave.parse(answer("brave_web_search.json", body=json.dumps(document).encode()))
    assert len(hit.extra_snippets) == MAX_EXTRA_SNIPPETS
    assert all(len(text) <= 300 for text in hit.extra_snippets)


def test_brave_favicon_must_be_https() -> None:
    document = json.loads(load_brave())
    document["web"]["results"][0]["meta_url"]["favicon"] = "http://plain.test/icon.png"
    document["web"]["results"][0]["profile"]["img"] = "javascript:alert(1)"
    (hit, *_) = brave.parse(answer("brave_web_search.json", body=json.dumps(document).encode()))
    assert hit.favicon is None


def test_brave_news_answer_reads_its_results_and_age() -> None:
    hits = brave.parse(answer("brave_news_search.json"))
    assert [(hit.url, hit.published) for hit in hits] == [
        ("https://neo4j.com/release-notes/database/neo4j-5/", "2024-05-30T14:05:00Z"),
        ("https://www.theregister.com/2024/05/29/graph_databases/", "2024-05-29"),
    ]
    assert hits[0].thumbnail == "https://imgs.search.brave.com/n/thumb.jpg"
    assert hits[0].extra_snippets == ("Vector indexes now support cosine similarity.",)


def test_searxng_hit_carries_its_published_date() -> None:
    hits = searxng.parse(answer("searxng_results.json"))
    assert [(hit.url.split("/")[2], hit.published) for hit in hits] == [
        ("vorpus.org", "2018-04-25"),
        ("en.wikipedia.org", None),
        ("trio.readthedocs.io", None),
    ]


def test_duckduckgo_hit_carries_the_date_and_icon_its_page_shows() -> None:
    hits = duckduckgo.parse(answer("ddg_results.html"))
    assert [(hit.published, hit.favicon) for hit in hits] == [
        (None, "https://external-content.duckduckgo.com/ip3/trio.readthedocs.io.ico"),
        ("2018-04-25", None),
        (None, None),
        (None, None),
    ]


def test_perplexity_hit_carries_its_date() -> None:
    hits = perplexity.parse(answer("perplexity_search.json"))
    assert [hit.published for hit in hits] == ["2018-04-25", None]


# --- the filters in each backend's own syntax --------------------------------------------


def test_brave_gets_site_operators_a_date_range_country_and_language() -> None:
    params = query_of(brave.build(RANGED, brave.DEFAULT_BASE_URL, "k").url)
    assert params["q"] == "trio (site:python.org OR site:github.com) -site:pinterest.com"
    assert params["freshness"] == "2024-01-01to2024-06-30"
    assert (params["country"], params["search_lang"]) == ("de", "de")


def test_brave_open_range_ends_today() -> None:
    query = SearchQuery("t", 5, after=datetime.date(2024, 1, 1), today=datetime.date(2024, 7, 15))
    assert query_of(brave.build(query, brave.DEFAULT_BASE_URL, "k").url)["freshness"] == (
        "2024-01-01to2024-07-15"
    )


@pytest.mark.parametrize("vertical", ["news", "images", "videos"])
def test_brave_verticals_go_to_their_own_endpoints(vertical: str) -> None:
    query = SearchQuery("t", 5, vertical=vertical)
    url = brave.build(query, brave.DEFAULT_BASE_URL, "k").url
    assert urllib.parse.urlsplit(url).path == f"/res/v1/{vertical}/search"
    assert "result_filter" not in query_of(url)


def test_duckduckgo_gets_site_operators_a_df_range_and_a_region() -> None:
    request = duckduckgo.build(RANGED, duckduckgo.DEFAULT_BASE_URL, None)
    assert request.content is not None
    form = dict(urllib.parse.parse_qsl(request.content.decode(), keep_blank_values=True))
    assert form["q"] == "trio (site:python.org OR site:github.com) -site:pinterest.com"
    assert (form["df"], form["kl"]) == ("2024-01-01..2024-06-30", "de-de")


def test_duckduckgo_spells_britain_uk() -> None:
    request = duckduckgo.build(SearchQuery("t", 5, country="gb"), "https://d.test/", None)
    assert request.content is not None
    assert dict(urllib.parse.parse_qsl(request.content.decode()))["kl"] == "uk-en"


def test_searxng_gets_site_operators_the_widened_time_range_a_locale_and_category() -> None:
    query = SearchQuery(**{**RANGED.__dict__, "vertical": "news"})
    params = query_of(searxng.build(query, "https://searx.test/", None).url)
    assert params["q"] == "trio (site:python.org OR site:github.com) -site:pinterest.com"
    assert (params["time_range"], params["language"], params["categories"]) == (
        "year",
        "de-DE",
        "news",
    )


def test_perplexity_gets_its_domain_filter_dates_country_and_language() -> None:
    request = perplexity.build(RANGED, perplexity.DEFAULT_BASE_URL, "k")
    assert request.content is not None
    body = json.loads(request.content)
    assert body["search_domain_filter"] == ["python.org", "github.com", "-pinterest.com"]
    assert (body["search_after_date_filter"], body["search_before_date_filter"]) == (
        "1/1/2024",
        "6/30/2024",
    )
    assert (body["country"], body["search_language_filter"]) == ("DE", ["de"])
    assert "search_recency_filter" not in body


def load_brave() -> bytes:
    return answer("brave_web_search.json").body


@pytest.mark.parametrize(
    "icon",
    [
        "https://img.test/a.png\nSTATUS OK",  # would end the reply line
        "https://img.test/a b.png",
        'https://img.test/"a.png',
        "https://img.test/\x00.png",
        "https://img.test/" + "a" * 2048,
    ],
)
def test_icon_and_thumbnail_urls_that_would_break_a_reply_line_are_dropped(icon: str) -> None:
    document = json.loads(load("searxng_results.json"))
    document["results"][0] |= {"thumbnail": icon, "favicon": icon}
    brave_doc = json.loads(load_brave())
    brave_doc["web"]["results"][0]["meta_url"]["favicon"] = icon
    brave_doc["web"]["results"][0]["thumbnail"] = {"src": icon}
    hits = searxng.parse(answer("searxng_results.json", body=json.dumps(document).encode()))
    (first, *_) = brave.parse(answer("brave_web_search.json", body=json.dumps(brave_doc).encode()))
    assert [(hit.thumbnail, hit.favicon) for hit in hits] == [(None, None)] * 3
    assert first.thumbnail is None
    assert first.favicon == "https://imgs.search.brave.com/abc/neo4j.png"  # profile.img instead


@pytest.mark.parametrize(
    ("length", "kept"), [(MAX_ICON_URL_CHARS, True), (MAX_ICON_URL_CHARS + 1, False)]
)
def test_an_icon_url_may_be_up_to_its_cap(length: int, kept: bool) -> None:
    url = "https://img.test/" + "a" * (length - len("https://img.test/"))
    assert (https_url(url) == url) is kept
