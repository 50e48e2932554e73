"""The browser op end to end: frames through the dispatcher, a real Chromium, real HTTPS
origins behind the guard proxy."""

from __future__ import annotations

import json
import os

import pytest
import trio

from csp_web.core.api.context import Peer
from csp_web.core.dispatch.dispatcher import Dispatcher
from protocol import Reply, Status, Task
from specialists.browser.ops_browser import HANDLERS
from specialists.browser.pages import PageSet
from specialists.browser.services import BrowserServices
from tests.harness import files_holding, outbox_of
from tests.net._origin import Origin
from tests.net._origin import Reply as OriginReply

from .support import WAIT_S

FORM = b"""<html><head><title>Form</title></head><body>
<h1 id="head" data-kind="greeting">Hello form</h1>
<input id="name" value="">
<button id="go" onclick="document.title = 'clicked:' + document.getElementById('name').value">
Go</button>
<p class="para">First paragraph of a page that JavaScript wrote.</p>
</body></html>"""

SCRIPTED = b"""<html><head><title>Scripted</title></head><body><div id="root"></div>
<script>document.getElementById('root').innerHTML = '<article><h2>Rendered by script</h2><p>'
+ 'This text only exists after JavaScript ran. '.repeat(20) + '</p></article>';</script>
</body></html>"""


def html(body: bytes) -> OriginReply:
    return OriginReply(headers=[("content-type", "text/html; charset=utf-8")], body=body)


def serve(origin: Origin, path: str, body: bytes) -> str:
    origin.routes[path] = lambda _seen: html(body)
    return origin.url("origin.test", path)


async def run(dispatcher: Dispatcher, *fields: tuple[str, str], uid: int | None = 1000) -> Reply:
    task = Task("browser", "TOOL", "BROWSER_RESULT", None, fields)
    with trio.fail_after(WAIT_S):
        return await dispatcher.run(task, Peer("t", uid=uid))


async def open_session(
    dispatcher: Dispatcher, origin: Origin, name: str, path: str = "/form", body: bytes = FORM
) -> tuple[str, tuple[str, str]]:
    """Serve ``body`` at ``path``, navigate session ``name`` to it; its URL and SESSION field."""
    url = serve(origin, path, body)
    session = ("SESSION", name)
    navigated = await run(dispatcher, ("ACTION", "navigate"), ("TARGET_URL", url), session)
    assert navigated.status is Status.OK, navigated
    return url, session


def session_pages(services: BrowserServices, name: str, uid: int = 1000) -> PageSet:
    """The pages of ``uid``'s session ``name`` (``run``'s default peer is uid 1000)."""
    return services.sessions.sessions[(f"uid:{uid}", name)].pages


def error(reply: Reply) -> str:
    assert reply.status is Status.FAIL, reply
    return reply.get("ERROR") or ""


def writes(dispatcher: Dispatcher, kind: str) -> list[dict[str, object]]:
    store = outbox_of(dispatcher)._store
    return [json.loads(w.data) for _, w in store.oldest(1000) if w.type == kind]


