"""Pages lost between actions (renderer crashed, page or context closed) are told
once as session_lost; a page that allocates without bound crashes alone at the JS heap cap;
a page that spins times out and its session's next action works on a fresh page; the canvas
drops a spinning or crashed page."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any

import pytest

from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.net import GuardConfig
from protocol import Status
from specialists.browser.canvas import LocalCanvas
from specialists.browser.config import BrowserConfig
from specialists.browser.pages import PageSet
from specialists.browser.services import BrowserServices
from tests.net._origin import Origin

from .support import wait_gone
from .test_browser_op import FORM, error, open_session, run, serve, session_pages
from .test_canvas_op import canvas

# Each push is 8 MB of doubles, kept: the heap only grows until V8's cap stops it.
HOG = b"<title>hog</title><script>const a = []; while (true) a.push(new Array(1e6).fill(1.5))"
HOG += b"</script>"
SPIN = b"<title>spin</title><script>while (true) {}</script>"
# Which timer ends a 3 s action first, Playwright's (its own code) or the task's (0.25 s later),
# is a race the engine's round trip decides on a loaded host: either is the right answer.
TIMED_OUT = {"navigation_failed:timeout", "timeout_exceeded:3000ms"}


@pytest.fixture(scope="module")
def browser_config(browser_config: BrowserConfig) -> BrowserConfig:
    """This module's Chromium caps each renderer's heap at 64 MB: the hog meets it soon."""
    return replace(browser_config, max_js_heap_mb=64)


async def _crash_renderer(pages: PageSet) -> None:
    cdp = await pages.context.new_cdp_session(pages.page)
    # Page.crash never answers (its target is gone): sent, not awaited (wait_gone waits).
    crash = asyncio.get_running_loop().create_task(cdp.send("Page.crash"))
    _SENT.add(crash)
    crash.add_done_callback(_retrieve)


_SENT: set[asyncio.Task[Any]] = set()  # the loop keeps only weak references to tasks


def _retrieve(task: asyncio.Task[Any]) -> None:
    _SENT.discard(task)
    if not task.cancelled():
        task.exception()  # the target closed under it: expected, and read


async def _close_page(pages: PageSet) -> None:
    await pages.page.close()


async def _close_context(pages: PageSet) -> None:
    await pages.context.close()


@pytest.mark.parametrize("lose", [_crash_renderer, _close_page, _close_context])
async def test_a_page_lost_between_actions_is_told_once_as_session_lost(
    dispatcher: Dispatcher,
    services: BrowserServices,
    origin: Origin,
    lose: Callable[[PageSet], Coroutine[Any, Any, None]],
) -> None:
    _, session = await open_session(dispatcher, origin, "gone")
    pages = session_pages(services, "gone")
    await services.engine.run(lose, pages)
    await services.engine.run(wait_gone, pages)
    assert error(await run(dispatcher, ("ACTION", "extract"), session)) == "session_lost:gone"
    assert services.sessions.count() == 0  # dropped: the name is free
    again = await run(dispatcher, ("ACTION", "extract"), session)
    assert (again.status, again.get("URL")) == (Status.OK, "about:blank"), again  # a new one


async def test_a_page_that_allocates_without_bound_crashes_alone(
    dispatcher: Dispatcher, services: BrowserServices, origin: Origin
) -> None:
    _, calm = await open_session(dispatcher, origin, "calm")
    hog = ("SESSION", "hog")
    url = serve(origin, "/hog", HOG)
    crashed = await run(dispatcher, ("ACTION", "navigate"), ("TARGET_URL", url), hog)
    assert error(crashed) == "page_crashed:renderer crashed"
    kept = await run(dispatcher, ("ACTION", "extract"), ("SELECTOR", "css:#head"), calm)
    assert (kept.status, kept.get("CONTENT")) == (Status.OK, "Hello form"), kept
    assert error(await run(dispatcher, ("ACTION", "extract"), hog)) == "session_lost:hog"
    assert services.engine.stats.crashes == 0  # the browser itself stayed up


@pytest.mark.slow
async def test_a_spinning_page_times_out_and_its_session_is_told_lost_once_then_works(
    dispatcher: Dispatcher, services: BrowserServices, origin: Origin
) -> None:
    session = ("SESSION", "spin")
    url = serve(origin, "/spin", SPIN)
    hung = await run(
        dispatcher, ("ACTION", "navigate"), ("TARGET_URL", url), session, ("TIMEOUT_MS", "3000")
    )
    assert error(hung) in TIMED_OUT
    assert services.sessions.count() == 0  # its page closed: it may still spin
    # The timeout's reply named the timeout: the next action hears the loss, never an OK on
    # a new, empty page.
    assert error(await run(dispatcher, ("ACTION", "extract"), session)) == "session_lost:spin"
    form = serve(origin, "/form", FORM)
    after = await run(dispatcher, ("ACTION", "navigate"), ("TARGET_URL", form), session)
    assert (after.status, after.get("TITLE")) == (Status.OK, "Form"), after


@pytest.mark.slow
async def test_a_session_made_again_under_a_timed_out_name_is_not_told_lost(
    dispatcher: Dispatcher,
    services: BrowserServices,
    origin: Origin,
    guard: GuardConfig,
    browser_settings: BrowserConfig,
) -> None:
    """A saved login (STATE) opens a session under the name before any action heard the
    timeout's loss: that loss is moot, and the new session's actions run on it."""
    session = ("SESSION", "spin")
    url = serve(origin, "/spin", SPIN)
    hung = await run(
        dispatcher, ("ACTION", "navigate"), ("TARGET_URL", url), session, ("TIMEOUT_MS", "3000")
    )
    assert error(hung) in TIMED_OUT
    await services.sessions.open_with_state("spin", "uid:1000", browser_settings, guard, {})
    form = serve(origin, "/form", FORM)
    after = await run(dispatcher, ("ACTION", "navigate"), ("TARGET_URL", form), session)
    assert (after.status, after.get("TITLE")) == (Status.OK, "Form"), after
    assert (await run(dispatcher, ("ACTION", "close"), session)).status is Status.OK
    fresh = await run(dispatcher, ("ACTION", "extract"), session)  # closed by its client
    assert (fresh.status, fresh.get("URL")) == (Status.OK, "about:blank"), fresh


@pytest.mark.slow
async def test_a_spinning_canvas_page_is_dropped_at_its_timeout(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    url = serve(origin, "/spin", SPIN)
    hung = await canvas(dispatcher, ("ACTION", "present"), ("URL", url), ("TIMEOUT_MS", "3000"))
    assert error(hung) in TIMED_OUT
    assert error(await canvas(dispatcher, ("ACTION", "snapshot"))) == "canvas_not_presented:main"
    shown = await canvas(dispatcher, ("ACTION", "present"), ("HTML", "<title>calm</title>"))
    assert shown.status is Status.OK, shown


async def test_a_crashed_canvas_page_is_told_lost_once(
    dispatcher: Dispatcher, services: BrowserServices
) -> None:
    shown = await canvas(dispatcher, ("ACTION", "present"), ("HTML", "<title>t</title>"))
    assert shown.status is Status.OK, shown
    node = services.canvas["main"]
    assert isinstance(node, LocalCanvas)
    assert node._pages is not None
    pages = node._pages
    await services.engine.run(_crash_renderer, pages)
    await services.engine.run(wait_gone, pages)
    assert error(await canvas(dispatcher, ("ACTION", "snapshot"))) == "session_lost:main"
    assert error(await canvas(dispatcher, ("ACTION", "snapshot"))) == "canvas_not_presented:main"
