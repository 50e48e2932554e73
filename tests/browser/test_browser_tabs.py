"""Tabs: popups a page opens become tabs of its session, within the session's page cap;
``tabs`` lists them, ``switch`` and ``close_tab`` act on one by its index."""

from __future__ import annotations

import asyncio

import pytest

from csp_web.core.dispatch.dispatcher import Dispatcher
from protocol import Reply, Status
from specialists.browser.config import BrowserConfig
from specialists.browser.pages import PageSet
from specialists.browser.services import BrowserServices
from tests.net._origin import Origin

from .actions_support import CHILD, OPENER
from .support import WAIT_S
from .test_browser_op import error, open_session, run, serve, session_pages

ACT = "ACTION"


def ok(reply: Reply) -> Reply:
    assert reply.status is Status.OK, reply
    return reply


async def opener(dispatcher: Dispatcher, origin: Origin, name: str) -> tuple[str, tuple[str, str]]:
    serve(origin, "/child", CHILD)
    return await open_session(dispatcher, origin, name, "/opener", OPENER)


async def _decided(pages: PageSet) -> None:
    await asyncio.wait_for(pages.popup_decided.wait(), WAIT_S)
    pages.popup_decided.clear()


async def _loaded(pages: PageSet) -> None:
    for page in pages.tabs:
        await page.wait_for_load_state("load", timeout=WAIT_S * 1000)


async def open_popup(
    dispatcher: Dispatcher, services: BrowserServices, name: str, selector: str = "css:#link"
) -> None:
    """Click what opens a popup in session ``name``; return once it was admitted or closed
    and every tab kept has loaded."""
    ok(await run(dispatcher, (ACT, "click"), ("SELECTOR", selector), ("SESSION", name)))
    pages = session_pages(services, name)
    await services.engine.run(_decided, pages)
    await services.engine.run(_loaded, pages)


async def test_a_popup_becomes_a_tab_listed_switched_to_and_closed(
    dispatcher: Dispatcher, services: BrowserServices, origin: Origin
) -> None:
    url, session = await opener(dispatcher, origin, "tabs")
    child = origin.url("origin.test", "/child")
    await open_popup(dispatcher, services, "tabs")
    listed = ok(await run(dispatcher, (ACT, "tabs"), session))
    shown = [(k, v) for k, v in listed.fields if k in ("URL", "TABS", "CURRENT_TAB", "TAB")]
    assert shown == [
        ("URL", url),
        ("TABS", "2"),
        ("CURRENT_TAB", "0"),
        ("TAB", f'0 {url} "Opener"'),
        ("TAB", f'1 {child} "Child"'),
    ]
    switched = ok(await run(dispatcher, (ACT, "switch"), ("TAB", "1"), session))
    assert (switched.get("URL"), switched.get("TITLE"), switched.get("CURRENT_TAB")) == (
        child,
        "Child",
        "1",
    )
    here = ok(await run(dispatcher, (ACT, "extract"), ("SELECTOR", "css:#here"), session))
    assert here.get("CONTENT") == "child page"  # actions act on the current tab
    closed = ok(await run(dispatcher, (ACT, "close_tab"), ("TAB", "1"), session))
    assert (closed.get("URL"), closed.get("CURRENT_TAB")) == (url, "0")
    assert ok(await run(dispatcher, (ACT, "tabs"), session)).get("TABS") == "1"


async def test_a_tab_index_past_the_last_open_tab_is_tab_not_found(
    dispatcher: Dispatcher, services: BrowserServices, origin: Origin
) -> None:
    _, session = await opener(dispatcher, origin, "index")
    await open_popup(dispatcher, services, "index")
    ok(await run(dispatcher, (ACT, "switch"), ("TAB", "1"), session))  # N: the last tab
    past = await run(dispatcher, (ACT, "switch"), ("TAB", "2"), session)  # N + 1
    assert error(past) == "tab_not_found:2: 2 tabs open"
    assert error(await run(dispatcher, (ACT, "close_tab"), ("TAB", "2"), session)).startswith(
        "tab_not_found:"
    )


@pytest.mark.parametrize(("tab", "code"), [("63", "tab_not_found"), ("64", "invalid_field")])
async def test_the_tab_field_is_bounded(
    dispatcher: Dispatcher, origin: Origin, tab: str, code: str
) -> None:
    _, session = await opener(dispatcher, origin, "field")
    assert error(await run(dispatcher, (ACT, "switch"), ("TAB", tab), session)).startswith(code)


async def test_closing_the_current_tab_moves_to_another_and_keeps_the_session(
    dispatcher: Dispatcher, services: BrowserServices, origin: Origin
) -> None:
    url, session = await opener(dispatcher, origin, "current")
    await open_popup(dispatcher, services, "current")
    ok(await run(dispatcher, (ACT, "switch"), ("TAB", "1"), session))
    closed = ok(await run(dispatcher, (ACT, "close_tab"), ("TAB", "1"), session))
    assert (closed.get("URL"), closed.get("CURRENT_TAB")) == (url, "0")
    ok(await run(dispatcher, (ACT, "extract"), session))  # not session_lost


