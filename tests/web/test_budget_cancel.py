"""Work still running when a budget runs out is cancelled (SPEC D-3): a body is cut as its
bytes pass what is left, the task's other downloads in flight are cancelled (the origin sees
their connections closed, not waited for), and what was done is kept in the PARTIAL reply;
a task sharing a BUDGET_ID learns that another task spent it on its next charge."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import trio

from csp_web.config import Config
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.core.dispatch.ledger import LocalLedger
from protocol import Reply, Status
from specialists.web import WEB
from specialists.web.services import WebServices
from tests.net._origin import Origin
from tests.net._origin import Reply as OriginReply
from tests.web.conftest import DispatcherFactory
from tests.web.pages_support import fetch, run, serve
from tests.web.test_budget_race import RUN, left_is
from tests.web.test_budget_web import PAGE, _research, research  # noqa: F401 (a fixture)
from tests.web.test_research import run_job, searx_route, steps
from tests.web.test_search_filters import WAIT_S

BIG = "<html><head><title>W</title></head><body><p>" + "Waves break. " * 8000 + "</p></body></html>"
HTML = [("content-type", "text/html; charset=utf-8")]


@pytest.fixture
def dispatcher(make_dispatcher: DispatcherFactory, web_config: Config) -> Iterator[Dispatcher]:
    """Every web op, with the embedded ledger for BUDGET_IDs."""
    dispatcher = make_dispatcher(list(WEB.ops))
    ledger = LocalLedger(web_config.daemon.state_dir, web_config.budgets)
    dispatcher.ledger = ledger
    yield dispatcher
    ledger.close()


def drip(origin: Origin, path: str, step: int = 1) -> str:
    """A page at ``path`` whose body never ends: ``step`` bytes every drip interval."""
    origin.routes[path] = lambda _seen: OriginReply(200, HTML, drip=True, drip_bytes=step)
    return origin.url("origin.test", path)


def held(origin: Origin, path: str, body: str, until: trio.Event) -> str:
    """``body`` at ``path``, answered only once ``until`` is set."""
    origin.routes[path] = lambda _seen: OriginReply(200, HTML, body.encode(), hold=until)
    return origin.url("origin.test", path)


async def closed(origin: Origin, path: str) -> None:
    """Return once the client has left ``path``'s answer mid-way (bounded)."""
    with trio.fail_after(WAIT_S):
        while path not in origin.cut:
            await trio.sleep(0.01)


def fetched(reply: Reply) -> list[str]:
    return [line.split(" ")[1] for line in reply.get_all("FETCH")]


def failed(reply: Reply) -> list[str]:
    return sorted(line.rsplit("/", 1)[1] for line in reply.get_all("FETCH_ERROR"))


async def fetch_all(dispatcher: Dispatcher, urls: list[str], *fields: tuple[str, str]) -> Reply:
    return await run(dispatcher, "fetch", "CONTENT", None, *(("URL", u) for u in urls), *fields)


