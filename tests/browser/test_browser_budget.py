"""browser_actions (SPEC D-3): each action is charged before it runs, in a session under the
budget of the frame that opened it unless a later frame names another."""

from __future__ import annotations

from dataclasses import replace

import pytest

from csp_web.core.dispatch.dispatcher import Dispatcher
from protocol import Status
from specialists.browser.config import BrowserConfig
from tests.net._origin import Origin

from .test_browser_op import FORM, run, serve


@pytest.fixture
def browser_settings(browser_config: BrowserConfig) -> BrowserConfig:
    return replace(browser_config, max_screenshot_bytes=10_000_000)


@pytest.mark.slow  # Chromium
async def test_a_session_keeps_its_opening_frames_budget_for_its_later_actions(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    url = serve(origin, "/form", FORM)
    session = ("SESSION", "paid")
    opened = await run(
        dispatcher,
        ("ACTION", "navigate"),
        ("TARGET_URL", url),
        session,
        ("BUDGET", "browser_actions:2"),
    )
    second = await run(dispatcher, ("ACTION", "screenshot"), session)  # N = 2, its budget
    third = await run(dispatcher, ("ACTION", "screenshot"), session)  # N + 1
    renewed = await run(
        dispatcher, ("ACTION", "screenshot"), session, ("BUDGET", "browser_actions:1")
    )
    after = await run(dispatcher, ("ACTION", "screenshot"), session)  # the renewed one's, spent
    closed = await run(dispatcher, ("ACTION", "close"), session)  # closing is never refused
    assert [r.get("BUDGET_LEFT") for r in (opened, second)] == [
        "browser_actions:1",
        "browser_actions:0",
    ]
    assert second.status is Status.OK
    assert (third.status, third.get("ERROR")) == (
        Status.PARTIAL,
        "budget_exhausted:browser_actions",
    )
    assert (renewed.status, renewed.get("BUDGET_LEFT")) == (Status.OK, "browser_actions:0")
    assert (after.status, after.get("ERROR")) == (
        Status.PARTIAL,
        "budget_exhausted:browser_actions",
    )
    assert closed.status is Status.OK


@pytest.mark.slow  # Chromium
async def test_a_one_shot_action_is_charged_too(dispatcher: Dispatcher, origin: Origin) -> None:
    url = serve(origin, "/form", FORM)
    at = await run(
        dispatcher, ("ACTION", "navigate"), ("TARGET_URL", url), ("BUDGET", "browser_actions:1")
    )
    over = await run(
        dispatcher, ("ACTION", "navigate"), ("TARGET_URL", url), ("BUDGET", "browser_actions:0")
    )
    assert (at.status, at.get("BUDGET_LEFT")) == (Status.OK, "browser_actions:0")
    assert (over.status, over.get("ERROR"), over.get("DATA")) == (
        Status.PARTIAL,
        "budget_exhausted:browser_actions",
        "none",
    )
