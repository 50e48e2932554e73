"""The browser op end to end: frames through the dispatcher, a real Chromium, real HTTPS
origins behind the guard proxy."""

from __future__ import annotations

import json
import os

import trio

from csp_web.context import Peer
from csp_web.dispatch import Dispatcher
from protocol import Reply, Status, Task
from tests.net._origin import Origin, Reply as OriginReply, Seen

from .support import WAIT_S

FORM = b"""<html><head><title>Form</title></head><body>
<h1 id="head" data-kind="greeting">Hello form</h1>
<input id="name" value="">
<button id="go" onclick="document.title = 'clicked:' + document.getElementById('name').value">
Go</button>
<p class="para">First paragraph of a page that JavaScript wrote.</p>
</body></html>"""

SCRIPTED = b"""<html><head><title>Scripted</title></head><body><div id="root"></div>
<script>document.getElementById('root').innerHTML =
'<article><h2>Rendered by script</h2><p>' + 'This text only exists after JavaScript ran. '.repeat(20)
+ '</p></article>';</script></body></html>"""


def html(body: bytes) -> OriginReply:
    return OriginReply(headers=[("content-type", "text/html; charset=utf-8")], body=body)


def serve(origin: Origin, path: str, body: bytes) -> str:
    origin.routes[path] = lambda _seen: html(body)
    return origin.url("origin.test", path)


async def run(dispatcher: Dispatcher, *fields: tuple[str, str], uid: int | None = 1000) -> Reply:
    task = Task("browser", "TOOL", "BROWSER_RESULT", None, fields)
    with trio.fail_after(WAIT_S):
        return await dispatcher.run(task, Peer("t", uid=uid))


def error(reply: Reply) -> str:
    assert reply.status is Status.FAIL, reply
    return reply.get("ERROR") or ""


def writes(dispatcher: Dispatcher, kind: str) -> list[dict[str, object]]:
    store = dispatcher.services.outbox._store
    return [json.loads(w.data) for _, w in store.oldest(1000) if w.type == kind]


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
    (record,) = writes(dispatcher, "browser_op")
    assert record == {
        "action": "navigate",
        "url": url,
        "session": None,
        "selector": None,
        "outcome": "ok",
    }
