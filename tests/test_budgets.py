"""One budget per task (SPEC D-3): BUDGET and BUDGET_ID on any frame, BUDGET_LEFT on its
replies, PARTIAL budget_exhausted:<dimension> when a dimension runs out; the embedded ledger
that keeps BUDGET_IDs across connections and restarts."""

from __future__ import annotations

import dataclasses
import os
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

from csp_web.client.trio_client import open_client
from csp_web.config import BudgetsConfig, Config, SlotLimits, SlotsConfig, TasksConfig
from csp_web.core.api import budget
from csp_web.core.api.budget import BudgetExhausted, Ledger, TaskBudget
from csp_web.core.api.context import OpContext, Peer
from csp_web.core.api.errors import Busy, FieldError, OpError
from csp_web.core.api.fields import FieldSpec, Params
from csp_web.core.api.ops import Op
from csp_web.core.api.replies import Result, budgeted
from csp_web.core.dispatch.ledger import LocalLedger
from protocol import DIMENSIONS, ErrorCode, Reply, Status, Task
from tests.conftest import Daemon, Sink, start_daemon
from tests.harness import TEST_OPS, open_harness

WAIT_S = 20.0
OWNER = Peer("a", 1000, 1)


async def _charge(params: Params, ctx: OpContext, _: Any) -> Result:
    """Takes N of DIMENSION (a count, before its work) or, with SETTLE, spends it after."""
    assert ctx.budget is budget.running()
    dimension, amount = params.text("DIMENSION"), params.integer("N")
    if params.flag("SETTLE"):
        await budget.spend(dimension, amount)
    else:
        await budget.take(dimension, amount)
    return Result(f"charged:{amount}", ("test",))


CHARGE = Op(
    "charge",
    "TEST",
    "CHARGED",
    "web",
    _charge,
    (
        FieldSpec("DIMENSION", "choice", required=True, choices=DIMENSIONS),
        FieldSpec("N", "int", default=1, minimum=0),
        FieldSpec("SETTLE", "bool", default=False),
    ),
)
OPS = [*TEST_OPS, CHARGE]


def charge(*fields: tuple[str, str], dimension: str = "fetches", n: int = 1) -> Task:
    return Task(
        "charge", "TEST", "CHARGED", None, (("DIMENSION", dimension), ("N", str(n)), *fields)
    )


def ping(*fields: tuple[str, str]) -> Task:
    return Task("ping", "SYS", "PONG", None, fields)


async def call(daemon: Daemon, task: Task) -> Reply:
    async with open_client(daemon.socket_path) as client:
        return await client.call(task, timeout_s=WAIT_S)


@asynccontextmanager
async def dispatching(config: Config) -> AsyncIterator[Any]:
    """A dispatcher over OPS with the embedded ledger in the state dir."""
    async with open_harness(config, OPS) as harness:
        ledger = LocalLedger(config.daemon.state_dir, config.budgets)
        harness.dispatcher.ledger = ledger
        try:
            yield harness.dispatcher
        finally:
            ledger.close()


async def run(dispatcher: Any, task: Task, peer: Peer = OWNER) -> Reply:
    with trio.fail_after(WAIT_S):
        reply: Reply = await dispatcher.run(task, peer)
        return reply


# --- the task's own budget (BUDGET) ---------------------------------------------------------


@pytest.mark.parametrize("dimension", [d for d in DIMENSIONS if d != "wall_ms"])
async def test_each_dimension_allows_its_amount_and_the_next_charge_answers_partial(
    config: Config, dimension: str
) -> None:
    """N allowed, N+1 refused: a count taken before its work charges nothing when refused."""
    async with dispatching(config) as dispatcher:
        allowed = await run(
            dispatcher, charge(("ID", "c"), ("BUDGET", f"{dimension}:3"), dimension=dimension, n=3)
        )
        refused = await run(
            dispatcher, charge(("ID", "c"), ("BUDGET", f"{dimension}:3"), dimension=dimension, n=4)
        )
    assert allowed == Reply(
        Status.OK,
        (
            ("ID", "c"),
            ("SCOPE", "[test]"),
            ("DATA", "charged:3"),
            ("BUDGET_LEFT", f"{dimension}:0"),
        ),
    )
    assert refused == Reply(
        Status.PARTIAL,
        (
            ("ID", "c"),
            ("SCOPE", "[]"),
            ("DATA", "none"),
            ("ERROR", f"budget_exhausted:{dimension}"),
            ("BUDGET_LEFT", f"{dimension}:3"),
        ),
    )


