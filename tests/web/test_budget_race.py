"""Bodies of one task racing for the last bytes (SPEC D-3): a body that reserved its whole
declared length is paid for, finishes and is kept; the one that finds too little is cut with
``budget_exhausted:bytes`` before a byte of it is read, and cancels only the task's work that
holds no reserve of its own. The origin holds each answer until the test lets it go, so every
arrival order is played on purpose, and the ledger of the task's BUDGET_ID shows each reserve
as it is taken; each on the embedded ledger and on Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest
import trio

from csp_web.config import Config
from csp_web.core.api.budget import Ledger
from csp_web.core.api.errors import FieldError
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.core.dispatch.ledger import LocalLedger
from csp_web.infra.redis_budget import RedisLedger
from protocol import Reply, Status
from protocol._budget import Budget
from specialists.web import WEB
from specialists.web.pages.summarize import BUDGETED_MAX_TOKENS
from specialists.web.services import WebServices
from tests.net._origin import Origin, Seen
from tests.net._origin import Reply as OriginReply
from tests.redis.conftest import OpenLink, open_link, redis_config, redis_server  # noqa: F401
from tests.web.conftest import DispatcherFactory
from tests.web.pages_support import fetch, run, serve
from tests.web.test_budget_web import PAGE
from tests.web.test_search_filters import WAIT_S
from tests.web.test_summarize import KEY, KEY_ENV, TEXT, completion, llm_dispatcher

# Ten times PAGE, short of fetch's token cap (a page it truncates is PARTIAL of its own).
BIG = "<html><head><title>W</title></head><body><p>" + "Waves break. " * 300 + "</p></body></html>"
HTML = [("content-type", "text/html; charset=utf-8")]
SIZE, BIG_SIZE = len(PAGE.encode()), len(BIG.encode())
RUN = "run-1"


@pytest.fixture(params=["sqlite", "redis"])
def open_ledger(
    request: pytest.FixtureRequest, web_config: Config
) -> Callable[[], AbstractAsyncContextManager[Ledger]]:
    """The embedded ledger, or one on a real redis-server (tests/redis's fixtures)."""
    settings = web_config.budgets
    if request.param == "redis":
        open_link: OpenLink = request.getfixturevalue("open_link")

        @asynccontextmanager
        async def on_redis() -> AsyncIterator[Ledger]:
            async with open_link() as link:
                yield RedisLedger(link, settings)

        return on_redis

    @asynccontextmanager
    async def embedded() -> AsyncIterator[Ledger]:
        ledger = LocalLedger(web_config.daemon.state_dir, settings)
        try:
            yield ledger
        finally:
            ledger.close()

    return embedded


@pytest.fixture
async def ledger(
    open_ledger: Callable[[], AbstractAsyncContextManager[Ledger]],
) -> AsyncIterator[Ledger]:
    async with open_ledger() as ledger:
        yield ledger


@pytest.fixture
async def dispatcher(
    make_dispatcher: DispatcherFactory, ledger: Ledger, origin: Origin
) -> Dispatcher:
    """Every web op on the ledger, robots.txt already read and cached."""
    dispatcher = make_dispatcher(list(WEB.ops))
    dispatcher.ledger = ledger
    await fetch(dispatcher, serve(origin, "/warm", PAGE))
    return dispatcher


def body_held(
    origin: Origin, path: str, body: str, until: trio.Event, heads: trio.Event | None = None
) -> str:
    """``body`` at ``path``: its headers once ``heads`` is set (None: at once), its bytes
    once ``until`` is."""
    origin.routes[path] = lambda _seen: OriginReply(
        200, HTML, body.encode(), hold=heads, hold_body=until
    )
    return origin.url("origin.test", path)


async def requested(origin: Origin, paths: list[str]) -> None:
    """Return once every one of ``paths`` has been asked for (bounded): a URL whose unit
    starts after the budget is spent is refused before it is asked for, as it should be,
    but then the order the test means to play is not the one played."""
    with trio.fail_after(WAIT_S):
        for path in paths:
            await origin.wait_request(path)


def headers_held(origin: Origin, path: str, body: str, until: trio.Event) -> str:
    """``body`` at ``path``, answered only once ``until`` is set."""
    origin.routes[path] = lambda _seen: OriginReply(200, HTML, body.encode(), hold=until)
    return origin.url("origin.test", path)


def drip_held(origin: Origin, path: str, until: trio.Event) -> str:
    """A body of unknown length at ``path`` that never ends, begun once ``until`` is set."""
    origin.routes[path] = lambda _seen: OriginReply(200, HTML, drip=True, hold=until)
    return origin.url("origin.test", path)


async def left_is(ledger: Ledger, bytes_left: int) -> None:
    """Return once the ledger holds ``bytes_left`` of RUN's bytes, the task having made
    RUN (bounded)."""
    with trio.fail_after(WAIT_S):
        while await _left(ledger) != {"bytes": bytes_left}:
            await trio.sleep(0.01)


async def _left(ledger: Ledger) -> Budget | None:
    try:
        return await ledger.open(RUN, None, None)
    except FieldError:  # not made yet
        return None


async def closed(origin: Origin, path: str) -> None:
    """Return once the client has left ``path``'s answer mid-way (bounded)."""
    with trio.fail_after(WAIT_S):
        while path not in origin.cut:
            await trio.sleep(0.01)


class Task:
    """A fetch of several URLs under RUN, run in the background; ``reply`` once it ends."""

    def __init__(self, dispatcher: Dispatcher, urls: list[str], budget: str) -> None:
        self.fields = [*(("URL", url) for url in urls), ("BUDGET_ID", RUN), ("BUDGET", budget)]
        self.dispatcher = dispatcher
        self.done = trio.Event()
        self.reply: Reply | None = None

    async def run(self) -> None:
        self.reply = await run(self.dispatcher, "fetch", "CONTENT", None, *self.fields)
        self.done.set()


def outcome(reply: Reply | None) -> tuple[object, ...]:
    """The reply's status, error, counts, pages kept, pages cut (sorted) and BUDGET_LEFT."""
    assert reply is not None
    kept = sorted(line.split(" ")[1] for line in reply.get_all("FETCH"))
    return (
        reply.status,
        reply.get("ERROR"),
        reply.get("DATA"),
        kept,
        sorted(reply.get_all("FETCH_ERROR")),
        reply.get("BUDGET_LEFT"),
    )


@pytest.mark.parametrize("last", [0, 1, 2])
async def test_a_body_finding_no_bytes_left_is_cut_and_the_paid_bodies_in_flight_are_kept(
    dispatcher: Dispatcher, ledger: Ledger, origin: Origin, last: int
) -> None:
    """Three URLs under bytes for two pages: the two whose headers come first reserve their
    length; the third (any of the three) comes while their bodies are still held, finds
    nothing left and is cut, its connection closed; then the two bodies arrive and are kept.
    Before the rule, the cut cancelled the two bodies still in flight."""
    heads, bodies, third = trio.Event(), trio.Event(), trio.Event()
    paths = [f"/q{n}" for n in range(3)]
    urls = [
        drip_held(origin, path, third)
        if n == last
        else body_held(origin, path, PAGE, bodies, heads)
        for n, path in enumerate(paths)
    ]
    task = Task(dispatcher, urls, f"bytes:{2 * SIZE}")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(task.run)
        await requested(origin, paths)
        heads.set()
        await left_is(ledger, 0)  # both pages reserved, their bodies held
        third.set()
        await closed(origin, paths[last])  # cut at its reserve
        assert not task.done.is_set()  # the paid bodies are waited for, not cancelled
        bodies.set()
    kept = [url for n, url in enumerate(urls) if n != last]
    assert outcome(task.reply) == (
        Status.PARTIAL,
        "budget_exhausted:bytes",
        "fetched:2,failed:1",
        sorted(kept),
        [f"{urls[last]} budget_exhausted:bytes"],
        "bytes:0",
    )


@pytest.mark.parametrize("bodies_first", [True, False])
async def test_a_page_whose_length_does_not_fit_is_cut_unread_whether_or_not_the_others_are_done(
    dispatcher: Dispatcher, ledger: Ledger, origin: Origin, bodies_first: bool
) -> None:
    """Three pages under bytes for two: the third's headers come once the two have
    reserved, before or after their bodies are let go; either way the two are kept, the
    third is cut before a byte is read, and nothing is left (never less)."""
    heads, bodies, third = trio.Event(), trio.Event(), trio.Event()
    urls = [body_held(origin, f"/p{n}", PAGE, bodies, heads) for n in range(2)]
    urls.append(headers_held(origin, "/p2", PAGE, third))
    task = Task(dispatcher, urls, f"bytes:{2 * SIZE}")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(task.run)
        await requested(origin, ["/p0", "/p1", "/p2"])
        heads.set()
        await left_is(ledger, 0)
        for event in (bodies, third) if bodies_first else (third, bodies):
            event.set()
    assert outcome(task.reply) == (
        Status.PARTIAL,
        "budget_exhausted:bytes",
        "fetched:2,failed:1",
        sorted(urls[:2]),
        [f"{urls[2]} budget_exhausted:bytes"],
        "bytes:0",
    )


@pytest.mark.parametrize("big_first", [True, False])
@pytest.mark.parametrize("short_by", [0, 1])
async def test_two_pages_under_bytes_for_both_are_kept_and_a_byte_less_cuts_the_later_one(
    dispatcher: Dispatcher, ledger: Ledger, origin: Origin, big_first: bool, short_by: int
) -> None:
    """A small and a large page under bytes for both (N) or a byte less (N-1), in each
    order: at N both are kept and nothing is left; at N-1 the first whose headers come is
    kept and the later one, finding a byte too few, is cut unread and charged nothing."""
    later_in, bodies = trio.Event(), trio.Event()
    order = [("/big", BIG), ("/small", PAGE)] if big_first else [("/small", PAGE), ("/big", BIG)]
    (first_path, first_body), (later_path, later_body) = order
    first = body_held(origin, first_path, first_body, bodies)
    later = headers_held(origin, later_path, later_body, later_in)
    total = SIZE + BIG_SIZE - short_by
    task = Task(dispatcher, [first, later], f"bytes:{total}")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(task.run)
        await left_is(ledger, total - len(first_body.encode()))
        later_in.set()
        bodies.set()
    if short_by == 0:
        assert outcome(task.reply) == (
            Status.OK,
            None,
            "fetched:2,failed:0",
            sorted([first, later]),
            [],
            "bytes:0",
        )
    else:
        assert outcome(task.reply) == (
            Status.PARTIAL,
            "budget_exhausted:bytes",
            "fetched:1,failed:1",
            [first],
            [f"{later} budget_exhausted:bytes"],
            f"bytes:{len(later_body.encode()) - 1}",
        )


async def test_a_page_cut_for_its_length_leaves_what_it_gave_back_to_a_smaller_one(
    dispatcher: Dispatcher, ledger: Ledger, origin: Origin
) -> None:
    """The large page is cut unread (a byte too few): what it reserved goes back, so a later
    task on the same BUDGET_ID still reads a page that fits."""
    big = serve(origin, "/big", BIG)
    over = await fetch(dispatcher, big, ("BUDGET_ID", RUN), ("BUDGET", f"bytes:{BIG_SIZE - 1}"))
    small = await fetch(dispatcher, serve(origin, "/small", PAGE), ("BUDGET_ID", RUN))
    assert (over.status, over.get("ERROR"), over.get("BUDGET_LEFT")) == (
        Status.PARTIAL,
        "budget_exhausted:bytes",
        f"bytes:{BIG_SIZE - 1}",
    )
    assert (small.status, small.get("BUDGET_LEFT")) == (
        Status.OK,
        f"bytes:{BIG_SIZE - 1 - SIZE}",
    )


async def test_a_model_call_holding_its_tokens_runs_on_when_another_task_finds_none_left(
    web_config: Config, web: WebServices, origin: Origin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two summaries on one BUDGET_ID of llm_tokens for one model call: the first reserves
    them all and its answer is held; the second finds none, is summarised without the model
    (a complete answer); the first's answer then comes, is kept, and gives back what its
    usage did not take."""
    monkeypatch.setenv(KEY_ENV, KEY)
    answer, calls = trio.Event(), []

    def model(seen: Seen) -> OriginReply:
        calls.append(seen)
        body = completion("- Tides follow the moon.")
        return OriginReply(200, [("content-type", "application/json")], body, hold=answer)

    origin.routes["/v1/chat/completions"] = model
    fields = (("BUDGET_ID", "tok"),)
    replies: dict[str, Reply] = {}
    async with llm_dispatcher(web_config, web, origin) as dispatcher:
        ledger = LocalLedger(web_config.daemon.state_dir, web_config.budgets)
        dispatcher.ledger = ledger
        await ledger.open("tok", None, {"llm_tokens": BUDGETED_MAX_TOKENS})

        async def first() -> None:
            replies["first"] = await run(dispatcher, "summarize", "SUMMARY", TEXT, *fields)

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(first)
                with trio.fail_after(WAIT_S):
                    while await ledger.open("tok", None, None) != {"llm_tokens": 0}:
                        await trio.sleep(0.01)  # the first holds them all, its answer held
                replies["second"] = await run(dispatcher, "summarize", "SUMMARY", TEXT, *fields)
                answer.set()
        finally:
            ledger.close()
    second, kept = replies["second"], replies["first"]
    assert (second.status, second.get("METHOD"), second.get("BUDGET_LEFT")) == (
        Status.OK,
        "extractive",
        "llm_tokens:0",
    )
    assert (kept.status, kept.get("METHOD"), kept.get_all("BULLET")) == (
        Status.OK,
        "llm",
        ["Tides follow the moon."],
    )
    assert kept.get("BUDGET_LEFT") == f"llm_tokens:{BUDGETED_MAX_TOKENS - 15}"
    assert len(calls) == 1


async def test_a_paid_body_its_tasks_deadline_cuts_gives_back_what_it_did_not_receive(
    dispatcher: Dispatcher, ledger: Ledger, origin: Origin
) -> None:
    """The reserve of a body whose bytes never come is settled when the deadline cancels it:
    nothing received, nothing charged, all of it back for the BUDGET_ID's next task."""
    never = trio.Event()
    task = Task(dispatcher, [body_held(origin, "/stuck", PAGE, never)], f"bytes:{SIZE}")
    task.fields.append(("TIMEOUT_MS", "500"))
    await task.run()
    assert task.reply is not None
    # The fetch's own deadline or the task's, whichever a loaded host lets fire first.
    error = task.reply.get("ERROR") or ""
    assert error == "fetch_failed:timeout" or error.startswith("timeout_exceeded:"), task.reply
    assert (task.reply.status, task.reply.get("BUDGET_LEFT")) == (Status.FAIL, f"bytes:{SIZE}")
    assert await ledger.open(RUN, None, None) == {"bytes": SIZE}


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def liar(origin: Origin, path: str, rest: trio.Event) -> str:
    """A page stating ``Content-Length: 1`` beside ``Transfer-Encoding: chunked`` (which
    frames it: h11 lets it win): its first chunk at once, the rest once ``rest`` is set."""
    page = BIG.encode()
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\n"
        b"content-length: 1\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    half = len(page) // 2
    origin.routes[path] = lambda _seen: OriginReply(
        raw=(head + _chunk(page[:half]), _chunk(page[half:]) + b"0\r\n\r\n"), hold_body=rest
    )
    return origin.url("origin.test", path)


async def test_a_body_stating_a_length_its_chunked_framing_overrides_is_not_paid_for(
    dispatcher: Dispatcher, ledger: Ledger, origin: Origin
) -> None:
    """A page stating 1 byte but framed chunked is of unknown length, not paid for by a
    1-byte reserve: when an honest sibling runs the budget out, the liar is cancelled with
    it, not spared to stream on. Before, it reserved 1 byte, counted paid, and was kept."""
    rest, heads = trio.Event(), trio.Event()
    lying = liar(origin, "/liar", rest)
    origin.routes["/flood"] = lambda _seen: OriginReply(
        200, HTML, drip=True, drip_bytes=16384, hold=heads
    )
    flood = origin.url("origin.test", "/flood")
    task = Task(dispatcher, [lying, flood], "bytes:100000")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(task.run)
        await requested(origin, ["/liar", "/flood"])
        with trio.fail_after(WAIT_S):  # the liar's first chunk is in: 64 KiB reserved
            while ((await _left(ledger)) or {}).get("bytes", 100000) > 100000 - 65536:
                await trio.sleep(0.01)
        heads.set()
        await closed(origin, "/flood")  # it ran the budget out
        rest.set()
    assert outcome(task.reply)[:5] == (
        Status.PARTIAL,
        "budget_exhausted:bytes",
        "none",
        [],
        sorted(f"{url} budget_exhausted:bytes" for url in (lying, flood)),
    )


def _page_of(size: int) -> str:
    """An HTML page of exactly ``size`` bytes."""
    head, tail = "<html><head><title>S</title></head><body><p>", "</p></body></html>"
    return (
        head
        + "Sea " * ((size - len(head) - len(tail)) // 4)
        + "." * ((size - len(head) - len(tail)) % 4)
        + tail
    )


@pytest.mark.parametrize(
    ("sizes", "kept"), [((600, 500, 400), (600,)), ((400, 500, 600), (400, 500))]
)
async def test_which_stated_lengths_fit_depends_on_the_order_their_headers_arrive_in(
    dispatcher: Dispatcher,
    ledger: Ledger,
    origin: Origin,
    sizes: tuple[int, ...],
    kept: tuple[int, ...],
) -> None:
    """docs/budgets.md's example: under bytes for 1000, pages stating 600, 500, 400 whose
    headers come in that order keep the 600 alone (the 500 finds 400 left and runs the
    budget out, cancelling the 400 still waiting); in the order 400, 500, 600, the 400 and
    the 500 are kept."""
    assert all(len(_page_of(size)) == size for size in sizes)
    heads = [trio.Event() for _ in sizes]
    urls = [
        headers_held(origin, f"/o{size}", _page_of(size), head)
        for size, head in zip(sizes, heads, strict=True)
    ]
    task = Task(dispatcher, urls, "bytes:1000")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(task.run)
        await requested(origin, [f"/o{size}" for size in sizes])
        left = 1000
        for size, head in zip(sizes, heads, strict=True):
            head.set()
            if size > left:
                break
            left -= size
            await left_is(ledger, left)
        with trio.fail_after(WAIT_S):
            await task.done.wait()
        for head in heads:
            head.set()
    by_size = dict(zip(sizes, urls, strict=True))
    cut = sorted(f"{by_size[size]} budget_exhausted:bytes" for size in sizes if size not in kept)
    assert outcome(task.reply)[1:5] == (
        "budget_exhausted:bytes",
        f"fetched:{len(kept)},failed:{len(sizes) - len(kept)}",
        sorted(by_size[size] for size in kept),
        cut,
    )
