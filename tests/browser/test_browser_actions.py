"""The actions sites need, end to end on a real Chromium behind the guard proxy: keys, hover,
select, check, scroll, waits, history and dialogs (tabs, uploads and pdf have their own
modules)."""

from __future__ import annotations

import pytest
import trio

from csp_web.core.api.errors import OpError
from csp_web.core.dispatch.dispatcher import Dispatcher
from protocol import Reply, Status
from specialists.browser.keys import MAX_KEY_CHARS, check_key
from specialists.browser.services import BrowserServices
from tests.net._origin import Origin

from .actions_support import DIALOGS, LATE, LONG, ORDERED, SHOP, page_eval
from .test_browser_op import error, open_session, run, serve, writes

ACT = "ACTION"


async def shop(dispatcher: Dispatcher, origin: Origin, name: str) -> tuple[str, tuple[str, str]]:
    serve(origin, "/ordered", ORDERED)
    return await open_session(dispatcher, origin, name, "/shop", SHOP)


def ok(reply: Reply) -> Reply:
    assert reply.status is Status.OK, reply
    return reply


# ---- press --------------------------------------------------------------------------------


async def test_press_enter_in_a_field_submits_its_form_and_replies_the_landing_url(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    _, session = await shop(dispatcher, origin, "press")
    await run(dispatcher, (ACT, "type"), ("SELECTOR", "css:#q"), ("VALUE", "socks"), session)
    reply = ok(
        await run(dispatcher, (ACT, "press"), ("SELECTOR", "css:#q"), ("KEY", "Enter"), session)
    )
    landed = origin.url("origin.test", "/ordered?q=socks&size=s&doc=")
    assert reply.get("DATA") == f"action:press,url:{landed}"
    assert (reply.get("URL"), reply.get("SELECTOR")) == (landed, "css:#q")


async def test_press_a_chord_on_an_element_reaches_it_with_its_modifier(
    dispatcher: Dispatcher, services: BrowserServices, origin: Origin
) -> None:
    _, session = await shop(dispatcher, origin, "chord")
    ok(await run(dispatcher, (ACT, "press"), ("SELECTOR", "css:#q"), ("KEY", "Control+a"), session))
    assert await page_eval(services, "chord", "document.title") == "key:a+ctrl"


async def test_press_without_an_element_types_into_whatever_has_focus(
    dispatcher: Dispatcher, services: BrowserServices, origin: Origin
) -> None:
    _, session = await shop(dispatcher, origin, "focus")
    await run(dispatcher, (ACT, "click"), ("SELECTOR", "css:#q"), session)
    reply = ok(await run(dispatcher, (ACT, "press"), ("KEY", "x"), session))
    assert reply.get("SELECTOR") is None
    assert await page_eval(services, "focus", "document.getElementById('q').value") == "x"


@pytest.mark.parametrize(
    "key", ["Enterr", "Control+Foo", "a+Control", "Shift+", "Control+Shift+Alt+Meta+Shift+a", " "]
)
async def test_press_refuses_what_is_not_a_playwright_key_before_touching_the_page(
    dispatcher: Dispatcher, key: str
) -> None:
    reply = await run(dispatcher, (ACT, "press"), ("KEY", key))
    assert error(reply).startswith("invalid_field:KEY")


def test_a_key_of_max_chars_is_checked_and_one_more_is_refused() -> None:
    at_n = "ControlOrMeta+ControlOrMeta+ControlOrMeta+ControlOrMeta+PageDown"
    assert len(at_n) == MAX_KEY_CHARS
    assert check_key(at_n) == at_n
    with pytest.raises(OpError):
        check_key(at_n + "x")


@pytest.mark.parametrize("key", ["Enter", "Control+A", "Shift+Tab", "Control++", "+", "é", "F12"])
def test_playwrights_key_names_and_single_characters_pass(key: str) -> None:
    assert check_key(key) == key


async def test_a_key_one_past_the_fields_cap_is_invalid_before_the_action(
    dispatcher: Dispatcher,
) -> None:
    reply = await run(dispatcher, (ACT, "press"), ("KEY", "a" * (MAX_KEY_CHARS + 1)))
    assert error(reply).startswith("invalid_field:KEY")


# ---- hover, select, check -------------------------------------------------------------------


async def test_hover_moves_the_pointer_over_the_element(
    dispatcher: Dispatcher, services: BrowserServices, origin: Origin
) -> None:
    _, session = await shop(dispatcher, origin, "hover")
    reply = ok(await run(dispatcher, (ACT, "hover"), ("SELECTOR", "css:#menu"), session))
    assert reply.get("SELECTOR") == "css:#menu"
    assert await page_eval(services, "hover", "document.title") == "menu open"


async def test_select_picks_an_option_by_its_value_or_its_label(
    dispatcher: Dispatcher, services: BrowserServices, origin: Origin
) -> None:
    _, session = await shop(dispatcher, origin, "select")
    size = "document.getElementById('size').value"
    ok(await run(dispatcher, (ACT, "select"), ("SELECTOR", "css:#size"), ("VALUE", "m"), session))
    assert await page_eval(services, "select", size) == "m"
    ok(
        await run(
            dispatcher, (ACT, "select"), ("SELECTOR", "css:#size"), ("VALUE", "Large"), session
        )
    )
    assert await page_eval(services, "select", size) == "l"


async def test_select_of_an_option_that_is_not_there_fails_at_once(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    _, session = await shop(dispatcher, origin, "nosuch")
    fields = ((ACT, "select"), ("SELECTOR", "css:#size"), ("VALUE", "XL"), session)
    with trio.fail_after(10):  # far under the task's 30 s deadline: no wait for one to appear
        reply = await run(dispatcher, *fields)
    assert error(reply) == "selector_not_found:css:#size: no such option"


async def test_check_and_uncheck_set_a_checkbox_whatever_it_was(
    dispatcher: Dispatcher, services: BrowserServices, origin: Origin
) -> None:
    _, session = await shop(dispatcher, origin, "check")
    checked = "document.getElementById('gift').checked"
    for action, expected in (("check", True), ("check", True), ("uncheck", False)):
        ok(await run(dispatcher, (ACT, action), ("SELECTOR", "css:#gift"), session))
        assert await page_eval(services, "check", checked) is expected


async def test_a_secret_select_value_never_reaches_the_audit(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    _, session = await shop(dispatcher, origin, "secret")
    fields = ((ACT, "select"), ("SELECTOR", "css:#size"), ("VALUE", "Medium"), session)
    ok(await run(dispatcher, *fields, ("SECRET", "true")))
    audits = [w for w in writes(dispatcher, "audit") if w["action"] == "select"]
    assert [w["value"] for w in audits] == ["<secret>"]


# ---- scroll ---------------------------------------------------------------------------------


async def test_scroll_by_pixels_moves_the_page_down_and_back_up(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    _, session = await open_session(dispatcher, origin, "scroll", "/long", LONG)
    down = ok(await run(dispatcher, (ACT, "scroll"), ("PIXELS", "1200"), session))
    assert down.get("SCROLL_Y") == "1200"
    up = ok(await run(dispatcher, (ACT, "scroll"), ("PIXELS", "-200"), session))
    assert up.get("SCROLL_Y") == "1000"


async def test_scroll_to_an_element_brings_it_into_view(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    _, session = await open_session(dispatcher, origin, "into", "/long", LONG)
    reply = ok(await run(dispatcher, (ACT, "scroll"), ("SELECTOR", "css:#s59"), session))
    assert int(reply.get("SCROLL_Y") or 0) > 20_000
    assert reply.get("SELECTOR") == "css:#s59"


@pytest.mark.parametrize(("pixels", "good"), [("100000", True), ("100001", False)])
async def test_scroll_pixels_are_bounded_at_n(
    dispatcher: Dispatcher, origin: Origin, pixels: str, good: bool
) -> None:
    _, session = await open_session(dispatcher, origin, "bound", "/long", LONG)
    for sign in ("", "-"):
        reply = await run(dispatcher, (ACT, "scroll"), ("PIXELS", sign + pixels), session)
        if good:
            ok(reply)
        else:
            assert error(reply).startswith("invalid_field:PIXELS")


async def test_scroll_takes_an_element_or_pixels_never_both_nor_neither(
    dispatcher: Dispatcher,
) -> None:
    both = await run(dispatcher, (ACT, "scroll"), ("PIXELS", "5"), ("SELECTOR", "css:p"))
    neither = await run(dispatcher, (ACT, "scroll"))
    assert error(both).startswith("invalid_field:")
    assert error(neither).startswith("invalid_field:")


# ---- wait -----------------------------------------------------------------------------------


@pytest.mark.slow
async def test_wait_returns_once_text_an_element_or_a_url_has_come(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    for field in (
        ("TEXT", "Results are ready"),
        ("SELECTOR", "css:#late"),
        ("URL", "**/late/done"),
    ):
        _, session = await open_session(dispatcher, origin, "wait", "/late", LATE)
        reply = ok(await run(dispatcher, (ACT, "wait"), field, session))
        assert reply.get("URL") == origin.url("origin.test", "/late/done"), field


@pytest.mark.slow
async def test_wait_for_what_never_comes_is_wait_timeout_and_keeps_the_session(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    _, session = await open_session(dispatcher, origin, "never", "/late", LATE)
    for field in (("TEXT", "never shown"), ("SELECTOR", "css:#never"), ("URL", "**/nowhere")):
        reply = await run(dispatcher, (ACT, "wait"), field, session, ("TIMEOUT_MS", "1500"))
        assert error(reply).startswith("wait_timeout:"), field
    ok(await run(dispatcher, (ACT, "extract"), ("SELECTOR", "css:#late"), session))


async def test_wait_ms_holds_the_page_that_long(dispatcher: Dispatcher, origin: Origin) -> None:
    _, session = await open_session(dispatcher, origin, "ms", "/late", LATE)
    reply = ok(await run(dispatcher, (ACT, "wait"), ("WAIT_MS", "500"), session))
    assert reply.get("URL") == origin.url("origin.test", "/late/done")  # the page went on


@pytest.mark.parametrize(
    ("wait_ms", "code"), [("120000", "wait_timeout"), ("120001", "invalid_field")]
)
async def test_wait_ms_past_the_deadline_fails_at_once_and_past_its_cap_is_invalid(
    dispatcher: Dispatcher, wait_ms: str, code: str
) -> None:
    with trio.fail_after(10):
        reply = await run(dispatcher, (ACT, "wait"), ("WAIT_MS", wait_ms), ("TIMEOUT_MS", "5000"))
    assert error(reply).startswith(f"{code}:")


async def test_wait_takes_exactly_one_thing_to_wait_for(dispatcher: Dispatcher) -> None:
    assert error(await run(dispatcher, (ACT, "wait"))).startswith("missing_field:")
    two = await run(dispatcher, (ACT, "wait"), ("TEXT", "a"), ("WAIT_MS", "5"))
    assert error(two).startswith("invalid_field:")


# ---- back, forward, reload --------------------------------------------------------------


async def test_back_forward_and_reload_walk_the_sessions_history(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    first, session = await shop(dispatcher, origin, "history")
    second = serve(origin, "/long", LONG)
    ok(await run(dispatcher, (ACT, "navigate"), ("TARGET_URL", second), session))
    back = ok(await run(dispatcher, (ACT, "back"), session))
    assert (back.get("URL"), back.get("TITLE")) == (first, "Shop")
    forward = ok(await run(dispatcher, (ACT, "forward"), session))
    assert (forward.get("URL"), forward.get("TITLE")) == (second, "Long")
    reload = ok(await run(dispatcher, (ACT, "reload"), session))
    assert (reload.get("URL"), reload.get("HTTP_STATUS")) == (second, "200")
    assert error(await run(dispatcher, (ACT, "forward"), session)) == (
        "action_failed:no page to go forward to"
    )


@pytest.mark.parametrize("action", ["back", "forward", "dialog", "tabs", "switch", "close_tab"])
async def test_actions_on_a_kept_page_need_a_session(dispatcher: Dispatcher, action: str) -> None:
    reply = await run(dispatcher, (ACT, action), ("TAB", "0"), ("ACCEPT", "true"))
    assert error(reply).startswith("missing_field:SESSION")


# ---- dialogs --------------------------------------------------------------------------------


async def test_an_unarmed_dialog_is_dismissed_as_before(
    dispatcher: Dispatcher, services: BrowserServices, origin: Origin
) -> None:
    _, session = await open_session(dispatcher, origin, "plain", "/dialogs", DIALOGS)
    for button, title in (("confirm", "no"), ("prompt", "name:null"), ("alert", "after alert")):
        ok(await run(dispatcher, (ACT, "click"), ("SELECTOR", f"css:#{button}"), session))
        assert await page_eval(services, "plain", "document.title") == title


async def test_dialog_answers_the_next_dialog_only(
    dispatcher: Dispatcher, services: BrowserServices, origin: Origin
) -> None:
    _, session = await open_session(dispatcher, origin, "armed", "/dialogs", DIALOGS)
    title = "document.title"
    armed = ok(await run(dispatcher, (ACT, "dialog"), ("ACCEPT", "true"), session))
    assert armed.get("DIALOG") == "accept"
    ok(await run(dispatcher, (ACT, "click"), ("SELECTOR", "css:#confirm"), session))
    assert await page_eval(services, "armed", title) == "yes"
    ok(await run(dispatcher, (ACT, "click"), ("SELECTOR", "css:#confirm"), session))
    assert await page_eval(services, "armed", title) == "no"  # the answer was used once
    prompt = ((ACT, "dialog"), ("ACCEPT", "true"), ("VALUE", "Ada"), ("SECRET", "true"))
    ok(await run(dispatcher, *prompt, session))
    ok(await run(dispatcher, (ACT, "click"), ("SELECTOR", "css:#prompt"), session))
    assert await page_eval(services, "armed", title) == "name:Ada"
    dismiss = ok(await run(dispatcher, (ACT, "dialog"), ("ACCEPT", "false"), session))
    assert dismiss.get("DIALOG") == "dismiss"
    ok(await run(dispatcher, (ACT, "click"), ("SELECTOR", "css:#prompt"), session))
    assert await page_eval(services, "armed", title) == "name:null"
    values = [w["value"] for w in writes(dispatcher, "audit") if w["action"] == "dialog"]
    assert values == [None, "<secret>", None]


async def test_dialog_needs_accept(dispatcher: Dispatcher, origin: Origin) -> None:
    _, session = await open_session(dispatcher, origin, "noaccept", "/dialogs", DIALOGS)
    assert error(await run(dispatcher, (ACT, "dialog"), session)) == "missing_field:ACCEPT"


PROMPTS_FOREVER = b"""<!doctype html><title>Nag</title><p id="p">nag</p><script>
setInterval(() => { document.title = 'asked:' + prompt('Subscribe?'); }, 10);
</script>
<button id="spin" onclick="while (true) { prompt('Again?'); }">spin</button>"""


def within_deadline(reply: Reply) -> bool:
    """Whether ``reply`` is OK; else it must be its deadline's answer. Each prompt is answered
    at once, so the page still serves between them, but on a loaded host (CI at load 2: the
    click itself) an action may not finish by its deadline: then the answer is the deadline's,
    never a hang or another error."""
    if reply.status is Status.OK:
        return True
    code = error(reply)
    assert code == "navigation_failed:timeout" or code.startswith("timeout_exceeded:"), reply
    return False


@pytest.mark.slow
async def test_a_page_that_prompts_forever_cannot_hold_the_session(
    dispatcher: Dispatcher, services: BrowserServices, origin: Origin
) -> None:
    _, session = await open_session(dispatcher, origin, "nag", "/nag", PROMPTS_FOREVER)
    got = ok(await run(dispatcher, (ACT, "extract"), ("SELECTOR", "css:#p"), session))
    assert got.get("CONTENT") == "nag"
    ok(await run(dispatcher, (ACT, "dialog"), ("ACCEPT", "true"), ("VALUE", "no"), session))
    ok(await run(dispatcher, (ACT, "wait"), ("TEXT", "nag"), session))
    spin = ((ACT, "click"), ("SELECTOR", "css:#spin"), session)
    with trio.fail_after(20):  # the click is done; its handler prompts on and on
        clicked = await run(dispatcher, *spin)
    with trio.fail_after(20):  # a prompt loop: an answer by the deadline, never a hang
        after = await run(dispatcher, (ACT, "extract"), session, ("TIMEOUT_MS", "3000"))
    if not within_deadline(clicked):  # its page closed: the extract is told so, once
        assert error(after) == "session_lost:nag", after
    elif within_deadline(after):
        assert "nag" in (after.get("CONTENT") or ""), after
    ok(
        await run(
            dispatcher,
            (ACT, "navigate"),
            ("TARGET_URL", origin.url("origin.test", "/nag")),
            ("SESSION", "next"),
        )
    )


# ---- landings -------------------------------------------------------------------------------

TO_BLOB = b"""<!doctype html><title>Blob</title><script>
setTimeout(() => {
  location.href = URL.createObjectURL(new Blob(['<title>Inside</title>'], {type: 'text/html'}));
}, 300);
</script>"""


async def test_a_wait_that_lands_on_a_url_the_gate_refuses_fails_with_the_gates_code(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    url, session = await open_session(dispatcher, origin, "blob", "/blob", TO_BLOB)
    landed = await run(dispatcher, (ACT, "wait"), ("URL", "blob:**"), session)
    assert error(landed).startswith("url_rejected:")
    back = ok(await run(dispatcher, (ACT, "back"), session))
    assert back.get("URL") == url
