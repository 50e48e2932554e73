"""Pages, helpers and a runner shared by the page tests (fetch, meta, resolve, summarize)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

import trio
import trio.lowlevel

from csp_web.core.api.context import Peer
from csp_web.core.dispatch.dispatcher import Dispatcher
from protocol import Field, Reply, Task
from specialists.web.pages.flights import Flight
from specialists.web.services import WebServices
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


class WatchedFlights(dict[str, Flight]):
    """A daemon's table of downloads in flight (``WebServices.flights``) that tells a test
    when it changes: a flight starts or ends, or a caller finds one in progress and joins it
    (``load_page`` counts itself a follower right after ``get``, before it next yields).

    Events, not a poller: the states a test waits for (a flight led, a follower joined)
    come after work in worker threads (the response cache, name resolution), which trio
    counts as blocked, so ``wait_all_tasks_blocked`` returns before them."""

    def __init__(self) -> None:
        super().__init__()
        self._changed = trio.Event()

    def _signal(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def __setitem__(self, key: str, flight: Flight) -> None:
        super().__setitem__(key, flight)
        self._signal()

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        self._signal()

    def get(self, key: str, default: Flight | None = None) -> Flight | None:  # type: ignore[override]
        found = super().get(key, default)
        if found is not None:
            self._signal()
        return found

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        """Until ``predicate`` (about this table and its flights) holds, re-checked at each
        change; bounded in real time (``fail_after_real``)."""
        with fail_after_real(WAIT_S):
            while not predicate():
                await self._changed.wait()


def watch_flights(web: WebServices) -> WatchedFlights:
    """``web``'s flights table, watched; set before any load starts (it replaces the table)."""
    assert not web.flights
    web.flights = watched = WatchedFlights()
    return watched


@contextmanager
def fail_after_real(seconds: float) -> Iterator[None]:
    """``trio.fail_after`` on the real clock: the bound for an event wait under a MockClock,
    whose time stands still until the test jumps it. Raises trio.TooSlowError."""
    token = trio.lowlevel.current_trio_token()
    with trio.CancelScope() as scope:
        timer = threading.Timer(seconds, _cancel_from_thread, (token, scope))
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
    if scope.cancelled_caught:
        raise trio.TooSlowError


def _cancel_from_thread(token: trio.lowlevel.TrioToken, scope: trio.CancelScope) -> None:
    with suppress(trio.RunFinishedError):
        token.run_sync_soon(scope.cancel)
