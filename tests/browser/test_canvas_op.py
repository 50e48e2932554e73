"""The canvas op on node main: present (URL or inline HTML), navigate, snapshot, hide, eval
(off by default, bounded in time and size), its requests through the same guard."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import trio

from csp_web.config import with_section
from csp_web.core.api.context import Peer
from csp_web.core.dispatch.dispatcher import Dispatcher
from protocol import Reply, Status, Task
from specialists.browser.config import SECTION, BrowserConfig, CanvasConfig, browser_section
from tests.harness import files_holding
from tests.net._origin import Origin

from .support import WAIT_S, Listener, Refusals
from .test_browser_op import error, serve, writes


@pytest.fixture
def browser_settings(browser_config: BrowserConfig) -> BrowserConfig:
    canvas = CanvasConfig(allow_eval=True, eval_timeout_ms=2000, max_eval_result_bytes=100)
    return replace(browser_config, canvas=canvas)


async def canvas(dispatcher: Dispatcher, *fields: tuple[str, str], uid: int = 1000) -> Reply:
    task = Task("canvas", "TOOL", "CANVAS_RESULT", None, fields)
    with trio.fail_after(WAIT_S):
        return await dispatcher.run(task, Peer("t", uid=uid))


async def test_present_then_snapshot_then_hide(dispatcher: Dispatcher, origin: Origin) -> None:
    url = serve(origin, "/dash", b"<title>Dashboard</title><h1>42</h1>")
    shown = await canvas(
        dispatcher, ("ACTION", "present"), ("URL", url), ("WIDTH", "640"), ("HEIGHT", "360")
    )
    assert shown.status is Status.OK, shown
    assert shown.get("SCOPE") == "[canvas]"
    assert shown.get("DATA") == "action:present,node:main"
    assert (shown.get("URL"), shown.get("WIDTH"), shown.get("HEIGHT")) == (url, "640", "360")
    snap = await canvas(dispatcher, ("ACTION", "snapshot"))
    assert snap.get("DATA") == "action:snapshot,node:main", snap
    with open(snap.get("SNAPSHOT_REF") or "", "rb") as file:
        png = file.read()
    assert png.startswith(b"\x89PNG")
    assert int.from_bytes(png[16:20], "big") == 640  # the IHDR width
    assert int.from_bytes(png[20:24], "big") == 360
    hidden = await canvas(dispatcher, ("ACTION", "hide"))
    assert hidden.get("DATA") == "action:hide,node:main"
    assert error(await canvas(dispatcher, ("ACTION", "snapshot"))) == "canvas_not_presented:main"
    audits = [
        (w["action"], w["node"], w["error"], w["snapshot"]) for w in writes(dispatcher, "audit")
    ]
    assert audits == [
        ("present", "main", None, None),
        ("snapshot", "main", None, snap.get("SNAPSHOT_REF")),
        ("hide", "main", None, None),
        ("snapshot", "main", "canvas_not_presented:main", None),
    ]


async def test_present_inline_html_then_navigate(dispatcher: Dispatcher, origin: Origin) -> None:
    shown = await canvas(dispatcher, ("ACTION", "present"), ("HTML", "<title>inline</title>hi"))
    assert shown.get("URL") == "inline", shown
    url = serve(origin, "/next", b"<title>next</title>")
    moved = await canvas(dispatcher, ("ACTION", "navigate"), ("URL", url))
    assert moved.get("DATA") == "action:navigate,node:main"
    assert moved.get("URL") == url
    await canvas(dispatcher, ("ACTION", "hide"))


async def test_eval_replies_json_within_its_bounds(dispatcher: Dispatcher) -> None:
    await canvas(dispatcher, ("ACTION", "present"), ("HTML", "<title>t</title>"))
    value = await canvas(
        dispatcher, ("ACTION", "eval"), ("EXPRESSION", "({a: 1, t: document.title})")
    )
    assert json.loads(value.get("RESULT") or "null") == {"a": 1, "t": "t"}, value
    fits = await canvas(dispatcher, ("ACTION", "eval"), ("EXPRESSION", "'x'.repeat(98)"))
    assert fits.get("RESULT") == '"' + "x" * 98 + '"'  # 100 bytes of JSON: N
    over = await canvas(dispatcher, ("ACTION", "eval"), ("EXPRESSION", "'x'.repeat(99)"))
    assert error(over) == "too_large:eval result over 100 bytes"  # N + 1
    thrown = await canvas(dispatcher, ("ACTION", "eval"), ("EXPRESSION", "nope.nope"))
    assert error(thrown).startswith("eval_failed:")
    hung = await canvas(dispatcher, ("ACTION", "eval"), ("EXPRESSION", "new Promise(() => {})"))
    assert error(hung) == "eval_failed:timeout 2000 ms"
    again = await canvas(dispatcher, ("ACTION", "snapshot"))
    assert error(again) == "session_lost:main"  # a hung page is dropped, and that is told


async def test_canvas_requests_pass_the_same_guard(
    dispatcher: Dispatcher, origin: Origin, private: Listener, refusals: Refusals
) -> None:
    page = f'<title>g</title><img src="https://img.private.test:{private.port}/a.png">'
    shown = await canvas(dispatcher, ("ACTION", "present"), ("HTML", page))
    assert shown.status is Status.OK, shown
    await refusals.wait_for([f"img.private.test:{private.port}"])
    direct = await canvas(
        dispatcher, ("ACTION", "navigate"), ("URL", f"https://private.test:{private.port}/")
    )
    assert error(direct) == "ssrf_blocked:loopback-127/8"
    assert private.connections == 0
    await canvas(dispatcher, ("ACTION", "hide"))


async def test_canvas_refusals_are_catalogue_failures(dispatcher: Dispatcher) -> None:
    cases = [
        ((("ACTION", "present"),), "invalid_field:present takes exactly one of URL or HTML"),
        ((("ACTION", "navigate"),), "missing_field:URL"),
        ((("ACTION", "snapshot"), ("NODE", "kitchen")), "unknown_node:kitchen"),
        ((("ACTION", "eval"),), "missing_field:EXPRESSION"),
        ((("ACTION", "eval"), ("EXPRESSION", "1")), "canvas_not_presented:main"),
        ((("ACTION", "present"), ("URL", "file:///etc/passwd")), "url_rejected:scheme-not-allowed"),
        (
            (("ACTION", "present"), ("HTML", "x"), ("WIDTH", "63")),
            "invalid_field:WIDTH below 64",
        ),
    ]
    for fields, expected in cases:
        reply = await canvas(dispatcher, *fields)
        assert error(reply) == expected, fields
        if not expected.endswith("WIDTH below 64"):  # the dispatcher's field check: no op's
            assert reply.get("SCOPE") == "[canvas]", reply  # every canvas error is the op's


@pytest.mark.parametrize("action", ["present", "navigate"])
async def test_a_urls_password_is_refused_and_kept_nowhere(
    dispatcher: Dispatcher, origin: Origin, action: str
) -> None:
    """url_rejected:userinfo; the audit's url has its userinfo written ``***@``."""
    url = serve(origin, "/page", b"<p>x</p>")
    secret = "s3cr3tpw-c4nv"
    given = url.replace("https://", f"https://user:{secret}@", 1)
    reply = await canvas(dispatcher, ("ACTION", action), ("URL", given))
    assert error(reply) == "url_rejected:userinfo"
    assert all(secret not in value for _, value in reply.fields)
    (audit,) = writes(dispatcher, "audit")
    assert audit["url"] == url.replace("https://", "https://***@", 1)
    assert files_holding(dispatcher.services.config.daemon.state_dir, secret) == []