async def test_a_cost_settled_after_its_work_is_allowed_to_the_limit_and_past_it_is_partial(
    config: Config,
) -> None:
    """bytes, tokens and CPU are known only once spent: at N the reply is OK; at N+1 the work
    is done (its DATA kept) but the reply is PARTIAL, never a silent overrun."""
    async with dispatching(config) as dispatcher:
        at = await run(
            dispatcher, charge(("BUDGET", "bytes:10"), ("SETTLE", "true"), dimension="bytes", n=10)
        )
        past = await run(
            dispatcher, charge(("BUDGET", "bytes:10"), ("SETTLE", "true"), dimension="bytes", n=11)
        )
    assert (at.status, at.get("BUDGET_LEFT")) == (Status.OK, "bytes:0")
    assert past == Reply(
        Status.PARTIAL,
        (
            ("SCOPE", "[test]"),
            ("DATA", "charged:11"),
            ("ERROR", "budget_exhausted:bytes"),
            ("BUDGET_LEFT", "bytes:0"),
        ),
    )


async def test_a_dimension_the_budget_does_not_name_is_not_limited(config: Config) -> None:
    async with dispatching(config) as dispatcher:
        reply = await run(dispatcher, charge(("BUDGET", "searches:1"), dimension="fetches", n=50))
    assert (reply.status, reply.get("BUDGET_LEFT")) == (Status.OK, "searches:1")


async def test_an_unbudgeted_task_replies_as_before(config: Config) -> None:
    async with dispatching(config) as dispatcher:
        reply = await run(dispatcher, charge(n=10**6))
    assert reply == Reply(Status.OK, (("SCOPE", "[test]"), ("DATA", "charged:1000000")))


async def test_a_ping_with_a_budget_is_answered_at_once_with_what_is_left(config: Config) -> None:
    async with dispatching(config) as dispatcher:
        reply = await dispatcher.try_now(ping(("ID", "p"), ("BUDGET", "searches:2")), OWNER)
    assert reply == Reply(
        Status.OK,
        (("ID", "p"), ("SCOPE", "[sys]"), ("DATA", "pong"), ("BUDGET_LEFT", "searches:2")),
    )


