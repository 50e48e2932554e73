"""Audit summaries of IN:SYS frames (SPEC O-4), against a real outbox and its SQLite store.

The outbox here has no Memory Specialist, so what is written stays pending where the test can
read it. Every wait is bounded; the interval is driven by trio's mock clock.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import trio
import trio.testing

from csp_web.app.memory_path import outbox_path
from csp_web.client.trio_client import open_client
from csp_web.config import AuditConfig, Config, OutboxConfig
from csp_web.core.api.context import Peer
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.core.dispatch.sys_audits import TIMER_WRITES_PER_PASS
from csp_web.memory.outbox import open_outbox
from csp_web.memory.outbox_store import OutboxStore
from protocol import Status, Task
from tests.conftest import start_daemon, with_memory
from tests.harness import TEST_OPS, build_dispatcher, outbox_of


def _ping(task_id: str | None) -> Task:
    fields = (("ID", task_id),) if task_id is not None else ()
    return Task("ping", "SYS", "PONG", None, fields)


def _audit(config: Config, **changes: Any) -> Config:
    return replace(with_memory(config, None), audit=AuditConfig(**changes))


@asynccontextmanager
async def _dispatcher(config: Config) -> AsyncIterator[Dispatcher]:
    async with open_outbox(config.outbox_path, config.outbox, config.memory) as outbox:
        yield build_dispatcher(config, outbox_path(config, outbox), TEST_OPS, None)


def _pending(path: str) -> list[dict[str, Any]]:
    """The pending records a second, independent store on ``path`` sees, oldest first."""
    store = OutboxStore(path, "full")
    try:
        return [json.loads(write.data) for _, write in store.oldest(1000)]
    finally:
        store.close()


async def test_a_summary_is_written_when_it_holds_max_frames_and_the_next_frame_opens_another(
    config: Config,
) -> None:
    """O-4: at sys_summary_max_frames (N) frames the connection's summary is written, durable
    before the N-th reply; N-1 frames write nothing; frame N+1 starts a new summary."""
    config = _audit(config, sys_summary_max_frames=3)
    async with _dispatcher(config) as dispatcher:
        outbox = outbox_of(dispatcher)
        first = [await dispatcher.run(_ping(f"p{n}"), Peer("a")) for n in range(2)]
        assert outbox.room.depth == 0  # N-1
        failed = await dispatcher.run(Task("ping", "SYS", "PONG", None, (("X", "1"),)), Peer("a"))
        assert outbox.room.depth == 1  # N: written before that reply
        record = _pending(config.outbox_path)[0]
        await dispatcher.run(_ping("p3"), Peer("a"))
        assert outbox.room.depth == 1  # N+1 is in a new, open summary
    assert [r.status for r in first] == [Status.OK, Status.OK]
    assert failed.status is Status.FAIL
    record.pop("first")
    record.pop("last")
    record.pop("duration_ms_max")
    assert record == {
        "summary": "sys",
        "connection": "a",
        "uid": None,
        "pid": None,
        "frames": 3,
        "failed": 1,
        "ops": {"SYS/ping": 2, "SYS/ping:unknown_field": 1},
        "ids": ["p0", "p1"],
    }


async def test_a_summary_is_written_when_its_interval_is_over_and_not_before(
    config: Config, mock_clock: trio.testing.MockClock
) -> None:
    """O-4: a summary is written sys_summary_interval_s after its first frame, however quiet
    the connection stays."""
    config = _audit(config, sys_summary_interval_s=2.0)
    async with _dispatcher(config) as dispatcher:
        outbox = outbox_of(dispatcher)
        await dispatcher.run(_ping("lone"), Peer("a"))
        mock_clock.jump(1.999)
        await trio.testing.wait_all_tasks_blocked()
        assert outbox.room.depth == 0
        mock_clock.jump(0.001)
        await trio.testing.wait_all_tasks_blocked()
        assert outbox.room.depth == 1
        assert len(dispatcher.sys_audits or ()) == 0
    assert [r["ids"] for r in _pending(config.outbox_path)] == [["lone"]]


async def test_closing_a_connection_writes_its_open_summary(
    nursery: trio.Nursery, config: Config, sock_dir: str
) -> None:
    """O-4: a connection's summary is written when it closes, frames without ID counted."""
    config = replace(config, audit=AuditConfig())  # the shipped defaults: 1000 frames, 1 s
    daemon = await start_daemon(nursery, config, os.path.join(sock_dir, "csp.sock"))
    outbox = outbox_of(daemon.dispatcher)
    async with open_client(daemon.socket_path) as client:
        replies = await client.call_many([_ping("c0"), _ping("c1")], timeout_s=10)
        assert outbox.room.depth == 0
    assert [r.status for r in replies] == [Status.OK, Status.OK]
    # The daemon sees the close as soon as it polls (a Unix socket's EOF is immediate), and
    # the summary commits on the event loop (synchronous: normal): once every task is
    # blocked, it is pending.
    await trio.testing.wait_all_tasks_blocked()
    assert outbox.room.depth == 1
    (record,) = _pending(config.outbox_path)
    frames = (record["frames"], sorted(record["ids"]), record["ops"])
    assert frames == (2, ["c0", "c1"], {"SYS/ping": 2})  # C-2: replies may come in any order