async def test_eval_is_off_unless_configured(dispatcher: Dispatcher, make_config: object) -> None:
    config = dispatcher.services.config
    browser = replace(browser_section(config), canvas=CanvasConfig())
    dispatcher.services.config = with_section(config, SECTION, browser)
    reply = await canvas(dispatcher, ("ACTION", "eval"), ("EXPRESSION", "1"))
    assert error(reply) == "not_available:canvas eval is off (canvas.allow_eval)"
    assert reply.get("SCOPE") == "[canvas]"


async def test_each_canvas_action_but_hide_takes_a_browser_action(dispatcher: Dispatcher) -> None:
    """present is paid for; the snapshot that does not fit is refused before it runs;
    hiding is free, as closing a session."""
    html = ("HTML", "<title>inline</title>hi")
    shown = await canvas(dispatcher, ("ACTION", "present"), html, ("BUDGET", "browser_actions:1"))
    snap = await canvas(dispatcher, ("ACTION", "snapshot"), ("BUDGET", "browser_actions:0"))
    hidden = await canvas(dispatcher, ("ACTION", "hide"), ("BUDGET", "browser_actions:0"))
    assert (shown.status, shown.get("BUDGET_LEFT")) == (Status.OK, "browser_actions:0")
    assert (snap.status, snap.get("ERROR")) == (
        Status.PARTIAL,
        "budget_exhausted:browser_actions",
    )
    assert (hidden.status, hidden.get("BUDGET_LEFT")) == (Status.OK, "browser_actions:0")


