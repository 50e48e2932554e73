"""Sessions: named per uid, capped per peer and overall (N and N+1), closed when
idle, isolated from each other; pages per session and bytes per screenshot capped."""

from __future__ import annotations

import asyncio
import functools
from dataclasses import replace

import pytest
import trio

from csp_web.config import Config, with_section
from csp_web.core.api.errors import OpError
from csp_web.core.dispatch.dispatcher import Dispatcher
from protocol import Status
from specialists.browser.config import SECTION, BrowserConfig, browser_section
from specialists.browser.pages import PageSet
from specialists.browser.services import BrowserServices
from specialists.browser.sessions import SessionTable
from tests.net._origin import Origin
from tests.net._origin import Reply as OriginReply

from .support import WAIT_S
from .test_browser_op import FORM, error, run, serve, session_pages

SMALL = BrowserConfig(
    max_sessions=3, max_sessions_per_peer=2, max_pages_per_session=2, max_oneshot_per_peer=2
)


@pytest.fixture
def browser_settings(browser_config: BrowserConfig) -> BrowserConfig:
    return replace(SMALL, trusted_spki=browser_config.trusted_spki, max_screenshot_bytes=10_000_000)


async def _open(dispatcher: Dispatcher, name: str, uid: int) -> str:
    reply = await run(dispatcher, ("ACTION", "screenshot"), ("SESSION", name), uid=uid)
    return "ok" if reply.status is Status.OK else error(reply)


async def test_sessions_per_peer_are_capped_at_n(dispatcher: Dispatcher) -> None:
    assert await _open(dispatcher, "a1", uid=1) == "ok"
    assert await _open(dispatcher, "a2", uid=1) == "ok"  # N = 2
    assert await _open(dispatcher, "a3", uid=1) == "too_many_sessions:2 per peer"  # N + 1
    assert await _open(dispatcher, "a1", uid=1) == "ok"  # reusing one is not a new one


async def test_sessions_overall_are_capped_at_n(dispatcher: Dispatcher) -> None:
    assert await _open(dispatcher, "b1", uid=1) == "ok"
    assert await _open(dispatcher, "b2", uid=1) == "ok"
    assert await _open(dispatcher, "b3", uid=2) == "ok"  # N = 3 overall
    assert await _open(dispatcher, "b4", uid=2) == "too_many_sessions:3 overall"
    closed = await run(dispatcher, ("ACTION", "close"), ("SESSION", "b1"), uid=1)
    assert closed.status is Status.OK
    assert await _open(dispatcher, "b4", uid=2) == "ok"


async def test_session_names_are_per_uid(dispatcher: Dispatcher, origin: Origin) -> None:
    url = serve(origin, "/form", FORM)
    mine = ("SESSION", "mine")
    first = await run(dispatcher, ("ACTION", "navigate"), ("TARGET_URL", url), mine, uid=1)
    assert first.status is Status.OK, first
    other = await run(dispatcher, ("ACTION", "extract"), mine, uid=2)  # a session of its own
    assert (other.status, other.get("URL")) == (Status.OK, "about:blank"), other
    assert error(await run(dispatcher, ("ACTION", "close"), ("SESSION", "nope"), uid=2)) == (
        "session_not_found:nope"
    )
    closed = await run(dispatcher, ("ACTION", "close"), mine, uid=2)
    assert closed.status is Status.OK, closed  # uid 2's own, not uid 1's
    assert error(await run(dispatcher, ("ACTION", "close"), mine, uid=2)) == (
        "session_not_found:mine"
    )
    kept = await run(dispatcher, ("ACTION", "extract"), mine, uid=1)
    assert (kept.status, kept.get("URL")) == (Status.OK, url), kept


async def test_sessions_share_no_cookies(dispatcher: Dispatcher, origin: Origin) -> None:
    origin.routes["/set"] = lambda _s: OriginReply(
        headers=[("content-type", "text/html"), ("set-cookie", "who=first; Path=/")],
        body=b"<title>set</title>",
    )
    origin.routes["/show"] = lambda seen: OriginReply(
        headers=[("content-type", "text/html")],
        body=f"<title>{seen.headers.get('cookie', 'none')}</title>".encode(),
    )
    first, second = ("SESSION", "c1"), ("SESSION", "c2")
    set_url, show_url = origin.url("origin.test", "/set"), origin.url("origin.test", "/show")
    await run(dispatcher, ("ACTION", "navigate"), ("TARGET_URL", set_url), first)
    same = await run(dispatcher, ("ACTION", "navigate"), ("TARGET_URL", show_url), first)
    assert same.get("TITLE") == "who=first"
    other = await run(dispatcher, ("ACTION", "navigate"), ("TARGET_URL", show_url), second)
    assert other.get("TITLE") == "none"


