"""The canvas belongs to the uid that presented it until it hides it or leaves it unused for
canvas_idle_s; inline HTML runs in a fresh context with an opaque origin, its script only
when eval is allowed."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from csp_web.config import with_section
from csp_web.core.dispatch.dispatcher import Dispatcher
from protocol import Status
from specialists.browser.canvas import LocalCanvas
from specialists.browser.config import SECTION, BrowserConfig, CanvasConfig, browser_section
from specialists.browser.services import BrowserServices
from tests.net._origin import Origin
from tests.net._origin import Reply as OriginReply

from .test_browser_op import error, serve
from .test_canvas_op import canvas

DENIED = "permission_denied:canvas main belongs to another peer"
PROBE = "[self.origin, (() => { try { return document.cookie } catch (e) { return 'denied' } })()]"


@pytest.fixture
def browser_settings(browser_config: BrowserConfig) -> BrowserConfig:
    return replace(browser_config, canvas=CanvasConfig(allow_eval=True), canvas_idle_s=300.0)


async def test_another_uid_cannot_reach_a_canvas_in_use(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    url = serve(origin, "/mine", b"<title>mine</title>")
    assert (await canvas(dispatcher, ("ACTION", "present"), ("URL", url), uid=1)).status is (
        Status.OK
    )
    other = serve(origin, "/other", b"<title>other</title>")
    for fields in (
        (("ACTION", "eval"), ("EXPRESSION", "document.title")),
        (("ACTION", "snapshot"),),
        (("ACTION", "navigate"), ("URL", other)),
        (("ACTION", "hide"),),
        (("ACTION", "present"), ("URL", other)),
        (("ACTION", "present"), ("HTML", "<title>over</title>")),
    ):
        assert error(await canvas(dispatcher, *fields, uid=2)) == DENIED, fields
    title = await canvas(dispatcher, ("ACTION", "eval"), ("EXPRESSION", "document.title"), uid=1)
    assert title.get("RESULT") == '"mine"', title  # untouched
    assert (await canvas(dispatcher, ("ACTION", "hide"), uid=1)).status is Status.OK
    shown = await canvas(dispatcher, ("ACTION", "present"), ("URL", other), uid=2)
    assert shown.status is Status.OK, shown  # hidden: free for anyone
    assert error(await canvas(dispatcher, ("ACTION", "snapshot"), uid=1)) == DENIED


async def test_a_canvas_unused_for_canvas_idle_s_is_hidden_for_the_next_uid(
    dispatcher: Dispatcher, services: BrowserServices, origin: Origin
) -> None:
    now = [100.0]
    services.canvas_claims.clock = lambda: now[0]
    url = serve(origin, "/mine", b"<title>mine</title>")
    assert (await canvas(dispatcher, ("ACTION", "present"), ("URL", url), uid=1)).status is (
        Status.OK
    )
    now[0] += 299.0
    assert error(await canvas(dispatcher, ("ACTION", "snapshot"), uid=2)) == DENIED  # N - 1 s
    now[0] += 1.0
    taken = await canvas(dispatcher, ("ACTION", "snapshot"), uid=2)  # N: uid 1's page is gone
    assert error(taken) == "canvas_not_presented:main"
    assert error(await canvas(dispatcher, ("ACTION", "snapshot"), uid=1)) == (
        "canvas_not_presented:main"
    )
    mine = await canvas(dispatcher, ("ACTION", "present"), ("HTML", "<title>2</title>"), uid=2)
    assert mine.status is Status.OK, mine
    assert error(await canvas(dispatcher, ("ACTION", "hide"), uid=1)) == DENIED


async def test_inline_html_runs_in_an_opaque_origin_without_earlier_storage(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    origin.routes["/login"] = lambda _s: OriginReply(
        headers=[("content-type", "text/html"), ("set-cookie", "sid=secret; Path=/")],
        body=b"<title>in</title>",
    )
    url = origin.url("origin.test", "/login")
    assert (await canvas(dispatcher, ("ACTION", "present"), ("URL", url))).status is Status.OK
    before = await canvas(dispatcher, ("ACTION", "eval"), ("EXPRESSION", PROBE))
    assert json.loads(before.get("RESULT") or "null")[1] == "sid=secret", before
    shown = await canvas(dispatcher, ("ACTION", "present"), ("HTML", "<title>inline</title>"))
    assert shown.get("URL") == "inline", shown
    after = await canvas(dispatcher, ("ACTION", "eval"), ("EXPRESSION", PROBE))
    assert json.loads(after.get("RESULT") or "null") == ["null", "denied"], after
    back = await canvas(dispatcher, ("ACTION", "navigate"), ("URL", url))
    assert back.get("URL") == url, back  # from inline HTML, URLs run in a fresh context again
    await canvas(dispatcher, ("ACTION", "hide"))


async def _title(node: LocalCanvas) -> str:
    assert node._pages is not None
    title: str = await node._pages.page.title()
    return title


@pytest.mark.parametrize(("allow_eval", "title"), [(False, "t"), (True, "ran")])
async def test_inline_html_script_runs_only_when_eval_is_allowed(
    dispatcher: Dispatcher, services: BrowserServices, allow_eval: bool, title: str
) -> None:
    config = dispatcher.services.config
    browser = replace(browser_section(config), canvas=CanvasConfig(allow_eval=allow_eval))
    dispatcher.services.config = with_section(config, SECTION, browser)
    page = "<title>t</title><script>document.title = 'ran'</script>"
    assert (await canvas(dispatcher, ("ACTION", "present"), ("HTML", page))).status is Status.OK
    node = services.canvas["main"]
    assert isinstance(node, LocalCanvas)
    assert await services.engine.run(_title, node) == title