SPIN_EVAL = "while (true) {}"


async def test_a_hung_eval_fails_in_scope_canvas_and_the_canvas_loss_is_told_once(
    dispatcher: Dispatcher,
) -> None:
    """eval's timeout drops the page (its script may still spin): that reply names the
    timeout, the owner's next action hears the loss (as a browser session's), the one after
    finds nothing presented, and a present shows again."""
    shown = await canvas(dispatcher, ("ACTION", "present"), ("HTML", "<title>t</title>"))
    assert shown.status is Status.OK, shown
    hung = await canvas(dispatcher, ("ACTION", "eval"), ("EXPRESSION", SPIN_EVAL))
    assert (error(hung), hung.get("SCOPE")) == ("eval_failed:timeout 2000 ms", "[canvas]")
    other = await canvas(dispatcher, ("ACTION", "snapshot"), uid=1001)
    assert error(other) == "canvas_not_presented:main"  # not uid 1001's canvas that went
    told = await canvas(dispatcher, ("ACTION", "snapshot"))
    assert (error(told), told.get("SCOPE")) == ("session_lost:main", "[canvas]")
    assert error(await canvas(dispatcher, ("ACTION", "snapshot"))) == "canvas_not_presented:main"
    again = await canvas(dispatcher, ("ACTION", "present"), ("HTML", "<title>t</title>"))
    assert again.status is Status.OK, again
    await canvas(dispatcher, ("ACTION", "hide"))


async def test_a_present_or_hide_after_a_lost_canvas_starts_anew_untold(
    dispatcher: Dispatcher,
) -> None:
    for after in ((("ACTION", "present"), ("HTML", "<title>n</title>")), (("ACTION", "hide"),)):
        await canvas(dispatcher, ("ACTION", "present"), ("HTML", "<title>t</title>"))
        hung = await canvas(dispatcher, ("ACTION", "eval"), ("EXPRESSION", SPIN_EVAL))
        assert error(hung) == "eval_failed:timeout 2000 ms"
        assert (await canvas(dispatcher, *after)).status is Status.OK
        snap = await canvas(dispatcher, ("ACTION", "snapshot"))
        if after[0][1] == "present":
            assert snap.status is Status.OK, snap
        else:
            assert error(snap) == "canvas_not_presented:main"  # told nothing: it hid it
    await canvas(dispatcher, ("ACTION", "hide"))


async def test_an_inline_page_whose_script_holds_its_load_times_out_as_a_page_load(
    dispatcher: Dispatcher,
) -> None:
    """Inline HTML is loaded (set_content waits for its load event): a script spinning
    there is navigation_failed:timeout at the task's TIMEOUT_MS, not at a longer bound."""
    spin = f"<title>spin</title><script>{SPIN_EVAL}</script>"
    started = trio.current_time()
    hung = await canvas(dispatcher, ("ACTION", "present"), ("HTML", spin), ("TIMEOUT_MS", "3000"))
    assert error(hung) in {"navigation_failed:timeout", "timeout_exceeded:3000ms"}, hung
    assert trio.current_time() - started < 10
    # Nothing was shown before it: nothing to tell lost.
    assert error(await canvas(dispatcher, ("ACTION", "snapshot"))) == "canvas_not_presented:main"
