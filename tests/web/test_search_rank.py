"""The filters held against hits, the per-domain cap and reciprocal rank fusion: sans I/O."""

from __future__ import annotations

import datetime

import pytest

from specialists.web.search.base import Hit, SearchQuery
from specialists.web.search.filters import admitted
from specialists.web.search.rank import clean_url, dedupe_key, fuse, pick, unamp


def hit(url: str, published: str | None = None, lang: str | None = None) -> Hit:
    return Hit(url, url, "", published=published, lang=lang)


def urls(hits: list[Hit]) -> list[str]:
    return [one.url for one in hits]


# --- filters -----------------------------------------------------------------------------


def test_site_keeps_the_host_and_its_subdomains_only() -> None:
    query = SearchQuery("q", 5, sites=("python.org",))
    hits = [
        hit("https://python.org/a"),
        hit("https://docs.python.org/b"),
        hit("https://www.python.org/c"),
        hit("https://notpython.org/d"),
        hit("https://python.org.evil.test/e"),
    ]
    assert urls(admitted(query, hits)) == [
        "https://python.org/a",
        "https://docs.python.org/b",
        "https://www.python.org/c",
    ]


def test_exclude_site_drops_the_host_and_its_subdomains() -> None:
    query = SearchQuery("q", 5, exclude_sites=("pinterest.com",))
    hits = [hit("https://pinterest.com/x"), hit("https://de.pinterest.com/y"), hit("https://a.b/")]
    assert urls(admitted(query, hits)) == ["https://a.b/"]


@pytest.mark.parametrize(("undated", "kept"), [("keep", 3), ("drop", 2)])
def test_date_range_is_inclusive_and_undated_hits_follow_undated(undated: str, kept: int) -> None:
    query = SearchQuery(
        "q", 5, after=datetime.date(2024, 1, 1), before=datetime.date(2024, 6, 30), undated=undated
    )
    hits = [
        hit("https://a.test/", "2024-01-01"),
        hit("https://b.test/", "2024-06-30T23:59:59Z"),
        hit("https://c.test/", "2023-12-31T23:59:59Z"),
        hit("https://d.test/", "2024-07-01"),
        hit("https://e.test/"),
    ]
    assert urls(admitted(query, hits)) == urls(hits[:2]) + (
        ["https://e.test/"] if kept == 3 else []
    )


def test_lang_drops_hits_named_in_another_language_and_keeps_unnamed_ones() -> None:
    query = SearchQuery("q", 5, lang="de")
    hits = [
        hit("https://a.test/", lang="de"),
        hit("https://b.test/", lang="en"),
        hit("https://c.test/"),
    ]
    assert urls(admitted(query, hits)) == ["https://a.test/", "https://c.test/"]


# --- per-domain cap ----------------------------------------------------------------------


def test_max_per_domain_caps_a_domain_before_others_and_fills_in_after() -> None:
    hits = [hit(f"https://a.test/{n}") for n in range(4)] + [hit("https://b.test/")]
    assert urls(pick(hits, 3, 1)) == ["https://a.test/0", "https://b.test/", "https://a.test/1"]
    assert urls(pick(hits, 3, 2)) == ["https://a.test/0", "https://a.test/1", "https://b.test/"]
    assert urls(pick(hits, 5, 2)) == [
        "https://a.test/0",
        "https://a.test/1",
        "https://b.test/",
        "https://a.test/2",
        "https://a.test/3",
    ]


# --- URL normalisation and fusion --------------------------------------------------------


def test_tracking_parameters_are_cleaned_from_urls() -> None:
    assert clean_url("https://a.test/p?id=3&fbclid=x&gclid=y&utm_source=z&msclkid=w") == (
        "https://a.test/p?id=3"
    )


@pytest.mark.parametrize(
    "amp",
    [
        "https://www.google.com/amp/s/news.test/story/",
        "https://news-test.cdn.ampproject.org/c/s/news.test/story",
        "https://amp.news.test/story",
        "https://news.test/amp/story",
        "https://news.test/story/amp/",
        "https://news.test/story?amp=1",
        "https://www.news.test/story/",
    ],
)
def test_amp_and_www_forms_of_a_page_are_the_same_page(amp: str) -> None:
    assert dedupe_key(unamp(amp)) == dedupe_key("https://news.test/story")


def test_fusion_ranks_by_reciprocal_rank_and_names_the_sources() -> None:
    brave = [hit("https://a.test/x?utm_source=b"), hit("https://b.test/"), hit("https://c.test/")]
    searx = [hit("https://www.b.test"), hit("https://d.test/"), hit("https://a.test/x/")]
    fused = fuse([("brave", brave), ("searxng", searx)])
    assert [(one.url, one.sources, one.score) for one in fused] == [
        # b: 1/62 + 1/61, shown as the list that ranked it best spelt it
        ("https://www.b.test/", ("brave", "searxng"), round(61 * (1 / 62 + 1 / 61), 6)),
        ("https://a.test/x", ("brave", "searxng"), round(61 * (1 / 61 + 1 / 63), 6)),
        ("https://d.test/", ("searxng",), round(61 / 62, 6)),
        ("https://c.test/", ("brave",), round(61 / 63, 6)),
    ]


def test_fusion_fills_a_hits_missing_fields_from_the_other_lists() -> None:
    brave = [Hit("https://a.test/", "A", "", lang="en")]
    searx = [Hit("https://a.test", "A2", "", published="2024-01-01")]
    (one,) = fuse([("brave", brave), ("searxng", searx)])
    assert (one.title, one.lang, one.published) == ("A", "en", "2024-01-01")
