"""The exchanges docs/budgets.md shows in fences marked ``csp checked`` are what the daemon
answers: each request runs, in the doc's order, through the dispatcher (every web op, the
embedded ledger) against the local origin, and its reply, normalised as docs/ops.md's examples
are (``opsdoc.normalise``), must equal the reply the doc shows."""

from __future__ import annotations

import re
from pathlib import Path

from csp_web.app import opsdoc
from csp_web.config import Config
from csp_web.core.api.context import Peer
from csp_web.core.api.fields import Example
from csp_web.core.dispatch.ledger import LocalLedger
from specialists.web import WEB
from tests.net._origin import Origin
from tests.web.conftest import DispatcherFactory
from tests.web.pages_support import serve

DOC = Path(__file__).resolve().parents[2] / "docs" / "budgets.md"
FENCE = re.compile(r"^```csp checked\n(.*?)^```$", re.M | re.S)
PAGE = (
    "<html><head><title>Tides</title></head><body><article><h1>Tides</h1>"
    "<p>The North Sea has two high tides every day, about twelve hours apart.</p>"
    "</article></body></html>"
)


def examples() -> list[Example]:
    blocks = FENCE.findall(DOC.read_text("utf-8"))
    return [
        Example(request + "\n", reply) for request, reply in (b.split("\n\n", 1) for b in blocks)
    ]


def test_the_doc_has_checked_examples() -> None:
    assert len(examples()) >= 3


async def test_every_checked_example_is_what_the_daemon_answers(
    make_dispatcher: DispatcherFactory, origin: Origin, web_config: Config
) -> None:
    for path in ("/tides", "/surges", "/moon"):
        serve(origin, path, PAGE)
    dispatcher = make_dispatcher(list(WEB.ops))
    ledger = LocalLedger(web_config.daemon.state_dir, web_config.budgets)
    dispatcher.ledger = ledger
    try:
        for example in examples():
            task = opsdoc.request_of(example, port=origin.port, values={})
            reply = await dispatcher.run(task, Peer("agent", uid=1000))
            text = opsdoc.normalise(opsdoc.reply_text(reply), port=origin.port)
            assert text == example.reply, f"{example.request}\n{text}"
    finally:
        ledger.close()
