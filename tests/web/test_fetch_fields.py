"""What fetch says beyond the content (issue 24): the page's declared DESCRIPTION, AUTHOR,
PUBLISHED, LANG and SITE_NAME; CACHED_AT and MAX_AGE; SUMMARY on a page cut at MAX_CHARS; and a
page that yields no text answering PARTIAL with ERROR empty_content (SPEC R-2), never OK."""

from __future__ import annotations

import datetime
import json
import time

import pytest

from protocol import Reply, Status
from specialists.web import WEB
from specialists.web.pages.dates import iso_date
from specialists.web.pages.fetch_fields import SUMMARY_NAMESPACE
from specialists.web.pages.filekeys import file_key
from specialists.web.pages.headmeta import read_head
from specialists.web.pages.loading import CACHE_NAMESPACE, Page
from specialists.web.pages.summarize import summarize_extractive
from specialists.web.services import WebServices
from tests.net._origin import Origin
from tests.web.conftest import DispatcherFactory
from tests.web.pages_support import ARTICLE, MARKDOWN, fetch, hits, run, serve

DECLARED = (
    '<html lang="nl-NL"><head><title>Getijden</title>'
    '<meta name="description" content="Twee keer per dag hoog water.">'
    '<meta name="author" content="Anna de Boer">'
    '<meta property="article:published_time" content="2025-10-04T09:30:00+02:00">'
    '<meta property="og:site_name" content="Kustkrant">'
    "</head><body><article><h1>Getijden</h1>"
    "<p>De Noordzee kent elke dag twee keer hoog water en twee keer laag water.</p>"
    "<p>Vissers langs de kust plannen hun tochten al eeuwen rond die getijden.</p>"
    "</article></body></html>"
)
# An app shell: the text is built by the script, the server sends none.
SHELL = (
    "<!doctype html><html><head><title>App</title>"
    '<script src="/static/app.js" defer></script></head>'
    '<body><div id="root"></div><noscript>You need to enable JavaScript.</noscript>'
    "</body></html>"
)