async def test_a_multi_url_fetch_within_its_bytes_keeps_both_pages_and_one_byte_less_cuts_one(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    await fetch(dispatcher, serve(origin, "/warm", PAGE))  # robots.txt is read and cached
    total = len(PAGE.encode()) + len(BIG.encode())
    at = await fetch_all(
        dispatcher,
        [serve(origin, "/s1", PAGE), serve(origin, "/b1", BIG)],
        ("BUDGET", f"bytes:{total}"),
    )
    over = await fetch_all(
        dispatcher,
        [serve(origin, "/s2", PAGE), serve(origin, "/b2", BIG)],
        ("BUDGET", f"bytes:{total - 1}"),
    )
    assert (at.get("ERROR"), at.get("DATA"), at.get("BUDGET_LEFT")) == (
        None,
        "fetched:2,failed:0",
        "bytes:0",
    )
    assert (over.status, over.get("ERROR")) == (Status.PARTIAL, "budget_exhausted:bytes")
    # Whichever page's headers come first is paid for and kept; the other finds a byte too
    # few and is cut unread, charged nothing (test_budget_race plays each order on purpose).
    assert over.get("DATA") == "fetched:1,failed:1"
    (error,) = over.get_all("FETCH_ERROR")
    cut_url, code = error.split(" ")
    assert code == "budget_exhausted:bytes"
    cut_size = len((BIG if cut_url.endswith("/b2") else PAGE).encode())
    assert over.get("BUDGET_LEFT") == f"bytes:{cut_size - 1}"


async def test_a_body_passing_the_bytes_left_is_cut_and_the_pages_done_are_replied(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    """A body that never ends (8 KB each interval) under bytes for the page and 100 KB
    more: cut once it passes them, where it would have run until the task's deadline."""
    await fetch(dispatcher, serve(origin, "/warm", PAGE))
    small = serve(origin, "/small", PAGE)
    budget = f"bytes:{len(PAGE.encode()) + 100_000}"
    reply = await fetch_all(dispatcher, [small, drip(origin, "/drip", 8192)], ("BUDGET", budget))
    assert (reply.status, reply.get("ERROR")) == (Status.PARTIAL, "budget_exhausted:bytes")
    assert (reply.get("DATA"), fetched(reply)) == ("fetched:1,failed:1", [small])
    assert reply.get_all("FETCH_ERROR") == [f"{drip(origin, '/drip')} budget_exhausted:bytes"]
    await closed(origin, "/drip")


async def test_a_download_cut_by_the_budget_cancels_the_tasks_other_downloads_in_flight(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    """A large body passes the budget while a slow one (a byte an interval) is still coming:
    that one is cancelled too, its connection closed, not waited for."""
    await fetch(dispatcher, serve(origin, "/warm", PAGE))
    slow_started = trio.Event()
    origin.routes["/slow"] = lambda _seen: OriginReply(200, HTML, drip=True)
    urls = [origin.url("other.test", "/slow"), held(origin, "/big", BIG, slow_started)]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_set_once_requested, origin, "/slow", slow_started)
        reply = await fetch_all(dispatcher, urls, ("BUDGET", "bytes:50000"))
    assert (reply.status, reply.get("ERROR")) == (Status.PARTIAL, "budget_exhausted:bytes")
    assert failed(reply) == ["big budget_exhausted:bytes", "slow budget_exhausted:bytes"]
    await closed(origin, "/slow")


async def _set_once_requested(origin: Origin, path: str, event: trio.Event) -> None:
    with trio.fail_after(WAIT_S):
        await origin.wait_request(path)
    event.set()


async def test_a_task_sharing_a_budget_id_spent_by_another_cancels_its_work_on_its_next_charge(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    """Task B reads a paid page (its length reserved, its body held), a slow page of unknown
    length (its first 64 KiB reserved) and a late one (its headers held) under run-1; task A
    spends what is left of run-1. When B's late page comes, the ledger has no bytes for it:
    it is cut, and so is the slow download (it holds a reserve, but not of all it will read),
    its connection closed, not waited for; the paid page still comes and is kept. What is
    left never goes below 0: the slow page is charged what it received, the rest given back."""
    await fetch(dispatcher, serve(origin, "/warm", PAGE))
    assert isinstance(dispatcher.ledger, LocalLedger)
    ledger, size = dispatcher.ledger, len(PAGE.encode())
    body, release = trio.Event(), trio.Event()
    origin.routes["/paid"] = lambda _seen: OriginReply(200, HTML, PAGE.encode(), hold_body=body)
    paid, late = origin.url("origin.test", "/paid"), held(origin, "/late", PAGE, release)
    slow = drip(origin, "/slow")
    replies: list[Reply] = []

    async def task_b() -> None:
        fields = [("BUDGET_ID", RUN), ("BUDGET", f"bytes:{2 * size + 65536}")]
        replies.append(await fetch_all(dispatcher, [paid, late, slow], *fields))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(task_b)
        await left_is(ledger, size)  # the paid page and the slow one have reserved
        spender = await fetch(dispatcher, serve(origin, "/spend", PAGE), ("BUDGET_ID", RUN))
        assert (spender.status, spender.get("BUDGET_LEFT")) == (Status.OK, "bytes:0")
        assert "/slow" not in origin.cut  # B learns of it only on its next charge
        release.set()
        await closed(origin, "/slow")
        assert not replies  # the paid page is waited for
        body.set()
    (reply,) = replies
    assert (reply.status, reply.get("ERROR")) == (Status.PARTIAL, "budget_exhausted:bytes")
    assert (reply.get("DATA"), fetched(reply)) == ("fetched:1,failed:2", [paid])
    assert failed(reply) == ["late budget_exhausted:bytes", "slow budget_exhausted:bytes"]
    left = await ledger.open(RUN, None, None)
    assert reply.get("BUDGET_LEFT") == f"bytes:{left['bytes']}"
    assert 0 < left["bytes"] <= 65536  # the slow page is charged what it received, no more


async def test_a_research_source_passing_the_bytes_left_is_cut_and_the_job_answers_from_the_rest(
    research: tuple[Dispatcher, WebServices],  # noqa: F811 (the fixture)
    origin: Origin,
) -> None:
    """Two sources, the second a body that never ends: it is cut as the job's bytes run
    out, and the job answers PARTIAL budget_exhausted:bytes with the first one's bullets."""
    dispatcher, web = research
    _research(web, origin)
    drip(origin, "/tides", 8192)
    searx_route(origin, ["/surges", "/tides"])
    reply = await run_job(dispatcher, ("MAX_SOURCES", "2"), ("BUDGET", "bytes:100000"))
    assert (reply.status, reply.get("ERROR")) == (Status.PARTIAL, "budget_exhausted:bytes")
    assert reply.get_all("CITE") == [f'{origin.url("origin.test", "/surges")} "Storm surges"']
    assert ("fetch", origin.url("origin.test", "/tides"), "budget_exhausted:bytes") in steps(reply)
    await closed(origin, "/tides")