async def test_flush_at_exit_writes_every_open_summary(config: Config) -> None:
    """O-4: at exit (before the outbox's last flush) every open summary is written, a
    background peer's (``cron``) included."""
    config = _audit(config)
    async with _dispatcher(config) as dispatcher:
        await dispatcher.run(_ping("a0"), Peer("a"))
        await dispatcher.run(_ping(None), Peer("cron"))
        assert outbox_of(dispatcher).room.depth == 0
        dispatcher.flush_audits()
        assert outbox_of(dispatcher).room.depth == 2
    records = _pending(config.outbox_path)
    assert [(r["connection"], r["ids"], r["frames"]) for r in records] == [
        ("a", ["a0"], 1),
        ("cron", [], 1),
    ]


async def test_a_summary_past_max_pending_is_folded_with_the_counts_it_stands_for(
    config: Config,
) -> None:
    """O-3, O-4: a summary never uses the reserve: past max_pending its per-op counts join
    the folded summary record, frame for frame."""
    config = replace(
        _audit(config, sys_summary_max_frames=2), outbox=OutboxConfig(max_pending=1, reserve=5)
    )
    async with _dispatcher(config) as dispatcher:
        outbox = outbox_of(dispatcher)
        for n in range(2):
            await dispatcher.run(_ping(f"in{n}"), Peer("a"))
        assert (outbox.room.depth, outbox.room.folded) == (1, 0)
        for n in range(2):
            await dispatcher.run(_ping(f"out{n}"), Peer("a"))
        assert (outbox.room.depth, outbox.room.folded) == (1, 2)
    records = _pending(config.outbox_path)
    assert records[0]["ids"] == ["in0", "in1"]
    assert (records[1]["folded"], records[1]["total"]) == ({"SYS/ping": 2}, 2)


async def test_summaries_of_connections_closing_together_share_one_commit(
    config: Config,
) -> None:
    """O-4: a burst of closes (an adversary's 256 connections at once) costs one transaction,
    not one each: nothing is committed until the closing task's next scheduler pass, then
    every summary is, together."""
    config = _audit(config)
    async with _dispatcher(config) as dispatcher:
        for name in ("a", "b", "c"):
            await dispatcher.run(_ping(name), Peer(name))
        for name in ("a", "b", "c"):
            dispatcher.connection_closed(Peer(name))
        assert outbox_of(dispatcher).room.depth == 3
        assert _pending(config.outbox_path) == []  # gathered, not yet committed
        await trio.testing.wait_all_tasks_blocked()
        assert [r["ids"] for r in _pending(config.outbox_path)] == [["a"], ["b"], ["c"]]


async def test_summaries_falling_due_together_are_written_a_bounded_batch_per_scheduler_pass(
    config: Config, mock_clock: trio.testing.MockClock
) -> None:
    """Issue 21 §5: the timer writes at most TIMER_WRITES_PER_PASS summaries per scheduler
    pass, so a burst of connections whose summaries fall due together cannot hold the loop
    (every connection's reply) for the whole burst's records in one step."""
    config = _audit(config, sys_summary_interval_s=1.0)
    burst = 3 * TIMER_WRITES_PER_PASS + 1
    async with _dispatcher(config) as dispatcher, trio.open_nursery() as nursery:
        outbox = outbox_of(dispatcher)
        for n in range(burst):
            await dispatcher.run(_ping(f"p{n}"), Peer(f"c{n}"))
        depths: list[int] = []

        async def watch_passes() -> None:
            while True:  # one sample per scheduler pass
                depths.append(outbox.room.depth)
                await trio.lowlevel.checkpoint()

        nursery.start_soon(watch_passes)
        mock_clock.jump(1.0)
        with trio.fail_after(5):
            while outbox.room.depth < burst:
                await trio.lowlevel.checkpoint()
        nursery.cancel_scope.cancel()
    steps = [after - before for before, after in itertools.pairwise(depths)]
    # trio runs a pass's tasks in any order, so two of the timer's batches may fall between
    # two samples; before the bound, all of the burst fell between two.
    assert max(steps) <= 2 * TIMER_WRITES_PER_PASS < burst
