"""A screenshot's pixel size is known before Chromium draws it: past Chromium's own bound
(``pages.MAX_SHOT_SIDE_PX`` a side) it is too_large at once and the session stays; and a
Playwright timeout names what timed out (a page load, or the action the deadline cut)."""

from __future__ import annotations

import time

import pytest

from csp_web.core.dispatch.dispatcher import Dispatcher
from protocol import Status
from specialists.browser.pages import MAX_SHOT_SIDE_PX
from tests.net._origin import Origin
from tests.net._origin import Reply as OriginReply

from .test_browser_op import error, open_session, run
from .test_browser_snapshot import png_size, ref_of, snapshot

SHOT = "screenshot"


def sized(width: int, height: int) -> bytes:
    """A page exactly ``width`` x ``height`` CSS px (the reviewer's huge page, scaled)."""
    box = f"width:{width}px;height:{height}px;background:linear-gradient(red,blue)"
    return f'<title>big</title><body style="margin:0"><div style="{box}">x</div>'.encode()


@pytest.mark.slow
async def test_a_full_page_screenshot_of_a_huge_page_is_too_large_at_once_and_keeps_the_session(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    _, session = await open_session(dispatcher, origin, "huge", "/huge", sized(100_000, 1_000_000))
    started = time.monotonic()
    shot = await run(
        dispatcher, ("ACTION", SHOT), ("FULL_PAGE", "true"), ("TIMEOUT_MS", "20000"), session
    )
    assert error(shot) == (
        f"too_large:page 100000x1000000 px, over {MAX_SHOT_SIDE_PX} px a side"
    ), shot
    assert shot.get("SCOPE") == "[browser]"
    assert time.monotonic() - started < 10  # at once, not at the 20 s deadline
    kept = await run(dispatcher, ("ACTION", "extract"), ("SELECTOR", "css:title"), session)
    assert (kept.status, kept.get("CONTENT")) == (Status.OK, "big"), kept  # not session_lost
    labels = (("ACTION", SHOT), ("LABELS", "true"), ("FULL_PAGE", "true"), session)
    labelled = await run(dispatcher, *labels)
    assert error(labelled).startswith("too_large:page 100000x1000000 px"), labelled


@pytest.mark.slow
async def test_a_full_page_screenshot_is_taken_at_the_side_bound_and_refused_one_past_it(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    bound = MAX_SHOT_SIDE_PX
    _, session = await open_session(dispatcher, origin, "edge", "/n", sized(1000, bound))
    full = (("ACTION", SHOT), ("FULL_PAGE", "true"), session)
    at = await run(dispatcher, *full)
    assert at.status is Status.OK, at
    assert png_size(at.get("SCREENSHOT_REF") or "") == (1280, bound)  # the viewport's width
    _, session = await open_session(dispatcher, origin, "edge", "/n1", sized(1000, bound + 1))
    past = await run(dispatcher, *full)
    assert error(past) == f"too_large:page 1280x{bound + 1} px, over {bound} px a side"
    wide = await open_session(dispatcher, origin, "wide", "/w1", sized(bound + 1, 10))
    assert error(await run(dispatcher, ("ACTION", SHOT), ("FULL_PAGE", "true"), wide[1])) == (
        f"too_large:page {bound + 1}x720 px, over {bound} px a side"
    )


BIG_BUTTON = (
    b'<title>b</title><body style="margin:0">'
    b'<button style="display:block;width:100000px;height:1000000px">Huge</button>'
)


@pytest.mark.slow
async def test_an_element_screenshot_past_the_side_bound_is_too_large_at_once(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    _, session = await open_session(dispatcher, origin, "el", "/el", BIG_BUTTON)
    started = time.monotonic()
    by_selector = await run(
        dispatcher, ("ACTION", SHOT), ("SELECTOR", "css:button"), ("TIMEOUT_MS", "20000"), session
    )
    assert error(by_selector) == (
        f"too_large:element 100000x1000000 px, over {MAX_SHOT_SIDE_PX} px a side"
    )
    content = (await snapshot(dispatcher, session)).get("CONTENT") or ""
    by_ref = await run(
        dispatcher, ("ACTION", SHOT), ("REF", ref_of(content, 'button "Huge"')), session
    )
    assert error(by_ref).startswith("too_large:element 100000x1000000 px"), by_ref
    assert time.monotonic() - started < 10


DISABLED = b'<title>d</title><button id="b" disabled>never</button>'


async def test_an_action_playwright_timed_out_is_timeout_exceeded_not_navigation_failed(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    """A click on a button that never becomes enabled: Playwright's own timeout (set to what
    the deadline leaves) ends it. Nothing navigated: the reply is the deadline's, as C-4, and
    so the same whichever ends it first on a loaded host, Playwright's timer or the task's
    (the translation itself: test_browser_parts)."""
    _, session = await open_session(dispatcher, origin, "off", "/off", DISABLED)
    click = await run(
        dispatcher, ("ACTION", "click"), ("SELECTOR", "css:#b"), ("TIMEOUT_MS", "2000"), session
    )
    assert error(click) == "timeout_exceeded:2000ms", click


SVG = (
    b'<svg xmlns="http://www.w3.org/2000/svg" width="300" height="200">'
    b'<rect width="300" height="200" fill="red"/></svg>'
)


async def test_a_full_page_screenshot_of_a_document_without_a_body_is_its_viewport(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    """Playwright measures a full page by its body and waits until it has one: an SVG
    document never does, so its whole page is the viewport, shot at once."""
    origin.routes["/pic.svg"] = lambda _seen: OriginReply(
        headers=[("content-type", "image/svg+xml")], body=SVG
    )
    url = origin.url("origin.test", "/pic.svg")
    session = ("SESSION", "svg")
    went = await run(dispatcher, ("ACTION", "navigate"), ("TARGET_URL", url), session)
    assert went.status is Status.OK, went
    full = (("ACTION", SHOT), ("FULL_PAGE", "true"), ("TIMEOUT_MS", "5000"), session)
    shot = await run(dispatcher, *full)
    assert shot.status is Status.OK, shot
    assert png_size(shot.get("SCREENSHOT_REF") or "") == (1280, 720)