async def test_fetch_replies_what_the_page_declares_after_its_title(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    url = serve(origin, "/getijden", DECLARED)
    reply = await fetch(make_dispatcher(list(WEB.ops)), url)
    assert reply.status is Status.OK
    assert [(k, v) for k, v in reply.fields if k in ("TITLE", *_DECLARED_NAMES)] == [
        ("TITLE", "Getijden"),
        ("DESCRIPTION", "Twee keer per dag hoog water."),
        ("AUTHOR", "Anna de Boer"),
        ("PUBLISHED", "2025-10-04"),
        ("LANG", "nl-NL"),
        ("SITE_NAME", "Kustkrant"),
    ]


_DECLARED_NAMES = ("DESCRIPTION", "AUTHOR", "PUBLISHED", "LANG", "SITE_NAME")


def test_json_ld_author_and_date_and_og_locale_are_read_when_meta_tags_are_absent() -> None:
    html = (
        "<html><head>"
        '<meta property="og:locale" content="de_DE">'
        '<script type="application/ld+json">{"@type": "NewsArticle", "headline": "Ebbe",'
        ' "author": [{"@type": "Person", "name": "Karl Meier"}],'
        ' "datePublished": "2024-02-29"}</script></head><body></body></html>'
    )
    meta = read_head(html, base_url="https://origin.test/").meta
    assert (meta["author"], meta["published"], meta["lang"]) == (
        "Karl Meier",
        "2024-02-29",
        "de-DE",
    )


@pytest.mark.parametrize(
    ("declared", "iso"),
    [
        ("2024-03-05", "2024-03-05"),
        ("2024-03-05T23:30:00-05:00", "2024-03-05"),
        ("20240305", "2024-03-05"),
        ("Tue, 05 Mar 2024 10:00:00 GMT", "2024-03-05"),
        ("2024-02-30", None),
        ("last Tuesday", None),
    ],
)
def test_a_declared_date_becomes_an_iso_date_or_nothing(declared: str, iso: str | None) -> None:
    assert iso_date(declared) == iso


def test_an_author_that_is_a_profile_url_is_not_an_author() -> None:
    html = '<head><meta property="article:author" content="https://x.test/anna"></head>'
    assert "author" not in read_head(html, base_url="https://origin.test/").meta


async def test_a_fetch_from_the_cache_says_when_its_snapshot_was_downloaded(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    dispatcher = make_dispatcher(list(WEB.ops))
    url = serve(origin, "/tides", ARTICLE)
    before = int(time.time())
    first = await fetch(dispatcher, url)
    second = await fetch(dispatcher, url)
    assert first.get("CACHED_AT") is None
    stamp = second.get("CACHED_AT")
    assert stamp is not None
    moment = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    assert before <= moment.timestamp() <= time.time()
    keys = [key for key, _ in second.fields]
    assert keys[keys.index("CACHED") + 1] == "CACHED_AT"


async def test_max_age_reads_the_cache_only_when_the_snapshot_is_younger(
    make_dispatcher: DispatcherFactory, origin: Origin, web: WebServices
) -> None:
    dispatcher = make_dispatcher(list(WEB.ops))
    url = serve(origin, "/tides", ARTICLE)
    await fetch(dispatcher, url)
    snapshot = await web.cache.get(CACHE_NAMESPACE, url)
    assert isinstance(snapshot, dict)
    snapshot["fetched_at"] = time.time() - 100  # downloaded 100 s ago
    await web.cache.set(CACHE_NAMESPACE, url, snapshot, ttl_s=3600)
    young = await fetch(dispatcher, url, ("MAX_AGE", "101"))
    assert (young.get("CACHED"), hits(origin, "/tides")) == ("true", 1)
    old = await fetch(dispatcher, url, ("MAX_AGE", "100"))
    assert (old.get("CACHED"), old.get("CACHED_AT"), hits(origin, "/tides")) == ("false", None, 2)
    never = await fetch(dispatcher, url, ("MAX_AGE", "0"))
    assert (never.get("CACHED"), hits(origin, "/tides")) == ("false", 3)


async def test_max_age_with_a_file_key_is_invalid_field(
    make_dispatcher: DispatcherFactory,
) -> None:
    dispatcher = make_dispatcher(list(WEB.ops))
    reply = await run(
        dispatcher, "fetch", "CONTENT", None, ("FILE_KEY", "fk_aaaaaaaaaaaaaaaa"), ("MAX_AGE", "5")
    )
    assert reply.status is Status.FAIL
    assert (reply.get("ERROR") or "").startswith("invalid_field:")


async def test_a_page_cut_at_max_chars_carries_a_summary_of_the_whole_page(
    make_dispatcher: DispatcherFactory, origin: Origin, web: WebServices
) -> None:
    """Made once per snapshot and view: later parts read it from the cache."""
    url = serve(origin, "/tides", ARTICLE)
    reply = await fetch(make_dispatcher(list(WEB.ops)), url, ("MAX_CHARS", "40"))
    assert reply.status is Status.PARTIAL
    summary = [value for key, value in reply.fields if key == "SUMMARY"]
    assert summary == list(summarize_extractive(MARKDOWN, 3))
    kept = await web.cache.get(SUMMARY_NAMESPACE, f"{reply.get('FILE_KEY')}:text")
    assert kept == summary
    assert "Storm surges" in " ".join(summary)  # from past the part sent
    whole = await fetch(make_dispatcher(list(WEB.ops)), url)
    assert (whole.status, whole.get("SUMMARY")) == (Status.OK, None)


async def test_a_script_only_page_is_partial_with_empty_content_never_ok(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    url = serve(origin, "/app", SHELL)
    reply = await fetch(make_dispatcher(list(WEB.ops)), url)
    key = file_key(Page(url, 200, "text/html", "html", markdown=""))
    assert reply == Reply(
        Status.PARTIAL,
        (
            ("SCOPE", "[origin.test]"),
            ("DATA", ""),
            ("ERROR", "empty_content:script_only,render_unavailable"),
            ("TITLE", "App"),
            ("WORD_COUNT", "0"),
            ("CACHED", "false"),
            ("RENDER_REASON", "root_div,render_unavailable"),  # no Chromium here: as never
            ("URL", url),
            ("FILE_KEY", key),
            ("CONTENT_LENGTH", "0"),
            ("TOKENS", "0"),
            ("TRUNCATED", "false"),
            ("CITE", f'{url} "App"'),
        ),
    )


@pytest.mark.parametrize(
    ("body", "content_type", "why"),
    [
        ("", "text/html", "empty_body"),
        ("  \n", "text/plain", "empty_body"),
        ("<html><body><div></div><img src=x></body></html>", "text/html", "no_text"),
    ],
)
async def test_a_page_with_no_text_names_why_in_its_partial(
    make_dispatcher: DispatcherFactory, origin: Origin, body: str, content_type: str, why: str
) -> None:
    url = serve(origin, "/empty", body, content_type)
    reply = await fetch(make_dispatcher(list(WEB.ops)), url)
    assert (reply.status, reply.get("ERROR")) == (Status.PARTIAL, f"empty_content:{why}")
    cached = await fetch(
        make_dispatcher(list(WEB.ops)), url
    )  # the reason is kept with the snapshot
    assert (cached.status, cached.get("ERROR")) == (Status.PARTIAL, f"empty_content:{why}")


async def test_several_urls_carry_declared_attributes_and_an_empty_page_is_a_fetch_error(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    dispatcher = make_dispatcher(list(WEB.ops))
    declared = serve(origin, "/getijden", DECLARED)
    await fetch(dispatcher, declared)  # cached, so its FETCH line says when
    shell = serve(origin, "/app", SHELL)
    reply = await run(dispatcher, "fetch", "CONTENT", None, ("URL", declared), ("URL", shell))
    assert reply.status is Status.PARTIAL
    assert reply.get("ERROR") == "empty_content:script_only,render_unavailable"
    assert reply.get("FETCH_ERROR") == f"{shell} empty_content:script_only,render_unavailable"
    line = reply.get("FETCH") or ""
    stamp = line.split(" cached_at:", 1)[1].split(" ", 1)[0]
    assert line.endswith(
        f"cached:true cached_at:{stamp} description:"
        + json.dumps("Twee keer per dag hoog water.")
        + ' author:"Anna de Boer" published:2025-10-04 lang:nl-NL site_name:"Kustkrant"'
        + ' "Getijden"'
    )


async def test_several_urls_all_empty_fail_with_empty_content(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    one = serve(origin, "/app", SHELL)
    two = serve(origin, "/blank", "", "text/plain")
    reply = await run(
        make_dispatcher(list(WEB.ops)), "fetch", "CONTENT", None, ("URL", one), ("URL", two)
    )
    assert reply.status is Status.FAIL
    assert reply.get("ERROR") == "empty_content:script_only,render_unavailable"
    assert [v for k, v in reply.fields if k == "FETCH_ERROR"] == [
        f"{one} empty_content:script_only,render_unavailable",
        f"{two} empty_content:empty_body",
    ]
