"""SPEC C-6: ``REQ:cancel TARGET <id>`` over the real connection loop and dispatcher, with
connections of chosen uids on in-memory streams; and C-5: work a shutdown cuts answers
``shutting_down``, never a failure of the op's own. (Hang-ups need a real socket:
tests/test_cancel_socket.py.)"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from typing import Any

import trio
import trio.testing

from csp_web.config import Config, SlotLimits, SlotsConfig, TasksConfig
from csp_web.core.api.context import OpContext, Peer
from csp_web.core.api.deadlines import CUT_DETAIL, work_deadline
from csp_web.core.api.errors import OpError
from csp_web.core.api.fields import Params
from csp_web.core.api.ops import Op
from csp_web.core.api.replies import Result
from csp_web.core.dispatch.cancels import BY_HANGUP, Cancels
from csp_web.core.dispatch.dispatcher import DispatchPort
from csp_web.core.wire.connection import StreamOptions, serve_connection
from protocol import Connection, ErrorCode, Limits, Reply, Task, serialize
from tests.conftest import wait_until
from tests.harness import TEST_OPS, ClientEnd, Harness, open_harness, outbox_of

WAIT_S = 30.0
LONG_MS = 600_000  # a sleep no test waits out: only a cancel ends it


def _connect(harness: Harness, peer: Peer) -> ClientEnd:
    """A connection from ``peer`` (its uid is what REQ:cancel matches) on a memory stream."""
    client, server = trio.testing.memory_stream_pair()
    options = StreamOptions(harness.dispatcher.services.config.connection, None)
    harness.nursery.start_soon(
        serve_connection, server, harness.dispatcher, peer, options, harness.shutdown
    )
    return ClientEnd(client, Connection(Limits(1 << 24, 1 << 24, 10_000)))


def _sleep(task_id: str, ms: int = LONG_MS) -> bytes:
    fields = (("ID", task_id), ("TIMEOUT_MS", str(LONG_MS)))
    return serialize(Task("sleep", "TEST", "SLEPT", str(ms), fields))


def _cancel(task_id: str, target: str) -> bytes:
    return serialize(Task("cancel", "SYS", "ACK", None, (("ID", task_id), ("TARGET", target))))


def _cancelled(task_id: str) -> bytes:
    reply = f"STATUS FAIL\nID {task_id}\nSCOPE []\nDATA none\nERROR cancelled:by REQ:cancel\n\n"
    return reply.encode()


def _unknown(task_id: str, target: str) -> bytes:
    return (
        f"STATUS FAIL\nID {task_id}\nSCOPE [sys]\nDATA none\nERROR unknown_task:{target}\n\n"
    ).encode()


def _slept(task_id: str, ms: int) -> bytes:
    return f"STATUS OK\nID {task_id}\nSCOPE [test]\nDATA slept:{ms}\n\n".encode()


async def _in_flight(harness: Harness, count: int) -> None:
    # Every test here runs on autojump_clock: the poll's sleeps cost no real time. The
    # dispatcher's count has no event of its own (its fast path is being rewritten).
    await wait_until(lambda: harness.dispatcher.stats.in_flight == count, timeout_s=WAIT_S)


def _audits(harness: Harness, task_id: str) -> list[dict[str, Any]]:
    rows = outbox_of(harness.dispatcher)._store.oldest(10_000)
    records = [json.loads(write.data) for _, write in rows if write.type == "audit"]
    return [record for record in records if record.get("id") == task_id]


async def _frames(end: ClientEnd, count: int) -> list[bytes]:
    with trio.fail_after(WAIT_S):
        return [serialize(reply) for reply in await end.replies(count)]


async def test_cancel_ends_every_unfinished_task_of_its_uid_with_that_id_on_any_connection(
    config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    """Three tasks with ID dup (two connections of uid 1000) are cancelled by a third
    connection of the same uid: CANCELLED 3, each answers FAIL cancelled, audited once;
    the task with another ID runs on."""
    async with open_harness(config) as harness:
        first = _connect(harness, Peer("a", 1000))
        second = _connect(harness, Peer("b", 1000))
        third = _connect(harness, Peer("c", 1000))
        await first.send(_sleep("dup") + _sleep("dup") + _sleep("keep", 5000))
        await second.send(_sleep("dup"))
        await _in_flight(harness, 4)
        await third.send(_cancel("k", "dup"))
        assert await _frames(third, 1) == [
            b"STATUS OK\nID k\nSCOPE [sys]\nDATA cancelled\nCANCELLED 3\n\n"
        ]
        assert await _frames(second, 1) == [_cancelled("dup")]
        assert await _frames(first, 3) == [
            _cancelled("dup"),
            _cancelled("dup"),
            _slept("keep", 5000),
        ]
        audits = _audits(harness, "dup")
        assert [(a["outcome"], a["error"]) for a in audits] == [
            ("FAIL", "cancelled:by REQ:cancel")
        ] * 3


async def test_cancel_of_an_id_with_no_unfinished_task_is_unknown_task(
    config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_harness(config) as harness:
        end = _connect(harness, Peer("a", 1000))
        await end.send(_cancel("k", "nothing-here"))
        assert await _frames(end, 1) == [_unknown("k", "nothing-here")]


async def test_a_task_that_finished_before_the_cancel_is_not_counted(
    config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_harness(config) as harness:
        end = _connect(harness, Peer("a", 1000))
        await end.send(_sleep("quick", 0))
        assert await _frames(end, 1) == [_slept("quick", 0)]
        await end.send(_cancel("k", "quick"))
        assert await _frames(end, 1) == [_unknown("k", "quick")]
        assert [a["outcome"] for a in _audits(harness, "quick")] == ["OK"]


async def test_another_uid_cannot_cancel_a_task_and_is_told_only_unknown_task(
    config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_harness(config) as harness:
        owner = _connect(harness, Peer("a", 1000))
        stranger = _connect(harness, Peer("b", 2000))
        await owner.send(_sleep("mine", 3000))
        await _in_flight(harness, 1)
        await stranger.send(_cancel("k", "mine"))
        assert await _frames(stranger, 1) == [_unknown("k", "mine")]
        assert await _frames(owner, 1) == [_slept("mine", 3000)]


def _web_runs_5(config: Config) -> Config:
    """The web pool (TEST_OPS' sleep) at the seed's 5 running + 10 queued."""
    slots = SlotsConfig(web=SlotLimits(max_running=5, max_queued=10))
    return replace(config, tasks=TasksConfig(specialists=slots))


async def test_a_task_waiting_in_its_pools_queue_is_cancelled_and_frees_its_place(
    config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    """C-3, C-6: the web pool runs 5; the sixth waits in its queue until cancelled."""
    async with open_harness(_web_runs_5(config)) as harness:
        end = _connect(harness, Peer("a", 1000))
        await end.send(b"".join(_sleep(f"r{n}", 2000) for n in range(5)))
        await _in_flight(harness, 5)
        await end.send(_sleep("queued"))
        await _in_flight(harness, 6)
        assert harness.dispatcher.slots("web").queued == 1
        await end.send(_cancel("k", "queued"))
        replies = await _frames(end, 2)
        assert replies == [
            b"STATUS OK\nID k\nSCOPE [sys]\nDATA cancelled\nCANCELLED 1\n\n",
            _cancelled("queued"),
        ]
        assert harness.dispatcher.slots("web").queued == 0
        assert sorted(await _frames(end, 5)) == [_slept(f"r{n}", 2000) for n in range(5)]


async def test_a_cancel_names_a_task_id_or_is_invalid_field(
    config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_harness(config) as harness:
        end = _connect(harness, Peer("a", 1000))
        await end.send(_cancel("k", "no spaces allowed"))
        (reply,) = await end.replies(1)
        assert (reply.get("ERROR") or "").partition(":")[0] == "invalid_field"


async def _until_work_deadline(params: Params, ctx: OpContext, _: Any) -> Result:
    """As fetch or exec do: stop at the work deadline and report a failure of one's own."""
    with trio.move_on_at(work_deadline()):
        await trio.sleep_forever()
    raise OpError(ErrorCode.FETCH_FAILED, "timeout")


async def test_an_op_running_when_the_grace_period_begins_is_cut_as_shutting_down(
    config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    """C-5: an op that ends its work a little before its deadline (to name its own cause),
    running when the daemon starts to stop, is cut at the grace period's end."""
    ops = [*TEST_OPS, Op("patient", "TEST", "DONE", "web", _until_work_deadline)]
    async with open_harness(config, ops) as harness:
        end = _connect(harness, Peer("a", 1000))
        task = Task("patient", "TEST", "DONE", None, (("ID", "p"), ("TIMEOUT_MS", "60000")))
        await end.send(serialize(task))
        await _in_flight(harness, 1)
        harness.shutdown.begin()
        harness.shutdown.cut_at(trio.current_time() + 1.0)
        (reply,) = await end.replies(1)
        assert reply.get("ERROR") == f"{ErrorCode.SHUTTING_DOWN}:{CUT_DETAIL}"
        assert harness.shutdown.cut == 1


async def test_a_task_admitted_from_the_queue_during_the_grace_period_is_cut_as_shutting_down(
    config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    """The issue's case: queued work that starts while the daemon stops gets the grace
    period's end as its deadline; it is answered shutting_down, not timeout_exceeded."""
    ops = [*TEST_OPS, Op("patient", "TEST", "DONE", "web", _until_work_deadline)]
    async with open_harness(_web_runs_5(config), ops) as harness:
        end = _connect(harness, Peer("a", 1000))
        patient = serialize(Task("patient", "TEST", "DONE", None, (("TIMEOUT_MS", "60000"),)))
        await end.send(b"".join(_sleep(f"r{n}", 500) for n in range(5)))
        await _in_flight(harness, 5)
        await end.send(patient)
        await _in_flight(harness, 6)
        assert harness.dispatcher.slots("web").queued == 1  # the patient waits its turn
        harness.shutdown.begin()
        harness.shutdown.cut_at(trio.current_time() + 5.0)
        replies: list[Reply] = await end.replies(6)
        assert [r.get("ERROR") for r in replies if r.id is None] == [
            f"{ErrorCode.SHUTTING_DOWN}:{CUT_DETAIL}"
        ]


async def test_a_cron_run_belongs_to_no_connection_and_no_cancel_reaches_it(
    config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    """C-6: a task cron submits (through the dispatcher's port) has no ticket: REQ:cancel
    with its ID from the same uid finds nothing, and it runs to its end."""
    async with open_harness(config) as harness:
        port = DispatchPort(harness.dispatcher)
        replies: list[Reply] = []
        answered = trio.Event()
        fields = (("ID", "nightly"), ("TIMEOUT_MS", str(LONG_MS)))

        async def cron_run() -> None:
            task = Task("sleep", "TEST", "SLEPT", "3000", fields)
            replies.append(await port.submit(task, uid=os.getuid()))
            answered.set()

        harness.nursery.start_soon(cron_run)
        await _in_flight(harness, 1)
        end = _connect(harness, Peer("a", os.getuid()))  # the uid cron ran it as
        await end.send(_cancel("k", "nightly"))
        assert await _frames(end, 1) == [_unknown("k", "nightly")]
        with trio.fail_after(WAIT_S):
            await answered.wait()
        assert [serialize(r) for r in replies] == [_slept("nightly", 3000)]


def test_a_task_opened_after_its_connections_peer_hung_up_is_cancelled_until_it_closes() -> None:
    """C-6: a frame read after the hang-up was sent before it, so its ticket is cancelled at
    once; once the connection has closed, its name may serve a new one, whose tasks are not."""
    cancels = Cancels()
    peer = Peer("uid:1#1", 1)
    running = cancels.open(peer, "a")
    assert cancels.cancel_connection(peer.connection) == 1
    late = cancels.open(peer, "b")
    other = cancels.open(Peer("uid:1#2", 1), "c")
    assert (running.reason, late.reason, other.reason) == (BY_HANGUP, BY_HANGUP, None)
    cancels.forget(peer.connection)
    assert cancels.open(peer, "d").reason is None