async def test_the_last_tab_is_closed_by_close_not_close_tab(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    _, session = await opener(dispatcher, origin, "last")
    reply = await run(dispatcher, (ACT, "close_tab"), ("TAB", "0"), session)
    assert error(reply) == "invalid_field:TAB is the session's last: close ends it"


@pytest.mark.slow
async def test_a_session_lists_tabs_up_to_its_page_cap_and_no_more(
    dispatcher: Dispatcher, services: BrowserServices, origin: Origin
) -> None:
    cap = BrowserConfig().max_pages_per_session
    _, session = await opener(dispatcher, origin, "cap")
    for _ in range(cap - 1):
        await open_popup(dispatcher, services, "cap", "css:#more")
    assert ok(await run(dispatcher, (ACT, "tabs"), session)).get("TABS") == str(cap)  # N
    await open_popup(dispatcher, services, "cap", "css:#more")  # N + 1: closed
    assert ok(await run(dispatcher, (ACT, "tabs"), session)).get("TABS") == str(cap)
    assert session_pages(services, "cap").popups_closed == 1


@pytest.mark.slow
async def test_a_page_opening_a_hundred_popups_keeps_the_session_within_its_cap(
    dispatcher: Dispatcher, services: BrowserServices, origin: Origin
) -> None:
    cap = BrowserConfig().max_pages_per_session
    _, session = await opener(dispatcher, origin, "flood")
    await open_popup(dispatcher, services, "flood", "css:#flood")
    listed = ok(await run(dispatcher, (ACT, "tabs"), session))
    assert 2 <= int(listed.get("TABS") or 0) <= cap
    assert len(session_pages(services, "flood").context.pages) <= cap
    ok(await run(dispatcher, (ACT, "extract"), session))


SPIN = (
    b"<!doctype html><title>Spin</title><script>setTimeout(() => { while (true) {} }, 300)</script>"
)


@pytest.mark.slow
async def test_a_tab_spinning_in_a_script_is_listed_without_its_title_not_waited_on(
    dispatcher: Dispatcher, services: BrowserServices, origin: Origin
) -> None:
    spin = serve(origin, "/spin", SPIN).replace("origin.test", "other.test")  # its own process
    page = f"""<title>Opener</title><a id="link" href="{spin}" target="_blank">spin</a>"""
    url, session = await open_session(dispatcher, origin, "spin", "/spinner", page.encode())
    await open_popup(dispatcher, services, "spin")
    await services.engine.run(asyncio.sleep, 1.0)  # past the popup's 300 ms: it spins now
    listed = ok(await run(dispatcher, (ACT, "tabs"), session))
    assert listed.get_all("TAB") == [f'0 {url} "Opener"', f'1 {spin} ""']


CLOSING = (
    b"<!doctype html><title>Closing</title><script>setTimeout(() => window.close(), 300)</script>"
)
OPENS_CLOSING = b"""<title>Opener</title>
<button id="open" onclick="window.open('/closing')">o</button>
<button id="bye" onclick="window.open('/bye')">b</button>"""
BYE = b"""<title>Bye</title><button id="close" onclick="window.close()">close</button>"""


async def _closed(pages: PageSet) -> None:
    async with asyncio.timeout(WAIT_S):
        while len(pages.tabs) > 1:
            await asyncio.sleep(0.05)


async def test_a_tab_that_closes_itself_leaves_the_list_and_the_session_goes_on(
    dispatcher: Dispatcher, services: BrowserServices, origin: Origin
) -> None:
    serve(origin, "/closing", CLOSING)
    url, session = await open_session(dispatcher, origin, "self", "/opens", OPENS_CLOSING)
    await open_popup(dispatcher, services, "self", "css:#open")
    await services.engine.run(_closed, session_pages(services, "self"))
    listed = ok(await run(dispatcher, (ACT, "tabs"), session))
    assert listed.get_all("TAB") == [f'0 {url} "Opener"']


async def test_the_current_tab_closing_itself_loses_the_session(
    dispatcher: Dispatcher, services: BrowserServices, origin: Origin
) -> None:
    serve(origin, "/bye", BYE)
    _, session = await open_session(dispatcher, origin, "gone", "/opens", OPENS_CLOSING)
    await open_popup(dispatcher, services, "gone", "css:#bye")
    ok(await run(dispatcher, (ACT, "switch"), ("TAB", "1"), session))
    ok(await run(dispatcher, (ACT, "click"), ("SELECTOR", "css:#close"), session))
    await services.engine.run(_closed, session_pages(services, "gone"))
    assert error(await run(dispatcher, (ACT, "tabs"), session)) == "session_lost:gone"