async def test_a_target_urls_password_is_refused_and_kept_nowhere(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    """url_rejected:userinfo; the audit keeps the URL with its userinfo written ``***@``,
    and no reply, memory write or file under the state dir holds the password (the audit
    held it verbatim)."""
    url = serve(origin, "/form", FORM)
    secret = "s3cr3tpw-b40w"
    given = url.replace("https://", f"https://user:{secret}@", 1)
    reply = await run(dispatcher, ("ACTION", "navigate"), ("TARGET_URL", given), ("SESSION", "u"))
    assert error(reply) == "url_rejected:userinfo"
    assert all(secret not in value for _, value in reply.fields)
    (audit,) = writes(dispatcher, "audit")
    assert audit["url"] == url.replace("https://", "https://***@", 1)
    assert not [w.data for _, w in outbox_of(dispatcher)._store.oldest(1000) if secret in w.data]
    assert files_holding(dispatcher.services.config.daemon.state_dir, secret) == []


async def test_navigate_replies_the_final_url_and_title(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    url = serve(origin, "/form", FORM)
    reply = await run(dispatcher, ("ACTION", "navigate"), ("TARGET_URL", url))
    assert reply.status is Status.OK, reply
    assert reply.get("SCOPE") == "[browser]"
    assert reply.get("DATA") == f"action:navigate,url:{url}"
    assert reply.get("TITLE") == "Form"
    assert reply.get("HTTP_STATUS") == "200"
    assert int(reply.get("EXEC_TIME") or "x") >= 0
    kinds = [w.type for _, w in outbox_of(dispatcher)._store.oldest(1000)]
    assert kinds == ["audit"]  # one record per op, its details among its fields
    (record,) = writes(dispatcher, "audit")
    details = ("op", "outcome", "error", "action", "url", "session", "selector", "value")
    assert {key: record[key] for key in (*details, "screenshot")} == {
        "op": "browser",
        "outcome": "OK",
        "error": None,
        "action": "navigate",
        "url": url,
        "session": None,
        "selector": None,
        "value": None,
        "screenshot": None,
    }


async def test_click_and_type_act_on_one_session_page(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    url, session = await open_session(dispatcher, origin, "s1")
    typed = await run(
        dispatcher, ("ACTION", "type"), ("SELECTOR", "css:#name"), ("VALUE", "ada"), session
    )
    assert typed.get("DATA") == f"action:type,url:{url}", typed
    clicked = await run(
        dispatcher, ("ACTION", "click"), ("SELECTOR", "xpath://button[@id='go']"), session
    )
    assert clicked.get("DATA") == f"action:click,url:{url}", clicked
    title = await run(dispatcher, ("ACTION", "extract"), ("SELECTOR", "css:title"), session)
    assert title.get("CONTENT") == "clicked:ada", title
    assert title.get("TITLE") == "clicked:ada"
    closed = await run(dispatcher, ("ACTION", "close"), session)
    assert closed.get("DATA") == "action:close"
    assert error(await run(dispatcher, ("ACTION", "close"), session)) == "session_not_found:s1"


async def test_a_typed_secret_value_never_reaches_memory(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    _, session = await open_session(dispatcher, origin, "secret")
    reply = await run(
        dispatcher,
        ("ACTION", "type"),
        ("SELECTOR", "css:#name"),
        ("VALUE", "hunter2"),
        ("SECRET", "true"),
        session,
    )
    assert reply.status is Status.OK, reply
    await run(
        dispatcher, ("ACTION", "type"), ("SELECTOR", "css:#name"), ("VALUE", "plain"), session
    )
    await run(dispatcher, ("ACTION", "close"), session)
    values = [w["value"] for w in writes(dispatcher, "audit")]
    assert values == [None, "<secret>", "plain", None]
    store = outbox_of(dispatcher)._store
    assert all("hunter2" not in w.data for _, w in store.oldest(1000))


async def test_extract_gives_markdown_of_a_page_rendered_by_javascript(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    _, session = await open_session(dispatcher, origin, "read", "/scripted", SCRIPTED)
    reply = await run(dispatcher, ("ACTION", "extract"), session)
    assert reply.status is Status.OK, reply
    content = reply.get("CONTENT") or ""
    assert "Rendered by script" in content
    assert "This text only exists after JavaScript ran." in content
    capped = await run(dispatcher, ("ACTION", "extract"), ("MAX_CHARS", "10"), session)
    assert capped.get("CONTENT") == content[:10]
    assert capped.get("REMAINING_CHARS") == str(len(content) - 10)


async def test_extract_gives_a_selectors_text_or_attribute(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    _, session = await open_session(dispatcher, origin, "attrs")
    text = await run(dispatcher, ("ACTION", "extract"), ("SELECTOR", "css:#head"), session)
    assert text.get("CONTENT") == "Hello form"
    attribute = await run(
        dispatcher,
        ("ACTION", "extract"),
        ("SELECTOR", "css:#head"),
        ("ATTRIBUTE", "data-kind"),
        session,
    )
    assert attribute.get("CONTENT") == "greeting"


async def test_a_selector_matching_nothing_is_selector_not_found_for_every_action(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    _, session = await open_session(dispatcher, origin, "missing")
    for action, extra in (("click", ()), ("type", (("VALUE", "x"),)), ("extract", ())):
        reply = await run(
            dispatcher, ("ACTION", action), ("SELECTOR", "css:#nope"), *extra, session
        )
        assert error(reply) == "selector_not_found:css:#nope", action
    xpath = await run(dispatcher, ("ACTION", "click"), ("SELECTOR", "xpath://nav"), session)
    assert error(xpath) == "selector_not_found:xpath://nav"


@pytest.mark.parametrize(
    "selector", ['css:#head"]', "css:p[", "css::nosuch(p)", "xpath://p[", "xpath:)("]
)
async def test_a_selector_that_does_not_parse_is_invalid_field_for_every_action(
    dispatcher: Dispatcher, origin: Origin, selector: str
) -> None:
    """The client's field failed, not the action: no Playwright internals in the detail."""
    _, session = await open_session(dispatcher, origin, "bad")
    for action, extra in (("click", ()), ("extract", ()), ("wait", ())):
        reply = await run(dispatcher, ("ACTION", action), ("SELECTOR", selector), *extra, session)
        assert error(reply) == "invalid_field:SELECTOR is not a valid selector", (action, reply)
    kept = await run(dispatcher, ("ACTION", "extract"), ("SELECTOR", "css:#head"), session)
    assert kept.get("CONTENT") == "Hello form", kept  # the session is as it was


async def test_screenshot_writes_a_png_into_the_private_media_folder(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    _, session = await open_session(dispatcher, origin, "shots")
    viewport = await run(dispatcher, ("ACTION", "screenshot"), session)
    assert viewport.status is Status.OK, viewport
    full = await run(dispatcher, ("ACTION", "screenshot"), ("FULL_PAGE", "true"), session)
    for reply in (viewport, full):
        path = reply.get("SCREENSHOT_REF") or ""
        with open(path, "rb") as file:
            data = file.read()
        assert data.startswith(b"\x89PNG\r\n\x1a\n")
        assert reply.get("SCREENSHOT_BYTES") == str(len(data))
        folder = os.path.dirname(path)
        assert folder == os.path.join(
            dispatcher.services.config.daemon.state_dir, "media", "browser"
        )
        assert os.stat(folder).st_mode & 0o777 == 0o700
    assert viewport.get("SCREENSHOT_REF") != full.get("SCREENSHOT_REF")
    shots = [w["screenshot"] for w in writes(dispatcher, "audit") if w["action"] == "screenshot"]
    assert shots == [viewport.get("SCREENSHOT_REF"), full.get("SCREENSHOT_REF")]


async def test_an_action_without_session_runs_on_a_fresh_page(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    reply = await run(dispatcher, ("ACTION", "extract"), ("SELECTOR", "css:#head"))
    assert error(reply) == "selector_not_found:css:#head"  # about:blank, not a previous page
    shot = await run(dispatcher, ("ACTION", "screenshot"))
    assert shot.status is Status.OK, shot


async def test_bad_fields_are_catalogue_failures(dispatcher: Dispatcher) -> None:
    cases = [
        ((("ACTION", "navigate"),), "missing_field:TARGET_URL"),
        ((("ACTION", "click"),), "missing_field:REF|SELECTOR"),
        ((("ACTION", "type"), ("SELECTOR", "css:#a")), "missing_field:VALUE"),
        ((("ACTION", "close"),), "missing_field:SESSION"),
        (
            (("ACTION", "click"), ("SELECTOR", "#a")),
            "invalid_field:SELECTOR must be css:<selector> or xpath:<path>",
        ),
        (
            (("ACTION", "navigate"), ("TARGET_URL", "file:///etc/passwd")),
            "url_rejected:scheme-not-allowed",
        ),
        (
            (("ACTION", "navigate"), ("TARGET_URL", "chrome://settings")),
            "url_rejected:scheme-not-allowed",
        ),
        (
            (("ACTION", "screenshot"), ("SESSION", "a b")),
            "invalid_field:SESSION must be 1-64 of [A-Za-z0-9._-]",
        ),
        (
            (("ACTION", "fly"),),
            f"invalid_field:ACTION must be {'|'.join(HANDLERS)}",
        ),
    ]
    for fields, expected in cases:
        assert error(await run(dispatcher, *fields)) == expected, fields
