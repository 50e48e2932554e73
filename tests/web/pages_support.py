"""Pages, helpers and a runner shared by the page tests (fetch, meta, resolve, summarize)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import trio
import trio.lowlevel

from csp_web.core.api.context import Peer
from csp_web.core.dispatch.dispatcher import Dispatcher
from protocol import Field, Reply, Task
from tests.harness import outbox_of
from tests.net._origin import Origin
from tests.net._origin import Reply as OriginReply

WAIT_S = 10.0  # every wait is bounded: far past an honest run, short of a hang
PARAGRAPHS = (
    "The North Sea has two high tides every day, and their height changes with the moon.",
    "Fishermen along the Dutch coast have planned their trips around these tides for ages.",
    "Storm surges are the exception: when a strong north-westerly wind meets a spring tide, "
    "the water can rise far above the usual mark.",
    "In 1953 such a surge flooded large parts of the Netherlands, and the Delta Works were "
    "built in response.",
)
TITLE = "Tides of the North Sea"
ARTICLE = (
    "<!doctype html><html><head><title>Tides of the North Sea | Coast News</title>"
    '<meta name="description" content="How tides shape the coast."></head><body>'
    '<nav><a href="/">Home</a> <a href="/about">About</a></nav>'
    f"<article><h1>{TITLE}</h1>{''.join(f'<p>{p}</p>' for p in PARAGRAPHS)}</article>"
    "<footer>(c) Coast News</footer><script>var tracking = 1;</script></body></html>"
)
MARKDOWN = f"# {TITLE}\n\n" + "\n\n".join(PARAGRAPHS)


def serve(
    origin: Origin, path: str, body: str | bytes, content_type: str = "text/html; charset=utf-8"
) -> str:
    """Serve ``body`` at ``path`` on ``origin``; returns the page's URL under origin.test."""
    data = body.encode() if isinstance(body, str) else body
    origin.routes[path] = lambda _seen: OriginReply(200, [("content-type", content_type)], data)
    return origin.url("origin.test", path)


def hits(origin: Origin, path: str) -> int:
    """How many times the origin was asked for ``path``."""
    return origin.paths().count(path)


async def run(
    dispatcher: Dispatcher, req: str, out: str, inline: str | None, *fields: Field
) -> Reply:
    """The reply to ``TASK REQ:<req>[ <inline>] IN:WEB OUT:<out>`` with ``fields``."""
    with trio.fail_after(WAIT_S):
        return await dispatcher.run(Task(req, "WEB", out, inline, tuple(fields)), Peer("t"))


async def fetch(dispatcher: Dispatcher, url: str, *fields: Field) -> Reply:
    return await run(dispatcher, "fetch", "CONTENT", url, *fields)


def web_audits(dispatcher: Dispatcher) -> list[dict[str, object]]:
    """Every web op's audit record (those with a ``target``), oldest first."""
    rows = outbox_of(dispatcher)._store.oldest(1000)  # the durable store is what to observe
    records = [json.loads(write.data) for _, write in rows if write.type == "audit"]
    return [record for record in records if "target" in record]


async def until(predicate: Callable[[], bool]) -> None:
    """Yield to other tasks until ``predicate`` holds; bounded in real time, so it also works
    under a MockClock that never advances by itself.

    A poller on purpose: the states waited for (a flight led, a follower joined) come after
    work in worker threads (name resolution, the response cache), which trio counts as
    blocked, so ``wait_all_tasks_blocked`` returns before them (tried: 7 of 64 tests failed),
    and nothing in specialists/web signals them."""
    started = time.monotonic()
    while not predicate():
        assert time.monotonic() - started < WAIT_S, "condition never held"
        await trio.lowlevel.checkpoint()