async def test_idle_sessions_close_after_the_idle_timeout(
    services: BrowserServices, make_config: functools.partial[Config]
) -> None:
    now = [100.0]
    table = SessionTable(services.engine, clock=lambda: now[0])
    config, guard = browser_section(make_config()), services.guard()
    async with table.use("idle", "uid:1", config, guard):
        pass
    now[0] += 299.0
    assert await table.reap_idle(300.0) == pytest.approx(1.0)
    assert list(table.sessions) == [("uid:1", "idle")]  # at N - 1 s still open
    now[0] += 1.0
    await table.reap_idle(300.0)
    assert table.sessions == {}
    assert table.closed_idle == 1
    with pytest.raises(OpError) as lost:  # told once, not reopened on about:blank unannounced
        async with table.use("idle", "uid:1", config, guard):
            pass
    assert (lost.value.code, lost.value.detail) == ("session_lost", "idle")
    async with table.use("idle", "uid:1", config, guard):
        pass  # the name is free again
    await table.aclose()


async def test_a_session_keeps_popups_up_to_its_page_cap(
    dispatcher: Dispatcher, services: BrowserServices, origin: Origin
) -> None:
    page = b"""<title>opener</title>
<button id="one" onclick="window.open('/page')">1</button>
<button id="two" onclick="window.open('/page')">2</button>"""
    url = serve(origin, "/opener", page)
    session = ("SESSION", "pop")
    await run(dispatcher, ("ACTION", "navigate"), ("TARGET_URL", url), session)
    pages = session_pages(services, "pop")
    await run(dispatcher, ("ACTION", "click"), ("SELECTOR", "css:#one"), session)
    await services.engine.run(_wait_decided, pages)
    assert (pages.popups_kept, pages.popups_closed) == (1, 0)  # N = 2 pages
    await run(dispatcher, ("ACTION", "click"), ("SELECTOR", "css:#two"), session)
    await services.engine.run(_wait_decided, pages)
    assert (pages.popups_kept, pages.popups_closed) == (1, 1)  # the N + 1st is closed


async def _wait_decided(pages: PageSet) -> None:
    await asyncio.wait_for(pages.popup_decided.wait(), WAIT_S)
    pages.popup_decided.clear()


async def test_screenshots_are_capped_in_bytes_at_n(
    dispatcher: Dispatcher, origin: Origin, make_config: functools.partial[Config]
) -> None:
    url = serve(origin, "/form", FORM)
    session = ("SESSION", "cap")
    await run(dispatcher, ("ACTION", "navigate"), ("TARGET_URL", url), session)
    size = int(
        (await run(dispatcher, ("ACTION", "screenshot"), session)).get("SCREENSHOT_BYTES") or 0
    )
    base = make_config()
    for cap, expected in ((size, Status.OK), (size - 1, Status.FAIL)):
        browser = replace(browser_section(base), max_screenshot_bytes=cap)
        dispatcher.services.config = with_section(base, SECTION, browser)
        reply = await run(dispatcher, ("ACTION", "screenshot"), session)
        assert reply.status is expected, (cap, reply)
    assert error(reply) == f"too_large:screenshot over {size - 1} bytes"


async def test_one_shot_actions_are_capped_per_peer_apart_from_sessions(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    assert await _open(dispatcher, "full1", uid=1) == "ok"
    assert await _open(dispatcher, "full2", uid=1) == "ok"  # uid 1's sessions are all open

    async def hang(path: str) -> None:
        origin.routes[path] = lambda _s: OriginReply(
            headers=[("content-type", "text/html")], body=b"<title>slow", drip=True
        )
        url = origin.url("origin.test", path)
        await run(dispatcher, ("ACTION", "navigate"), ("TARGET_URL", url), uid=1)

    async with trio.open_nursery() as hanging:
        for path in ("/hang1", "/hang2"):
            hanging.start_soon(hang, path)
        with trio.fail_after(WAIT_S):
            await origin.wait_request("/hang1")
            await origin.wait_request("/hang2")  # N = 2 one-shot actions of uid 1 running
        over = await run(dispatcher, ("ACTION", "screenshot"), uid=1)  # N + 1
        assert error(over) == "busy:2 one-shot actions per peer"
        assert (await run(dispatcher, ("ACTION", "screenshot"), uid=2)).status is Status.OK
        assert await _open(dispatcher, "full1", uid=1) == "ok"  # sessions are not one-shots
        hanging.cancel_scope.cancel()
    assert (await run(dispatcher, ("ACTION", "screenshot"), uid=1)).status is Status.OK
