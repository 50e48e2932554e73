"""pages.load_page on its own: the cache snapshot, single-flight, rate buckets (foreground and
background), the op deadline, and content sniffing."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import trio
import trio.testing

from csp_web.core.api.errors import OpError
from csp_web.infra.ratelimit import Bucket
from protocol import ErrorCode
from specialists.web.pages.loading import (
    CACHE_NAMESPACE,
    Page,
    compact_json,
    content_kind,
    from_snapshot,
    load_page,
    normalise_url,
    op_deadline,
    to_snapshot,
)
from specialists.web.services import WebServices
from tests.net._origin import Origin, Seen
from tests.net._origin import Reply as OriginReply
from tests.web.pages_support import (
    ARTICLE,
    MARKDOWN,
    TITLE,
    WAIT_S,
    fail_after_real,
    hits,
    serve,
    watch_flights,
)


async def load(web: WebServices, url: str, **options: bool) -> Page:
    return await load_page(web, url, deadline=trio.current_time() + 10, **options)


async def drain(web: WebServices) -> None:
    """Take every token of the fetch bucket (under a MockClock, so none comes back)."""
    bucket = web.limits.bucket("fetch")
    assert isinstance(bucket, Bucket)  # local mode: its wait is readable
    while bucket.wait_s() == 0:
        await bucket.acquire(deadline=math.inf)


async def test_a_loaded_html_page_holds_every_view_and_no_headers(
    web: WebServices, origin: Origin
) -> None:
    url = serve(origin, "/tides", ARTICLE)
    page = await load(web, url)
    assert (page.url, page.status, page.kind, page.title) == (url, 200, "html", TITLE)
    assert (page.markdown, page.cached, page.redirect_chain) == (MARKDOWN, False, (url,))
    assert page.outline.startswith("title: ")
    assert page.meta == {
        "title": "Tides of the North Sea | Coast News",
        "description": "How tides shape the coast.",
    }
    snapshot = await web.cache.get(CACHE_NAMESPACE, url)
    assert isinstance(snapshot, dict)
    assert set(snapshot) == set(vars(page)) - {"cached"} | {"v"}
    assert not any(key in snapshot for key in ("headers", "body", "authorization"))


async def test_a_cached_snapshot_reads_back_equal_and_marked_cached(
    web: WebServices, origin: Origin
) -> None:
    url = serve(origin, "/tides", ARTICLE)
    fresh = await load(web, url)
    again = await load(web, url)
    assert again == Page(**{**vars(fresh), "cached": True})


def test_snapshots_of_another_version_or_shape_read_as_misses() -> None:
    page = Page("https://a.test/", 200, "text/plain", "text", text="hi")
    assert from_snapshot(to_snapshot(page)) == Page(**{**vars(page), "cached": True})
    assert from_snapshot({**to_snapshot(page), "v": 0}) is None
    assert from_snapshot({**to_snapshot(page), "surprise": 1}) is None
    assert from_snapshot("not a dict") is None
    assert from_snapshot(None) is None


async def test_the_key_is_the_gates_canonical_spelling(web: WebServices) -> None:
    port = web.config.guard.allowed_ports[0]
    expected = f"https://origin.test:{port}/a?b=1"
    assert normalise_url(f"HTTPS://ORIGIN.test:{port}/a?b=1#frag", web) == expected
    with pytest.raises(OpError) as caught:
        normalise_url("ftp://origin.test/", web)
    assert caught.value.code is ErrorCode.URL_REJECTED


async def test_a_url_the_gate_let_through_is_refused_once_a_reload_closes_its_port(
    web: WebServices,
) -> None:
    """The gate's canonical spellings are kept per guard settings (issue 26): a reload's
    rules apply to the next load at once, to URLs already seen too."""
    url = f"https://origin.test:{web.config.guard.allowed_ports[0]}/a"
    assert normalise_url(url, web) == url
    web.config = replace(web.config, guard=replace(web.config.guard, allowed_ports=(443,)))
    with pytest.raises(OpError) as caught:
        normalise_url(url, web)
    assert caught.value.code is ErrorCode.URL_REJECTED


async def test_a_server_error_is_fetch_failed_and_not_cached(
    web: WebServices, origin: Origin
) -> None:
    url = origin.url("origin.test", "/status/503")
    for _ in range(2):
        with pytest.raises(OpError) as caught:
            await load(web, url)
        assert (caught.value.code, caught.value.detail) == (ErrorCode.FETCH_FAILED, "http_503")
    assert hits(origin, "/status/503") == 2


async def test_a_background_load_is_skipped_when_the_bucket_is_below_half(
    web: WebServices, origin: Origin, mock_clock: trio.testing.MockClock
) -> None:
    cached = serve(origin, "/cached", ARTICLE)
    await load(web, cached)
    await drain(web)
    with pytest.raises(OpError) as caught:
        await load(web, serve(origin, "/tides", ARTICLE), background=True)
    assert (caught.value.code, caught.value.detail) == (ErrorCode.RATE_LIMITED, "fetch:background")
    assert hits(origin, "/tides") == 0
    assert (await load(web, cached, background=True)).cached  # the cache needs no token


async def test_a_foreground_load_waits_for_a_token_within_its_deadline_else_fails(
    web: WebServices, origin: Origin, mock_clock: trio.testing.MockClock
) -> None:
    url = serve(origin, "/tides", ARTICLE)
    await drain(web)
    with pytest.raises(OpError) as caught:
        await load_page(web, url, deadline=trio.current_time() + 1)
    assert caught.value.code is ErrorCode.RATE_LIMITED
    assert ("RETRY_AFTER", "3") in caught.value.fields  # 20 tokens a minute
    async with trio.open_nursery() as nursery:
        nursery.start_soon(load, web, url)
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(3)
    assert hits(origin, "/tides") == 1


async def test_a_follower_takes_over_when_the_leader_is_cancelled(
    web: WebServices, origin: Origin, mock_clock: trio.testing.MockClock
) -> None:
    url = serve(origin, "/tides", ARTICLE)
    await drain(web)
    flights = watch_flights(web)
    pages: list[Page] = []

    async def follower() -> None:
        pages.append(await load(web, url))

    async with trio.open_nursery() as nursery:
        leader = trio.CancelScope()

        async def lead() -> None:
            with leader:
                await load(web, url)

        nursery.start_soon(lead)
        await flights.wait_for(lambda: url in flights)
        first = flights[url]
        nursery.start_soon(follower)
        await flights.wait_for(lambda: first.followers == 1)
        leader.cancel()
        # The follower leads a flight of its own (the leader's ended without an outcome).
        await flights.wait_for(lambda: url in flights and flights[url] is not first)
        assert flights[url].followers == 0
        mock_clock.jump(3)
    assert [page.markdown for page in pages] == [MARKDOWN]
    assert hits(origin, "/tides") == 1
    assert flights == {}


async def test_a_leaders_failure_is_every_followers_failure_from_one_request(
    web: WebServices, origin: Origin, mock_clock: trio.testing.MockClock
) -> None:
    url = origin.url("origin.test", "/status/404")
    await drain(web)
    flights = watch_flights(web)
    errors: list[str] = []

    async def one() -> None:
        try:
            await load(web, url)
        except OpError as exc:
            errors.append(f"{exc.code}:{exc.detail}")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one)
        await flights.wait_for(lambda: url in flights)
        nursery.start_soon(one)
        nursery.start_soon(one)
        await flights.wait_for(lambda: flights[url].followers == 2)
        mock_clock.jump(3)
    assert errors == ["fetch_failed:http_404"] * 3
    assert hits(origin, "/status/404") == 1


async def test_a_follower_gives_up_at_its_own_deadline(
    web: WebServices, origin: Origin, mock_clock: trio.testing.MockClock
) -> None:
    url = serve(origin, "/tides", ARTICLE)
    await drain(web)
    flights = watch_flights(web)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(load, web, url)
        await flights.wait_for(lambda: url in flights)
        with pytest.raises(OpError) as caught:
            await load_page(web, url, deadline=trio.current_time())
        nursery.cancel_scope.cancel()
    assert (caught.value.code, caught.value.detail) == (ErrorCode.FETCH_FAILED, "timeout")


async def test_op_deadline_leaves_a_reserve_inside_the_task_deadline(
    web: WebServices, mock_clock: trio.testing.MockClock
) -> None:
    now = trio.current_time()
    assert op_deadline(web) == now + web.config.guard.timeout_s
    for task_s, expected_s in ((0.5, 0.4), (5, 4.75), (100, web.config.guard.timeout_s)):
        with trio.move_on_after(task_s):
            assert op_deadline(web) == now + expected_s
            await trio.lowlevel.checkpoint()


@pytest.mark.parametrize(
    ("content_type", "body", "kind"),
    [
        ("text/html", b"", "html"),
        ("application/xhtml+xml", b"", "html"),
        ("application/json", b"", "json"),
        ("application/ld+json", b"", "json"),
        ("text/plain", b"", "text"),
        ("text/markdown", b"", "text"),
        ("image/png", b"<html>", "other"),
        ("", b"  <!DOCTYPE html><html>", "html"),
        ("", b"<title>t</title>", "html"),
        ("", "plain ütf-8".encode(), "text"),
        ("", b"\x89PNG\x00\x01", "other"),
        ("", b"\xff\xfe", "other"),
    ],
)
def test_content_kinds_by_type_and_by_sniffing_when_untyped(
    content_type: str, body: bytes, kind: str
) -> None:
    assert content_kind(content_type, body) == kind


@pytest.mark.parametrize(
    ("text", "compact"),
    [
        ('{ "a" : [1, 2.5, "é"] }', '{"a":[1,2.5,"é"]}'),
        ("  42 ", "42"),
        ("[NaN]", None),
        ("{'a': 1}", None),
        ("[" * 100_000 + "]" * 100_000, None),
    ],
)
def test_compact_json_refuses_what_rfc_8259_does(text: str, compact: str | None) -> None:
    assert compact_json(text) == compact


async def test_a_leader_out_of_time_leaves_its_followers_to_try_again(
    web: WebServices, origin: Origin, mock_clock: trio.testing.MockClock
) -> None:
    served: list[str] = []

    def first_slow(_seen: Seen) -> OriginReply:
        served.append("slow" if not served else "page")
        if served[-1] == "slow":
            return OriginReply(200, [("content-type", "text/plain")], drip=True)
        return OriginReply(200, [("content-type", "text/html")], ARTICLE.encode())

    origin.routes["/tides"] = first_slow
    url = origin.url("origin.test", "/tides")
    await drain(web)
    flights = watch_flights(web)
    outcomes: list[str] = []
    leader_ended = trio.Event()

    async def one(budget_s: float) -> None:
        try:
            page = await load_page(web, url, deadline=trio.current_time() + budget_s)
            outcomes.append(page.markdown)
        except OpError as exc:
            outcomes.append(f"{exc.code}:{exc.detail}")
        leader_ended.set()  # the first to end; set again by the second, harmlessly

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one, 5)
        await flights.wait_for(lambda: url in flights)
        nursery.start_soon(one, 100)
        await flights.wait_for(lambda: flights[url].followers == 1)
        mock_clock.jump(3)  # the leader's token comes; its download drips
        with fail_after_real(WAIT_S):
            await origin.wait_request("/tides")
        mock_clock.jump(2.5)  # past the leader's deadline, far inside the follower's
        with fail_after_real(WAIT_S):
            await leader_ended.wait()
        assert outcomes == ["fetch_failed:timeout"]
        mock_clock.jump(1)  # the follower's own token
    assert outcomes == ["fetch_failed:timeout", MARKDOWN]
    assert served == ["slow", "page"]