async def test_wall_ms_is_the_deadline_when_it_is_the_nearer_and_its_end_is_partial(
    config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    sleep = Task("sleep", "TEST", "SLEPT", None, (("MS", "60000"), ("BUDGET", "wall_ms:1000")))
    async with dispatching(config) as dispatcher:
        reply = await run(dispatcher, sleep)
    assert reply == Reply(
        Status.PARTIAL,
        (
            ("SCOPE", "[]"),
            ("DATA", "none"),
            ("ERROR", "budget_exhausted:wall_ms"),
            ("BUDGET_LEFT", "wall_ms:0"),
        ),
    )


async def test_wall_ms_is_charged_by_the_time_tasks_took_and_a_spent_one_stops_the_next(
    config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    """Tasks sharing wall_ms:1000: 400 ms and 500 ms run whole; the next is cut at the 100 ms
    left (its deadline); the one after is refused before it runs."""

    def sleep(ms: int) -> Task:
        fields = (("MS", str(ms)), ("BUDGET_ID", "w"), ("BUDGET", "wall_ms:1000"))
        return Task("sleep", "TEST", "SLEPT", None, fields)

    async with dispatching(config) as dispatcher:
        replies = [await run(dispatcher, sleep(ms)) for ms in (400, 500, 200, 1)]
    assert [(r.status, r.get("DATA"), r.get("BUDGET_LEFT")) for r in replies] == [
        (Status.OK, "slept:400", "wall_ms:600"),
        (Status.OK, "slept:500", "wall_ms:100"),
        (Status.PARTIAL, "none", "wall_ms:0"),
        (Status.PARTIAL, "none", "wall_ms:0"),
    ]
    assert {r.get("ERROR") for r in replies[2:]} == {"budget_exhausted:wall_ms"}


async def test_a_uid_default_budget_applies_to_its_frames_that_name_none(config: Config) -> None:
    budgets = BudgetsConfig(per_uid={"1000": "fetches:2"})
    async with dispatching(dataclasses.replace(config, budgets=budgets)) as dispatcher:
        own = await run(dispatcher, charge(n=2))
        over = await run(dispatcher, charge(n=3))
        named = await run(dispatcher, charge(("BUDGET", "fetches:5"), n=3))
        other = await run(dispatcher, charge(n=3), Peer("b", 1001, 2))
    assert (own.status, own.get("BUDGET_LEFT")) == (Status.OK, "fetches:0")
    assert (over.status, over.get("ERROR")) == (Status.PARTIAL, "budget_exhausted:fetches")
    assert (named.status, named.get("BUDGET_LEFT")) == (Status.OK, "fetches:2")
    assert (other.status, other.get("BUDGET_LEFT")) == (Status.OK, None)


async def test_a_fieldless_ping_answered_now_carries_its_uid_default_budget(
    config: Config,
) -> None:
    """D-3: ``try_now`` skips a fieldless frame's budget only when its uid has no default:
    a bare ping of a uid with one still reports what is left, like the slow path."""
    budgets = BudgetsConfig(per_uid={"1000": "fetches:2"})
    async with dispatching(dataclasses.replace(config, budgets=budgets)) as dispatcher:
        own = await dispatcher.try_now(ping(), OWNER)
        other = await dispatcher.try_now(ping(), Peer("b", 1001, 2))
    assert own == Reply(
        Status.OK, (("SCOPE", "[sys]"), ("DATA", "pong"), ("BUDGET_LEFT", "fetches:2"))
    )
    assert other == Reply(Status.OK, (("SCOPE", "[sys]"), ("DATA", "pong")))


# --- shared budgets (BUDGET_ID) -------------------------------------------------------------


async def test_tasks_naming_one_budget_id_draw_from_one_budget(config: Config) -> None:
    async with dispatching(config) as dispatcher:
        made = await run(dispatcher, charge(("BUDGET_ID", "run-1"), ("BUDGET", "fetches:2")))
        drawn = await run(dispatcher, charge(("BUDGET_ID", "run-1")))
        spent = await run(dispatcher, charge(("BUDGET_ID", "run-1"), ("BUDGET", "fetches:99")))
    assert [r.get("BUDGET_LEFT") for r in (made, drawn)] == ["fetches:1", "fetches:0"]
    assert (spent.status, spent.get("ERROR")) == (Status.PARTIAL, "budget_exhausted:fetches")


async def test_a_budget_id_not_held_needs_a_budget_to_make_it(config: Config) -> None:
    async with dispatching(config) as dispatcher:
        reply = await run(dispatcher, charge(("BUDGET_ID", "nobody")))
    assert reply == Reply(
        Status.FAIL,
        (("SCOPE", "[]"), ("DATA", "none"), ("ERROR", "invalid_field:BUDGET_ID nobody not held")),
    )


async def test_another_uids_budget_id_is_permission_denied(config: Config) -> None:
    async with dispatching(config) as dispatcher:
        await run(dispatcher, charge(("BUDGET_ID", "mine"), ("BUDGET", "fetches:5")))
        theirs = await run(dispatcher, charge(("BUDGET_ID", "mine")), Peer("b", 1001, 2))
        again = await run(
            dispatcher, charge(("BUDGET_ID", "mine"), ("BUDGET", "fetches:9")), Peer("b", 1001, 2)
        )
        own = await run(dispatcher, charge(("BUDGET_ID", "mine")))
    for reply in (theirs, again):
        assert reply == Reply(
            Status.FAIL,
            (
                ("SCOPE", "[]"),
                ("DATA", "none"),
                ("ERROR", "permission_denied:BUDGET_ID mine is another uid's"),
            ),
        )
    assert own.get("BUDGET_LEFT") == "fetches:3"


async def test_a_budget_id_is_shared_across_two_connections_and_survives_a_restart(
    nursery: trio.Nursery, config: Config, sink: Sink, sock_dir: str
) -> None:
    path = os.path.join(sock_dir, "b.sock")
    daemon = await start_daemon(nursery, config, path, OPS)
    shared = (("BUDGET_ID", "agent-run"), ("BUDGET", "searches:3"))
    async with open_client(path) as one, open_client(path) as two:
        first = await one.call(charge(*shared, dimension="searches"), timeout_s=WAIT_S)
        second = await two.call(
            charge(("BUDGET_ID", "agent-run"), dimension="searches"), timeout_s=WAIT_S
        )
    await daemon.stop()
    daemon = await start_daemon(nursery, config, path, OPS)
    third = await call(daemon, charge(("BUDGET_ID", "agent-run"), dimension="searches"))
    fourth = await call(daemon, charge(("BUDGET_ID", "agent-run"), dimension="searches"))
    left = [r.get("BUDGET_LEFT") for r in (first, second, third)]
    assert left == ["searches:2", "searches:1", "searches:0"]
    assert (fourth.status, fourth.get("ERROR")) == (Status.PARTIAL, "budget_exhausted:searches")


# --- hostile values over the socket ---------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "detail"),
    [
        ("BUDGET", "bytes:5mb", "BUDGET bytes must be digits with an optional B, KB, MB or GB"),
        ("BUDGET", "bytes:5 MB", "BUDGET bytes must be digits with an optional B, KB, MB or GB"),
        ("BUDGET", "bytes:1.5MB", "BUDGET bytes must be digits with an optional B, KB, MB or GB"),
        ("BUDGET", "fetches:-1", "BUDGET fetches must be digits"),
        ("BUDGET", "fetches:99999999999999999999", "BUDGET fetches above 1125899906842624"),
        ("BUDGET", "dollars:5", "BUDGET unknown dimension 'dollars'"),
        ("BUDGET", "fetches:1,fetches:1", "BUDGET fetches given twice"),
        ("BUDGET_ID", "a" * 65, "BUDGET_ID must be 1-64 of [A-Za-z0-9._:@/-]"),
        ("BUDGET_ID", "run 1", "BUDGET_ID must be 1-64 of [A-Za-z0-9._:@/-]"),
        ("BUDGET_ID", "run{1}", "BUDGET_ID must be 1-64 of [A-Za-z0-9._:@/-]"),
    ],
)
async def test_a_hostile_budget_fails_invalid_field_on_any_op(
    nursery: trio.Nursery,
    config: Config,
    sink: Sink,
    sock_dir: str,
    field: str,
    value: str,
    detail: str,
) -> None:
    daemon = await start_daemon(nursery, config, os.path.join(sock_dir, "c.sock"), OPS)
    memory = Task("read", "MEMORY", "CONTENT", None, ((field, value),))
    for task in (ping((field, value)), charge((field, value)), memory):
        reply = await call(daemon, task)
        assert reply.status is Status.FAIL, task
        assert reply.fields[-1] == ("ERROR", f"invalid_field:{detail}"), task


async def test_a_repeated_budget_is_duplicate_field(
    nursery: trio.Nursery, config: Config, sink: Sink, sock_dir: str
) -> None:
    daemon = await start_daemon(nursery, config, os.path.join(sock_dir, "c.sock"), OPS)
    reply = await call(daemon, charge(("BUDGET", "fetches:1"), ("BUDGET", "fetches:1")))
    assert reply.get("ERROR") == "duplicate_field:BUDGET"


# --- the embedded ledger --------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_a_budget_id_idle_past_its_ttl_is_forgotten(tmp_path: os.PathLike[str]) -> None:
    clock = Clock()
    ledger = LocalLedger(str(tmp_path), BudgetsConfig(idle_ttl_s=60.0), clock=clock)
    await ledger.open("r", 1, {"fetches": 2})
    clock.now += 59.0
    assert await ledger.open("r", 1, None) == {"fetches": 2}  # used: its idle time starts anew
    clock.now += 60.0
    with pytest.raises(FieldError, match="BUDGET_ID r not held"):
        await ledger.open("r", 1, None)
    ledger.close()


async def test_the_ledger_holds_max_ids_and_refuses_one_more(tmp_path: os.PathLike[str]) -> None:
    clock = Clock()
    ledger = LocalLedger(str(tmp_path), BudgetsConfig(max_ids=3, max_ids_per_uid=2), clock=clock)
    await ledger.open("a1", 1, {"fetches": 1})
    await ledger.open("a2", 1, {"fetches": 1})
    with pytest.raises(Busy, match="2 BUDGET_IDs held by uid 1"):
        await ledger.open("a3", 1, {"fetches": 1})
    await ledger.open("b1", 2, {"fetches": 1})
    with pytest.raises(Busy, match="3 BUDGET_IDs held"):
        await ledger.open("c1", 3, {"fetches": 1})
    clock.now += BudgetsConfig().idle_ttl_s + 1
    await ledger.open("c1", 3, {"fetches": 1})  # the idle ones expired: room again
    ledger.close()


async def test_a_charge_that_does_not_fit_charges_nothing(tmp_path: os.PathLike[str]) -> None:
    ledger = LocalLedger(str(tmp_path), BudgetsConfig())
    await ledger.open("r", None, {"bytes": 10})
    assert await ledger.charge("r", "bytes", 11, strict=True) is None
    assert await ledger.charge("r", "bytes", 10, strict=True) == 0
    assert await ledger.charge("r", "bytes", 5, strict=False) == 0  # never below 0
    assert await ledger.charge("r", "fetches", 1, strict=True) is None  # not limited here
    ledger.close()


async def test_a_task_budget_made_shared_keeps_what_is_left_under_a_new_budget_id(
    tmp_path: os.PathLike[str],
) -> None:
    ledger = LocalLedger(str(tmp_path), BudgetsConfig())
    own = TaskBudget({"fetches": 3}, ledger=ledger, uid=1000)
    await own.take("fetches")
    budget_id = await own.shared_id()
    assert budget_id == await own.shared_id()
    assert await ledger.open(budget_id, 1000, None) == {"fetches": 2}
    with pytest.raises(OpError) as denied:
        await ledger.open(budget_id, 1001, None)
    assert denied.value.code is ErrorCode.PERMISSION_DENIED
    ledger.close()


async def test_exhaustion_is_an_op_error_naming_its_dimension() -> None:
    own = TaskBudget({"searches": 0})
    with pytest.raises(BudgetExhausted) as raised:
        await own.take("searches")
    assert raised.value.wire_text == "budget_exhausted:searches"
    assert own.exhausted == "searches"


# --- tasks drawing on one budget at once (reserve, then settle) -----------------------------


async def test_tasks_settling_on_one_budget_id_at_once_never_take_it_below_zero(
    config: Config,
) -> None:
    """Five tasks each settle 1000 bytes on an id holding 1000: one is paid for, the other
    four are PARTIAL, and nothing is left, never less."""
    task = charge(("BUDGET_ID", "s"), ("BUDGET", "bytes:1000"), ("SETTLE", "true"), n=1000)
    replies: list[Reply] = []
    async with dispatching(config) as dispatcher:

        async def one() -> None:
            replies.append(await run(dispatcher, replace_dimension(task, "bytes")))

        async with trio.open_nursery() as nursery:
            for _ in range(5):
                nursery.start_soon(one)
        held = await dispatcher.ledger.open("s", OWNER.uid, None)
    assert sorted(r.status for r in replies) == [Status.OK, *[Status.PARTIAL] * 4]
    assert {r.get("BUDGET_LEFT") for r in replies} == {"bytes:0"}
    assert held == {"bytes": 0}


def replace_dimension(task: Task, dimension: str) -> Task:
    fields = tuple((n, dimension if n == "DIMENSION" else v) for n, v in task.fields)
    return dataclasses.replace(task, fields=fields)


async def test_reserves_on_one_budget_id_share_what_is_left_and_give_back_the_rest(
    tmp_path: os.PathLike[str],
) -> None:
    """Five tasks reserve 1000 bytes at once on an id holding 1000: one gets it, four are
    refused; what the one did not use goes back to the id."""
    ledger = LocalLedger(str(tmp_path), BudgetsConfig())
    try:
        await ledger.open("s", 1000, {"bytes": 1000})
        budgets = [TaskBudget({"bytes": 1000}, ledger=ledger, budget_id="s") for _ in range(5)]
        taken: list[int] = []

        async def reserve(task_budget: TaskBudget) -> None:
            try:
                taken.append(await task_budget.reserve("bytes", 1000))
            except BudgetExhausted:
                taken.append(0)

        async with trio.open_nursery() as nursery:
            for task_budget in budgets:
                nursery.start_soon(reserve, task_budget)
        assert sorted(taken) == [0, 0, 0, 0, 1000]
        winner = budgets[taken.index(1000)]
        await winner.settle("bytes", 1000, 300)
        assert await ledger.open("s", 1000, None) == {"bytes": 700}
        await winner.settle("bytes", 0, 5000)  # past what is left: all of it, then exhausted
        assert (await ledger.open("s", 1000, None), winner.exhausted) == ({"bytes": 0}, "bytes")
    finally:
        ledger.close()


async def test_concurrent_tasks_on_one_budget_id_share_its_wall_time(
    config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    """Three 600 ms tasks at once on wall_ms:1000: the first reserves the 1000 as its
    deadline, the other two find none left; the 400 it did not use goes back."""
    fields = (("MS", "600"), ("BUDGET_ID", "w"), ("BUDGET", "wall_ms:1000"))
    sleep = Task("sleep", "TEST", "SLEPT", None, fields)
    replies: list[Reply] = []
    async with dispatching(config) as dispatcher:

        async def one() -> None:
            replies.append(await run(dispatcher, sleep))

        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(one)
        after = await dispatcher.try_now(ping(("BUDGET_ID", "w")), OWNER)
    assert sorted((r.status, r.get("DATA")) for r in replies) == [
        (Status.OK, "slept:600"),
        (Status.PARTIAL, "none"),
        (Status.PARTIAL, "none"),
    ]
    assert after is not None
    assert after.get("BUDGET_LEFT") == "wall_ms:400"


# --- sys ops and defaults that would lock a uid out ------------------------------------------


async def test_ping_and_cancel_are_answered_when_the_shared_wall_time_is_spent(
    config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    """An agent whose budget ran out can still ping and cancel, and see what is left."""
    sleep = Task(
        "sleep",
        "TEST",
        "SLEPT",
        None,
        (("MS", "500"), ("BUDGET_ID", "w"), ("BUDGET", "wall_ms:100")),
    )
    cancel = Task("cancel", "SYS", "ACK", None, (("ID", "k"), ("TARGET", "x"), ("BUDGET_ID", "w")))
    async with dispatching(config) as dispatcher:
        spent = await run(dispatcher, sleep)
        pong = await dispatcher.try_now(ping(("ID", "p"), ("BUDGET_ID", "w")), OWNER)
        cancelled = await run(dispatcher, cancel)
    assert spent.get("ERROR") == "budget_exhausted:wall_ms"
    assert pong == Reply(
        Status.OK,
        (("ID", "p"), ("SCOPE", "[sys]"), ("DATA", "pong"), ("BUDGET_LEFT", "wall_ms:0")),
    )
    assert not (cancelled.get("ERROR") or "").startswith("budget_exhausted")
    assert cancelled.get("BUDGET_LEFT") == "wall_ms:0"


def test_a_uid_default_of_no_wall_time_is_refused_as_it_would_lock_the_uid_out() -> None:
    with pytest.raises(ValueError, match=r"per_uid\.1000: wall_ms:0 refuses every task"):
        BudgetsConfig(per_uid={"1000": "wall_ms:0"})
    assert BudgetsConfig(per_uid={"1000": "wall_ms:1,searches:0"}).default_for(1000) == {
        "searches": 0,
        "wall_ms": 1,
    }


@pytest.mark.parametrize("code", ["cancelled", "shutting_down"])
def test_a_cancelled_or_shut_down_task_says_so_even_when_its_budget_ran_out(code: str) -> None:
    spent = TaskBudget({"bytes": 0})
    spent.exhausted = "bytes"
    reply = Reply(
        Status.FAIL, (("ID", "t"), ("SCOPE", "[]"), ("DATA", "none"), ("ERROR", f"{code}:x"))
    )
    assert budgeted(reply, spent) == Reply(
        Status.FAIL,
        (
            ("ID", "t"),
            ("SCOPE", "[]"),
            ("DATA", "none"),
            ("ERROR", f"{code}:x"),
            ("BUDGET_LEFT", "bytes:0"),
        ),
    )
    timed_out = Reply(Status.FAIL, (("DATA", "none"), ("ERROR", "timeout_exceeded:9ms")))
    assert budgeted(timed_out, spent).get("ERROR") == "budget_exhausted:bytes"


async def test_a_busy_refusal_carries_budget_left_on_the_fast_path_as_on_the_slow(
    config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    limits = SlotsConfig(web=SlotLimits(max_running=1, max_queued=0))
    config = dataclasses.replace(config, tasks=TasksConfig(specialists=limits))
    sleep = Task("sleep", "TEST", "SLEPT", None, (("MS", "1000"),))
    budgeted_sleep = Task("sleep", "TEST", "SLEPT", None, (("MS", "1"), ("BUDGET", "fetches:3")))
    async with dispatching(config) as dispatcher, trio.open_nursery() as nursery:
        nursery.start_soon(run, dispatcher, sleep)
        await trio.testing.wait_all_tasks_blocked()
        fast = await dispatcher.try_now(budgeted_sleep, OWNER)
        slow = await run(dispatcher, budgeted_sleep)
    assert fast == slow
    assert fast is not None
    assert (fast.get("ERROR") or "").startswith("busy")
    assert fast.get("BUDGET_LEFT") == "fetches:3"


async def test_a_charge_whose_budget_id_was_forgotten_mid_task_exhausts_the_task(
    tmp_path: os.PathLike[str],
) -> None:
    """Nobody pays for it: the task is answered PARTIAL rather than charging nothing."""
    clock = Clock()
    ledger = LocalLedger(str(tmp_path), BudgetsConfig(idle_ttl_s=60.0), clock=clock)
    try:
        task_budget = TaskBudget(await ledger.open("r", 1, {"bytes": 100}), ledger=ledger)
        task_budget.budget_id, task_budget.uid = "r", 1
        clock.now += 61.0
        await ledger.open("other", 1, {"bytes": 1})  # making an id forgets the idle ones
        await task_budget.spend("bytes", 10)
        assert task_budget.exhausted == "bytes"
    finally:
        ledger.close()


# --- a reserve that finds nothing left cancels only the work holding no reserve -------------


async def race_for_the_last_bytes(mine: Ledger, theirs: Ledger) -> dict[str, str]:
    """Three units of one task on BUDGET_ID ``race`` (100 bytes, in ``mine``): ``paid``
    reserves 60 of them, all it needs, and goes on working; ``idle`` holds no reserve yet;
    another task (on ``theirs``: another connection or daemon) takes the other 40; then
    ``late`` reserves 10, finds nothing left and runs the budget out. How each ended."""
    await mine.open("race", 1000, {"bytes": 100})
    task = TaskBudget(await mine.open("race", 1000, None), ledger=mine, budget_id="race", uid=1000)
    other = TaskBudget(await theirs.open("race", 1000, None), ledger=theirs, budget_id="race")
    ended: dict[str, str] = {}
    reserved, finish = trio.Event(), trio.Event()

    async def unit(name: str, amount: int, ready: trio.Event | None) -> None:
        try:
            with budget.work():
                if amount:
                    await budget.reserve_whole("bytes", amount)
                if ready is not None:
                    ready.set()
                await finish.wait()  # the rest of its work: a body still arriving
            ended[name] = "kept"
        except BudgetExhausted as exc:
            ended[name] = exc.wire_text

    token = budget.enter(task)
    try:
        with trio.fail_after(WAIT_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(unit, "paid", 60, reserved)
                nursery.start_soon(unit, "idle", 0, None)
                await reserved.wait()
                assert await other.reserve("bytes", 100) == 40
                await unit("late", 10, None)
                finish.set()
    finally:
        budget.leave(token)
    ended["left"] = task.reply_text
    return ended


async def test_a_reserve_finding_nothing_cancels_only_the_work_that_holds_no_reserve(
    tmp_path: os.PathLike[str],
) -> None:
    """On the embedded ledger (tests/redis runs the same race on Redis)."""
    ledger = LocalLedger(str(tmp_path), BudgetsConfig())
    try:
        ended = await race_for_the_last_bytes(ledger, ledger)
    finally:
        ledger.close()
    assert ended == {
        "late": "budget_exhausted:bytes",
        "idle": "budget_exhausted:bytes",
        "paid": "kept",
        "left": "bytes:0",
    }


async def test_a_reserve_a_restart_leaves_unsettled_stays_spent_and_is_never_given_back_twice(
    tmp_path: os.PathLike[str],
) -> None:
    """The daemon dies between a reserve and its settle: the ledger, reopened, keeps the
    reserve as spent (the work it bounded may have spent it all: a model bills its tokens
    whether or not the daemon lived to read its usage), so the budget is never overrun; it
    costs at most that reserve, once, and the id is still forgotten when idle past its TTL."""
    clock = Clock()
    settings = BudgetsConfig(idle_ttl_s=60.0)
    before = LocalLedger(str(tmp_path), settings, clock=clock)
    await before.open("r", 1, {"llm_tokens": 1000})
    task = TaskBudget({"llm_tokens": 1000}, ledger=before, budget_id="r", uid=1)
    assert await task.reserve("llm_tokens", 700) == 700
    before.close()  # killed before the settle
    after = LocalLedger(str(tmp_path), settings, clock=clock)
    try:
        assert await after.open("r", 1, None) == {"llm_tokens": 300}
        clock.now += 61.0
        await after.open("other", 1, {"bytes": 1})  # making an id forgets the idle ones
        assert await after.open("r", 1, {"llm_tokens": 1000}) == {"llm_tokens": 1000}
    finally:
        after.close()


async def test_a_client_hanging_up_mid_task_leaves_no_wall_time_reserved_on_its_budget_id(
    nursery: trio.Nursery, config: Config, sock_dir: str
) -> None:
    """A task on a shared id reserves its 30 s deadline of wall_ms; its client hangs up: the
    task is cancelled and its reserve settled by the time it ran, not kept for good."""
    path = os.path.join(sock_dir, "w.sock")
    await start_daemon(nursery, config, path, OPS)
    ledger = LocalLedger(config.daemon.state_dir, config.budgets)
    fields = (("BUDGET_ID", "w"), ("BUDGET", "wall_ms:100000"), ("TIMEOUT_MS", "30000"))
    try:
        with trio.fail_after(WAIT_S):
            async with open_client(path) as client, trio.open_nursery() as calls:
                calls.start_soon(client.call, Task("sleep", "TEST", "SLEPT", "60000", fields))
                while await _wall_left(ledger) != 70000:
                    await trio.sleep(0.01)  # the deadline is reserved: the task is running
                calls.cancel_scope.cancel()
            while (await _wall_left(ledger) or 0) < 90000:
                await trio.sleep(0.01)  # given back once the daemon sees the hang-up
    finally:
        ledger.close()


async def _wall_left(ledger: LocalLedger) -> int | None:
    try:
        return (await ledger.open("w", os.getuid(), None))["wall_ms"]
    except FieldError:  # not made yet
        return None


class SlowLedger(LocalLedger):
    """The embedded ledger whose first reserve answers only once ``gate`` is set, as a
    Redis reply still on its way back after its script ran."""

    def __init__(self, state_dir: str) -> None:
        super().__init__(state_dir, BudgetsConfig())
        self.gate, self.taken = trio.Event(), trio.Event()

    async def take_up_to(
        self, budget_id: str, dimension: str, amount: int
    ) -> tuple[int, int] | None:
        charged = await super().take_up_to(budget_id, dimension, amount)
        if not self.taken.is_set():
            self.taken.set()
            await self.gate.wait()
        return charged


async def test_a_unit_whose_whole_reserve_is_on_its_way_is_not_cut_by_a_run_out_meanwhile(
    tmp_path: os.PathLike[str],
) -> None:
    """The ledger has taken the first unit's 60 bytes but not yet answered when the second
    finds 40 of the 50 it needs: the second is cut, the first (paid as soon as the ledger
    took its reserve) is not, and once its answer comes it finishes and is kept."""
    ledger = SlowLedger(str(tmp_path))
    await ledger.open("race", 1000, {"bytes": 100})
    task = TaskBudget({"bytes": 100}, ledger=ledger, budget_id="race", uid=1000)
    ended: dict[str, str] = {}

    async def unit(name: str, amount: int) -> None:
        try:
            with budget.work():
                await budget.reserve_whole("bytes", amount)
                await trio.lowlevel.checkpoint()  # then reads its body
            ended[name] = "kept"
        except BudgetExhausted as exc:
            ended[name] = exc.wire_text

    token = budget.enter(task)
    try:
        with trio.fail_after(WAIT_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(unit, "first", 60)
                await ledger.taken.wait()
                await unit("second", 50)
                ledger.gate.set()
    finally:
        budget.leave(token)
        ledger.close()
    assert ended == {"second": "budget_exhausted:bytes", "first": "kept"}
    assert task.reply_text == "bytes:40"  # the second's 40 given back


async def test_a_reserve_whose_work_is_cancelled_while_the_ledger_takes_it_is_given_back(
    tmp_path: os.PathLike[str],
) -> None:
    """The work is cancelled (its deadline) after the ledger took its 60 bytes, before the
    answer came back: the ledger step is not abandoned, so the work's settle knows what it
    reserved and gives it all back (abandoned, the 60 bytes were spent for good)."""
    ledger = SlowLedger(str(tmp_path))
    await ledger.open("race", 1000, {"bytes": 100})
    task = TaskBudget({"bytes": 100}, ledger=ledger, budget_id="race", uid=1000)
    deadline = trio.CancelScope()

    async def work() -> None:
        with deadline:
            reserved = await budget.reserve("bytes", 60)
            try:
                await trio.sleep_forever()  # its body, never read
            finally:
                with trio.CancelScope(shield=True):
                    await budget.settle("bytes", reserved, 0)

    token = budget.enter(task)
    try:
        with trio.fail_after(WAIT_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(work)
                await ledger.taken.wait()
                deadline.cancel()
                ledger.gate.set()
        assert await ledger.open("race", 1000, None) == {"bytes": 100}
    finally:
        budget.leave(token)
        ledger.close()


async def test_a_reserve_of_nothing_asks_the_ledger_nothing(tmp_path: os.PathLike[str]) -> None:
    """A HEAD answer's or a 204's body reserves 0 bytes: no ledger step (here one fails, the
    ledger's file being a directory); a reserve of 1 still asks it."""
    ledger = LocalLedger(str(tmp_path), BudgetsConfig())
    os.makedirs(ledger.path)
    shared = TaskBudget({"bytes": 10}, ledger=ledger, budget_id="z", uid=1000)
    assert await shared.reserve_whole("bytes", 0) == 0
    assert await shared.reserve("bytes", 0) == 0
    with pytest.raises(sqlite3.Error):
        await shared.reserve("bytes", 1)
