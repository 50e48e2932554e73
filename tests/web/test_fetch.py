"""The fetch op end to end: dispatcher validation, pages.load_page, the guarded client against a
real local HTTPS origin, and the reply renderer. Helpers here are shared by the other page
tests (meta, resolve, summarize, pages)."""

from __future__ import annotations

import gzip
import json
import math
import os
import pickle
import sqlite3
from pathlib import Path

import pytest
import trio
import trio.lowlevel
import trio.testing

from csp_web.config import Config
from csp_web.core.api.context import Peer
from csp_web.core.wire.connection import Shutdown
from csp_web.infra.ratelimit import Bucket
from protocol import Reply, Status, Task
from specialists.extract import extract_article
from specialists.web.pages.filekeys import file_key
from specialists.web.pages.loading import Page
from specialists.web.pages.ops_fetch import OPS
from specialists.web.services import WebServices
from tests.harness import Harness
from tests.net._origin import Origin
from tests.net._origin import Reply as OriginReply
from tests.web.conftest import DispatcherFactory
from tests.web.pages_support import (
    ARTICLE,
    MARKDOWN,
    TITLE,
    WAIT_S,
    fetch,
    hits,
    run,
    serve,
    watch_flights,
    web_audits,
)


async def test_fetch_of_an_article_replies_markdown_title_word_count_and_cite(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    """R-4: the reply cites the page it read, with its title; its fileKey, length, token
    estimate and truncated flag come before the CITE line. R-7: no PAGE_TYPE when the page
    does not say what it is."""
    url = serve(origin, "/tides", ARTICLE)
    reply = await fetch(make_dispatcher(OPS), url)
    key = file_key(Page(url, 200, "text/html", "html", markdown=MARKDOWN))
    assert reply == Reply(
        Status.OK,
        (
            ("SCOPE", "[origin.test]"),
            ("DATA", MARKDOWN),
            ("TITLE", TITLE),
            ("DESCRIPTION", "How tides shape the coast."),
            ("WORD_COUNT", str(extract_article(ARTICLE).word_count)),
            ("CACHED", "false"),
            ("URL", url),
            ("FILE_KEY", key),
            ("CONTENT_LENGTH", str(len(MARKDOWN))),
            ("TOKENS", str(math.ceil(len(MARKDOWN) / 4))),
            ("TRUNCATED", "false"),
            ("CITE", f'{url} "{TITLE}"'),
        ),
    )


async def test_fetch_of_a_page_that_declares_a_product_replies_its_page_type(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    """R-7: PAGE_TYPE follows WORD_COUNT when the extractor can tell the kind of page."""
    product = ARTICLE.replace("</title>", '</title><meta property="og:type" content="product">')
    url = serve(origin, "/tide-table", product)
    reply = await fetch(make_dispatcher(OPS), url)
    assert reply == Reply(
        Status.OK,
        (
            ("SCOPE", "[origin.test]"),
            ("DATA", MARKDOWN),
            ("TITLE", TITLE),
            ("DESCRIPTION", "How tides shape the coast."),
            ("WORD_COUNT", str(extract_article(product).word_count)),
            ("PAGE_TYPE", "product"),
            ("CACHED", "false"),
            ("URL", url),
            ("FILE_KEY", file_key(Page(url, 200, "text/html", "html", markdown=MARKDOWN))),
            ("CONTENT_LENGTH", str(len(MARKDOWN))),
            ("TOKENS", str(math.ceil(len(MARKDOWN) / 4))),
            ("TRUNCATED", "false"),
            ("CITE", f'{url} "{TITLE}"'),
        ),
    )


async def test_fetch_past_max_chars_is_partial_and_later_pages_read_the_one_snapshot(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    """R-3: PARTIAL says what is missing with NEXT_START and REMAINING_CHARS."""
    dispatcher = make_dispatcher(OPS)
    url = serve(origin, "/tides", ARTICLE)
    pages: list[str] = []
    start = 0
    while True:
        reply = await fetch(dispatcher, url, ("MAX_CHARS", "100"), ("START", str(start)))
        pages.append(reply.get("DATA") or "")
        if reply.status is Status.OK:
            break
        assert reply.status is Status.PARTIAL
        next_start = int(reply.get("NEXT_START") or "")
        assert next_start == start + 100
        assert int(reply.get("REMAINING_CHARS") or "") == len(MARKDOWN) - next_start
        start = next_start
    assert "".join(pages) == MARKDOWN
    assert len(pages) == math.ceil(len(MARKDOWN) / 100)
    assert reply.get("NEXT_START") is None
    assert reply.get("REMAINING_CHARS") is None
    assert hits(origin, "/tides") == 1  # every later page came from the cached snapshot


async def test_partial_reply_lists_paging_fields_and_the_summary_before_the_cite_line(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    url = serve(origin, "/tides", ARTICLE)
    reply = await fetch(make_dispatcher(OPS), url, ("MAX_CHARS", "10"))
    assert reply.status is Status.PARTIAL
    assert [key for key, _ in reply.fields] == [
        "SCOPE",
        "DATA",
        "TITLE",
        "DESCRIPTION",
        "WORD_COUNT",
        "CACHED",
        "URL",
        "FILE_KEY",
        "CONTENT_LENGTH",
        "TOKENS",
        "TRUNCATED",
        "NEXT_START",
        "REMAINING_CHARS",
        "SUMMARY",
        "SUMMARY",
        "SUMMARY",
        "CITE",
    ]
    assert (reply.get("DATA"), reply.get("NEXT_START")) == (MARKDOWN[:10], "10")
    assert (reply.get("TOKENS"), reply.get("TRUNCATED")) == ("3", "true")


async def test_second_fetch_is_cached_and_no_cache_downloads_again(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    dispatcher = make_dispatcher(OPS)
    url = serve(origin, "/tides", ARTICLE)
    first = await fetch(dispatcher, url)
    second = await fetch(dispatcher, url)
    fresh = await fetch(dispatcher, url, ("NO_CACHE", "true"))
    assert [r.get("CACHED") for r in (first, second, fresh)] == ["false", "true", "false"]
    assert first.get("DATA") == second.get("DATA") == fresh.get("DATA")
    assert hits(origin, "/tides") == 2
    assert [r["cache_hit"] for r in web_audits(dispatcher)] == [False, True, False]


async def test_cache_key_ignores_case_default_port_spelling_and_fragment(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    dispatcher = make_dispatcher(OPS)
    url = serve(origin, "/tides", ARTICLE)
    await fetch(dispatcher, url)
    variant = url.replace("https://origin.test", "HTTPS://Origin.TEST") + "#section-2"
    reply = await fetch(dispatcher, variant)
    assert (reply.get("CACHED"), reply.get("URL")) == ("true", url)


async def test_fetch_disallowed_by_robots_replies_robots_disallowed(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    origin.robots = OriginReply(
        200, [("content-type", "text/plain")], b"User-agent: *\nDisallow: /"
    )
    url = serve(origin, "/tides", ARTICLE)
    reply = await fetch(make_dispatcher(OPS), url)
    assert reply == Reply(
        Status.FAIL,
        (
            ("SCOPE", "[]"),
            ("DATA", "none"),
            ("ERROR", "robots_disallowed:disallowed_by_rules"),
            ("URL", url),
        ),
    )
    assert hits(origin, "/tides") == 0


async def test_fetch_of_a_missing_page_replies_http_404_with_the_url_and_is_not_cached(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    """R-2: SCOPE [], DATA none, ERROR, then the op's URL field, as seed 000 shows."""
    dispatcher = make_dispatcher(OPS)
    url = origin.url("origin.test", "/status/404")
    reply = await fetch(dispatcher, url)
    assert reply == Reply(
        Status.FAIL,
        (("SCOPE", "[]"), ("DATA", "none"), ("ERROR", "fetch_failed:http_404"), ("URL", url)),
    )
    await fetch(dispatcher, url)
    assert hits(origin, "/status/404") == 2


async def test_fetch_of_a_slow_origin_replies_fetch_failed_timeout_inside_the_task_deadline(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    url = origin.url("origin.test", "/drip")
    reply = await fetch(make_dispatcher(OPS), url, ("TIMEOUT_MS", "1000"))
    assert (reply.get("ERROR"), reply.get("URL")) == ("fetch_failed:timeout", url)


async def test_json_mode_reserialises_the_body_compactly(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    body = '{\n  "name": "tides",\n  "heights": [1.5, 2.25],\n  "note": "ébb"\n}'
    url = serve(origin, "/data", body, "application/json")
    reply = await fetch(make_dispatcher(OPS), url, ("EXTRACT", "json"))
    assert reply.status is Status.OK
    assert reply.get("DATA") == '{"name":"tides","heights":[1.5,2.25],"note":"ébb"}'
    assert reply.get("TITLE") is None
    assert reply.get("CITE") == f'{url} ""'


@pytest.mark.parametrize(
    ("body", "content_type"),
    [("{not json", "application/json"), ('{"a": NaN}', "application/json"), (ARTICLE, "text/html")],
)
async def test_json_mode_refuses_a_body_that_is_not_json(
    make_dispatcher: DispatcherFactory, origin: Origin, body: str, content_type: str
) -> None:
    url = serve(origin, "/data", body, content_type)
    reply = await fetch(make_dispatcher(OPS), url, ("EXTRACT", "json"))
    assert (reply.get("ERROR") or "").startswith("unsupported_content:")
    assert reply.get("URL") == url


async def test_text_mode_of_json_and_plain_text_is_the_body_as_served(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    dispatcher = make_dispatcher(OPS)
    plain = serve(origin, "/notes.txt", "line one\nline two\n", "text/plain; charset=utf-8")
    data = serve(origin, "/data", '{"a": 1}', "application/json")
    text_reply = await fetch(dispatcher, plain)
    json_reply = await fetch(dispatcher, data)
    assert (text_reply.get("DATA"), text_reply.get("WORD_COUNT")) == ("line one\nline two\n", "4")
    assert json_reply.get("DATA") == '{"a": 1}'


async def test_html_mode_is_an_outline_without_markup(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    url = serve(origin, "/tides", ARTICLE.replace("Fishermen", "Fishermen &lt;b&gt;"))
    reply = await fetch(make_dispatcher(OPS), url, ("EXTRACT", "html"))
    outline = reply.get("DATA") or ""
    assert reply.status is Status.OK
    assert outline.startswith("title: Tides of the North Sea | Coast News\nnav: 2 links\narticle")
    assert "<" not in outline
    assert ">" not in outline
    assert "tracking" not in outline


@pytest.mark.parametrize(
    "content_type", ["image/png", "application/zip", "application/octet-stream"]
)
async def test_fetch_of_an_unsupported_type_is_refused_naming_the_type(
    make_dispatcher: DispatcherFactory, origin: Origin, content_type: str
) -> None:
    url = serve(origin, "/file", b"\x89PNG\r\n\x1a\n\x00\x00", content_type)
    reply = await fetch(make_dispatcher(OPS), url)
    assert reply.get("ERROR") == f"unsupported_content:{content_type}"
    assert reply.get("URL") == url


async def test_concurrent_fetches_of_one_url_share_one_download(
    make_dispatcher: DispatcherFactory,
    origin: Origin,
    web: WebServices,
    mock_clock: trio.testing.MockClock,
) -> None:
    dispatcher = make_dispatcher(OPS)
    url = serve(origin, "/tides", ARTICLE)
    bucket = web.limits.bucket("fetch")
    assert isinstance(bucket, Bucket)  # local mode: its wait is readable
    while bucket.wait_s() == 0:
        await bucket.acquire(deadline=math.inf)  # empty: the leader waits for a token
    flights = watch_flights(web)
    replies: list[Reply] = []

    async def one() -> None:
        replies.append(await dispatcher.run(Task("fetch", "WEB", "CONTENT", url), Peer("t")))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one)
        await flights.wait_for(lambda: url in flights)
        nursery.start_soon(one)
        await flights.wait_for(lambda: flights[url].followers == 1)
        mock_clock.jump(5)  # a token comes (20 a minute); the leader downloads for both
    assert [r.get("CACHED") for r in replies] == ["false", "false"]
    assert replies[0].get("DATA") == replies[1].get("DATA") == MARKDOWN
    assert hits(origin, "/tides") == 1


async def test_fetch_of_a_gzip_encoded_page_is_decoded(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    body = gzip.compress(ARTICLE.encode())
    headers = [("content-type", "text/html; charset=utf-8"), ("content-encoding", "gzip")]
    origin.routes["/tides.gz"] = lambda _seen: OriginReply(200, headers, body)
    reply = await fetch(make_dispatcher(OPS), origin.url("origin.test", "/tides.gz"))
    assert reply.get("DATA") == MARKDOWN
    assert origin.requests[-1].headers["accept-encoding"] == "gzip, deflate"


async def test_fetch_after_a_redirect_names_the_final_url_and_caches_it_too(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    dispatcher = make_dispatcher(OPS)
    final = serve(origin, "/tides", ARTICLE)
    reply = await fetch(dispatcher, origin.url("origin.test", "/redirect?to=/tides"))
    direct = await fetch(dispatcher, final)
    assert (reply.get("URL"), reply.get("CITE")) == (final, f'{final} "{TITLE}"')
    assert direct.get("CACHED") == "true"
    assert hits(origin, "/tides") == 1


@pytest.mark.parametrize(("extra", "ok"), [(0, True), (1, False)])
async def test_max_chars_is_accepted_at_the_cap_and_refused_above_it(
    make_dispatcher: DispatcherFactory, origin: Origin, web: WebServices, extra: int, ok: bool
) -> None:
    cap = web.config.fetch.max_chars_cap
    url = serve(origin, "/t", ARTICLE)
    reply = await fetch(make_dispatcher(OPS), url, ("MAX_CHARS", str(cap + extra)))
    if ok:
        assert (reply.status, reply.get("DATA")) == (Status.OK, MARKDOWN)
    else:
        assert reply.get("ERROR") == f"invalid_field:MAX_CHARS above {cap}"
        assert hits(origin, "/t") == 0  # refused before any download


async def test_max_chars_defaults_to_the_configured_8000(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    words = " ".join(f"word{i}" for i in range(3000))
    url = serve(origin, "/long.txt", words, "text/plain")
    reply = await fetch(make_dispatcher(OPS), url)
    assert reply.status is Status.PARTIAL
    assert (len(reply.get("DATA") or ""), reply.get("NEXT_START")) == (8000, "8000")


@pytest.mark.parametrize("extra", [-1, 0, 1])
async def test_start_pages_to_the_last_character_and_is_refused_at_the_end_and_past_it(
    make_dispatcher: DispatcherFactory, origin: Origin, extra: int
) -> None:
    """START N-1 answers the last character; N (once an empty OK, review) and N+1 refuse."""
    url = serve(origin, "/tides", ARTICLE)
    reply = await fetch(make_dispatcher(OPS), url, ("START", str(len(MARKDOWN) + extra)))
    if extra < 0:
        assert (reply.status, reply.get("DATA")) == (Status.OK, MARKDOWN[-1])
    else:
        assert reply.status is Status.FAIL, reply
        assert reply.get("ERROR") == f"invalid_field:START beyond the end ({len(MARKDOWN)})"


async def test_fetch_of_a_private_address_is_refused_before_any_request(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    url = origin.url("private.test", "/tides")
    reply = await fetch(make_dispatcher(OPS), url)
    assert (reply.get("ERROR") or "").startswith("ssrf_blocked:")
    assert "10.0.0.1" not in str(reply.fields)
    assert origin.requests == []


async def test_fetch_needs_a_url_and_takes_it_inline_or_as_a_field_not_both(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    """D-4: inline text fills URL; giving both is duplicate_field."""
    dispatcher = make_dispatcher(OPS)
    url = serve(origin, "/tides", ARTICLE)
    missing = await run(dispatcher, "fetch", "CONTENT", None)
    as_field = await run(dispatcher, "fetch", "CONTENT", None, ("URL", url))
    both = await run(dispatcher, "fetch", "CONTENT", url, ("URL", url))
    assert missing.get("ERROR") == "missing_field:URL or FILE_KEY"
    assert as_field.status is Status.OK
    assert (both.get("ERROR") or "").startswith("duplicate_field:")


async def test_a_raw_fetch_frame_over_the_connection_loop_gets_a_quoted_multiline_reply(
    make_dispatcher: DispatcherFactory, origin: Origin, nursery: trio.Nursery
) -> None:
    """V-3, V-4: multi-line DATA and the free-text TITLE travel quoted on one line."""
    harness = Harness(make_dispatcher(OPS), nursery, Shutdown())
    client = harness.connect()
    url = serve(origin, "/tides", ARTICLE)
    await client.send(f"TASK REQ:fetch {url} IN:WEB OUT:CONTENT\nID f-1\nMAX_CHARS 40\n\n".encode())
    with trio.fail_after(WAIT_S):
        reply = await client.reply()
    assert reply is not None
    assert (reply.status, reply.id, reply.get("DATA")) == (Status.PARTIAL, "f-1", MARKDOWN[:40])
    wire = client.codec.send(reply).decode()
    assert f"DATA {json.dumps(MARKDOWN[:40], ensure_ascii=False)}\n" in wire
    assert f'TITLE "{TITLE}"\n' in wire


def test_every_page_op_is_exported_once_under_web() -> None:
    assert [(op.req, op.domain, op.out, op.inline) for op in OPS] == [
        ("fetch", "WEB", "CONTENT", "URL"),
        ("meta", "WEB", "META", "URL"),
        ("resolve", "WEB", "URL", "URL"),
    ]


class _Payload:
    """What a planted pickle would run on load: it creates the file at ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (self.path, "w"))


async def test_a_pickle_planted_in_the_cache_never_runs_and_the_fetch_goes_to_the_network(
    make_dispatcher: DispatcherFactory,
    origin: Origin,
    web: WebServices,
    web_config: Config,
    tmp_path: Path,
) -> None:
    """CVE-2025-69872: diskcache unpickles a row set to mode 4 (MODE_PICKLE). An attacker who
    can write the cache's database rewrites the fetch's row; the next fetch of that URL must
    not run it: the row is dropped and the page is downloaded again."""
    dispatcher = make_dispatcher(OPS)
    url = serve(origin, "/tides", ARTICLE)
    first = await fetch(dispatcher, url)
    assert first.get("CACHED") == "false"
    ran = tmp_path / "payload-ran"
    database = os.path.join(web_config.cache_dir, "cache.db")
    with sqlite3.connect(database) as db:
        planted = db.execute(
            "UPDATE Cache SET mode = 4, filename = NULL, value = ?",
            (pickle.dumps(_Payload(str(ran))),),
        ).rowcount
    assert planted >= 1
    web.cache._memory.drop_namespace("fetch")  # type: ignore[attr-defined]  # as after a restart
    again = await fetch(dispatcher, url)
    assert (again.status, again.get("CACHED")) == (Status.OK, "false")
    assert again.get("DATA") == first.get("DATA")
    assert not ran.exists()
    assert hits(origin, "/tides") == 2
    with sqlite3.connect(database) as db:
        assert db.execute("SELECT COUNT(*) FROM Cache WHERE mode = 4").fetchone() == (0,)
