"""docs/browser.md's examples of the actions sites need are what a real Chromium answers.

Each request/reply pair of the section "The actions sites need" runs in order on one
session, after the session is moved to the page the example needs (``SETUP``); the reply,
normalised as docs/ops.md's examples are (``opsdoc.normalise``: the origin's port, fileKeys,
``EXEC_TIME``; ``PDF_BYTES`` varies with the host's fonts), must equal the documented one.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
import trio

from csp_web.app import opsdoc
from csp_web.core.api.context import Peer
from csp_web.core.api.fields import Example
from csp_web.core.dispatch.dispatcher import Dispatcher
from specialists.browser.pages import PageSet
from specialists.browser.services import BrowserServices
from tests.net._origin import Origin

from .actions_support import CHILD, DIALOGS, LATE, LONG, OPENER, ORDERED, SHOP, MemoryFiles
from .support import WAIT_S
from .test_browser_op import run, serve, session_pages

DOC = Path(__file__).resolve().parents[2] / "docs" / "browser.md"
SECTION = "## The actions sites need"
SESSION = "shop"
PAGES = {
    "/shop": SHOP,
    "/ordered": ORDERED,
    "/long": LONG,
    "/late": LATE,
    "/dialogs": DIALOGS,
    "/opener": OPENER,
    "/child": CHILD,
}
# The page each example's action starts on; absent: where the example before left it.
SETUP = {
    "press": "/shop",
    "hover": "/shop",
    "select": "/shop",
    "check": "/shop",
    "scroll": "/long",
    "wait": "/late",
    "reload": "/shop",
    "dialog": "/dialogs",
    "tabs": "/opener",
    "upload": "/shop",
}


def examples() -> list[Example]:
    """The section's (request, reply) pairs of ```text blocks, in order."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index(SECTION) :]
    end = section.find("\n## ", len(SECTION))
    section = section if end < 0 else section[:end]
    blocks = re.findall(r"```text\n(.*?)```", section, flags=re.S)
    assert blocks
    assert len(blocks) % 2 == 0, "requests and replies come in pairs"
    return [Example(blocks[i], blocks[i + 1]) for i in range(0, len(blocks), 2)]


async def _popup(pages: PageSet) -> None:
    await asyncio.wait_for(pages.popup_decided.wait(), WAIT_S)
    for page in pages.tabs:
        await page.wait_for_load_state("load", timeout=WAIT_S * 1000)


async def prepare(
    dispatcher: Dispatcher, services: BrowserServices, origin: Origin, action: str
) -> None:
    path = SETUP.get(action)
    if path is None:
        return
    session = ("SESSION", SESSION)
    url = origin.url("origin.test", path)
    await run(dispatcher, ("ACTION", "navigate"), ("TARGET_URL", url), session)
    if action == "tabs":
        await run(dispatcher, ("ACTION", "click"), ("SELECTOR", "css:#link"), session)
        await services.engine.run(_popup, session_pages(services, SESSION))


@pytest.mark.slow
async def test_every_documented_action_example_is_what_chromium_answers(
    dispatcher: Dispatcher, services: BrowserServices, origin: Origin
) -> None:
    for path, body in PAGES.items():
        serve(origin, path, body)
    files = MemoryFiles()
    with services.files.provided(files):
        key = await files.put(
            b"%PDF-1.4 cv", url="https://origin.test/cv.pdf", name="cv.pdf", content_type="x"
        )
        seen, documented = [], []
        for example in examples():
            task = opsdoc.request_of(example, port=origin.port, values={opsdoc.FILE_KEY: key})
            await prepare(dispatcher, services, origin, task.get("ACTION") or "")
            with trio.fail_after(WAIT_S):
                reply = await dispatcher.run(task, Peer("t", uid=1000))
            text = opsdoc.reply_text(reply)
            seen.append(opsdoc.normalise(text, port=origin.port, volatile=("PDF_BYTES",)))
            documented.append(example.reply)
    assert seen == documented
