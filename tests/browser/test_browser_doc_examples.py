"""The exchanges docs/browser.md shows in fences marked ``csp checked`` are what the browser
op answers: each request runs, in the doc's order, through the dispatcher against a local
HTTPS origin, and its reply, normalised as docs/ops.md's examples are (``opsdoc.normalise``),
must equal the reply the doc shows."""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

import pytest

from csp_web.app import opsdoc
from csp_web.core.api.context import Peer
from csp_web.core.api.errors import OpError
from csp_web.core.api.fields import Example
from csp_web.core.api.ports import StoredFile
from csp_web.core.dispatch.dispatcher import Dispatcher
from protocol import ErrorCode
from specialists.browser.services import BrowserServices
from tests.net._origin import Origin
from tests.net._origin import Reply as OriginReply

from .test_browser_downloads import PDF
from .test_browser_op import run

DOC = Path(__file__).resolve().parents[2] / "docs" / "browser.md"
FENCE = re.compile(r"^```csp checked\n(.*?)^```$", re.M | re.S)


class Files:
    """A FileStore keyed as web's (``fk_`` and 16 base32 characters)."""

    def __init__(self) -> None:
        self.kept: dict[str, StoredFile] = {}

    async def put(self, body: bytes, *, url: str, name: str, content_type: str) -> str:
        digest = hashlib.sha256(url.encode() + b"\0" + body).digest()
        key = "fk_" + base64.b32encode(digest).decode()[:16].lower()
        self.kept[key] = StoredFile(key, url, name, content_type, body)
        return key

    async def get(self, key: str) -> StoredFile:
        if key not in self.kept:
            raise OpError(ErrorCode.UNKNOWN_FILE_KEY, key)
        return self.kept[key]


def examples() -> list[Example]:
    blocks = FENCE.findall(DOC.read_text("utf-8"))
    pairs = [block.split("\n\n", 1) for block in blocks]
    return [Example(request + "\n", reply) for request, reply in pairs]


def _routes(origin: Origin) -> None:
    pdf = [("content-type", "application/octet-stream")]  # served inline, a PDF is shown
    origin.routes["/notes.pdf"] = lambda _seen: OriginReply(headers=pdf, body=PDF)
    cookie = [("content-type", "text/html"), ("set-cookie", "sid=1; Path=/; Secure")]
    page = b"<html><head><title>Account</title></head><body>in</body></html>"
    origin.routes["/account"] = lambda _seen: OriginReply(headers=cookie, body=page)


def test_the_doc_has_checked_examples() -> None:
    assert len(examples()) >= 4


@pytest.mark.usefixtures("services")
async def test_every_checked_example_is_what_the_browser_op_answers(
    dispatcher: Dispatcher, origin: Origin, services: BrowserServices
) -> None:
    _routes(origin)
    signed_in = await run(
        dispatcher,
        ("ACTION", "navigate"),
        ("TARGET_URL", origin.url("origin.test", "/account")),
        ("SESSION", "shop"),
    )
    assert signed_in.get("TITLE") == "Account", signed_in
    with services.files.provided(Files()):
        for example in examples():
            task = opsdoc.request_of(example, port=origin.port, values={})
            reply = await dispatcher.run(task, Peer("t", uid=1000))
            text = opsdoc.normalise(opsdoc.reply_text(reply), port=origin.port)
            assert text == example.reply, example.request
