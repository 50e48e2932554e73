"""The durable memory outbox against real peers: the reference sink and a scripted CSP/1 peer.

Every wait ends on an event the outbox or a peer signals, bounded by ``trio.fail_after``;
nothing sleeps on the real clock and nothing asserts on elapsed time.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import pytest
import trio
import trio.testing

from csp_web.client.trio_client import open_client
from csp_web.config import (
    Config,
    ConnectionConfig,
    MemoryConfig,
    OutboxConfig,
    SocketConfig,
)
from csp_web.core.api.audit import OpAudit
from csp_web.core.api.context import OpContext, Peer
from csp_web.core.api.errors import OpError
from csp_web.core.api.fields import FieldSpec, Params
from csp_web.core.api.ops import Op
from csp_web.core.api.records import MemoryWrite
from csp_web.core.api.replies import Result
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.core.transports.unix import Lease, serve_unix
from csp_web.core.wire.connection import Shutdown, StreamOptions, serve_connection
from csp_web.memory.outbox import Outbox, open_outbox
from csp_web.memory.outbox_store import OutboxStore
from protocol import ErrorCode, Reply, Status, Task
from tests.conftest import (
    Sink,
    audit_ids,
    sink_text,
    start_daemon,
    start_sink,
    with_memory,
)
from tests.harness import build_dispatcher, outbox_of

PING = Task("ping", "SYS", "PONG")
_PING_BYTES = b"TASK REQ:ping IN:SYS OUT:PONG\n\n"

WAIT_S = 10.0  # a bound on waits that end on an event, never a timing assertion


async def _wait_connected(outbox: Outbox) -> None:
    """Until delivery is connected (the outbox wakes its waiters at every change of it)."""
    with trio.fail_after(WAIT_S):
        while not outbox.room.connected:
            await outbox.room.wait_changed()


async def _wait_delivered(outbox: Outbox, count: int) -> None:
    """Until nothing is pending and at least ``count`` writes were acknowledged."""
    with trio.fail_after(WAIT_S):
        await outbox.wait_drained()
    assert outbox.delivery.delivered >= count


def _write(n: int, path: str = "order/log.txt") -> MemoryWrite:
    return MemoryWrite("sys", "audit", path, f"line {n}", f"w-test-{n}")


def _outbox_path(tmp_path: os.PathLike[str]) -> str:
    return os.path.join(tmp_path, "outbox.sqlite3")


async def _stored(path: str) -> tuple[tuple[int, int], list[MemoryWrite]]:
    """What a second, independent store on ``path`` sees: totals and pending writes."""

    def read() -> tuple[tuple[int, int], list[MemoryWrite]]:
        store = OutboxStore(path, "full")
        try:
            return store.totals(), [write for _, write in store.oldest(1_000_000)]
        finally:
            store.close()

    return await trio.to_thread.run_sync(read)


@pytest.mark.parametrize("synchronous", ["normal", "full"])
async def test_a_lone_write_and_a_group_are_each_on_disk_in_order_once_insert_returns(
    tmp_path: os.PathLike[str], synchronous: str
) -> None:
    """O-1: a commit of one write (its statement alone, outbox_store.py) is as durable as a
    group's: a second store on the file sees both, in insertion order, with their content."""
    path = _outbox_path(tmp_path)
    store = OutboxStore(path, synchronous)
    try:
        store.insert([_write(0)])
        store.insert([_write(1), _write(2)])
        store.insert([_write(3)])
        totals, pending = await _stored(path)
    finally:
        store.close()
    assert pending == [_write(n) for n in range(4)]
    assert totals == (4, sum(len(f"line {n}") + len("order/log.txt") for n in range(4)))


async def _rejected_rows(path: str) -> list[tuple[str, str]]:
    def read() -> list[tuple[str, str]]:
        db = sqlite3.connect(path)
        try:
            return [(str(i), str(e)) for i, e in db.execute("SELECT id, error FROM rejected")]
        finally:
            db.close()

    return await trio.to_thread.run_sync(read)


def _code(reply: Reply) -> str:
    return (reply.get("ERROR") or "").partition(":")[0]


def _ping(task_id: str) -> Task:
    return Task("ping", "SYS", "PONG", None, (("ID", task_id),))


async def _noop(params: Params, ctx: OpContext, _: Any) -> Result:
    return Result("done", scope=("test",))


NOOP: Op[Any] = Op(
    "noop", "TEST", "DONE", "web", _noop, doc="a web-specialist op that does nothing"
)


async def test_put_is_durable_when_it_returns(tmp_path: os.PathLike[str]) -> None:
    """M-2: a write is in the durable store the moment ``put`` returns."""
    path = _outbox_path(tmp_path)
    write = _write(1)
    async with open_outbox(path, OutboxConfig(), MemoryConfig()) as outbox:
        await outbox.put(write)
        assert outbox.room.depth == 1
        totals, pending = await _stored(path)
    assert totals == (1, len(write.data) + len(write.path))
    assert pending == [write]


async def test_writes_left_pending_are_counted_when_the_outbox_reopens(
    tmp_path: os.PathLike[str],
) -> None:
    """M-2: undelivered writes stay on disk across a close and count toward the new depth."""
    path = _outbox_path(tmp_path)
    async with open_outbox(path, OutboxConfig(), MemoryConfig()) as outbox:
        for n in range(3):
            await outbox.put(_write(n))
    async with open_outbox(path, OutboxConfig(), MemoryConfig()) as reopened:
        assert reopened.room.depth == 3
        assert reopened.room.bytes == sum(
            len(_write(n).data) + len(_write(n).path) for n in range(3)
        )


async def test_writes_reach_the_sink_in_put_order(
    tmp_path: os.PathLike[str], config: Config, sink: Sink
) -> None:
    """M-1, M-2: writes to one PATH arrive in the order they were put, over several batches."""
    memory = replace(config.memory, batch_size=4)
    outbox_config = OutboxConfig(synchronous="normal")
    async with open_outbox(_outbox_path(tmp_path), outbox_config, memory) as outbox:
        for n in range(40):
            await outbox.put(_write(n))
        with trio.fail_after(10):
            await outbox.wait_drained()
    content = sink_text(sink.directory, "order/log.txt") or ""
    assert content.splitlines() == [f"line {n}" for n in range(40)]


async def test_an_ack_removes_the_write_from_the_store(
    tmp_path: os.PathLike[str], config: Config, sink: Sink
) -> None:
    """M-2: an OK with the write's ID is what takes it out of the outbox."""
    path = _outbox_path(tmp_path)
    async with open_outbox(path, OutboxConfig(), config.memory) as outbox:
        for n in range(5):
            await outbox.put(_write(n))
        with trio.fail_after(WAIT_S):
            await outbox.wait_drained()
        assert (outbox.delivery.delivered, outbox.delivery.rejected, outbox.room.bytes) == (5, 0, 0)
        totals, pending = await _stored(path)
    assert (totals, pending) == ((0, 0), [])
    assert {f"w-test-{n}" for n in range(5)} <= sink.store.ids


async def test_a_memory_specialist_that_is_down_never_fails_a_reply(
    nursery: trio.Nursery, config: Config, sock_dir: str, tmp_path: os.PathLike[str]
) -> None:
    """M-2: with nothing on the memory socket, ops still answer and their writes queue; a
    sink started later receives them all (reconnect with backoff)."""
    daemon = await start_daemon(nursery, config, os.path.join(sock_dir, "csp.sock"))
    outbox = outbox_of(daemon.dispatcher)
    async with open_client(daemon.socket_path) as client:
        replies = await client.call_many([_ping(f"down-{n}") for n in range(5)], timeout_s=10)
    assert [r.status for r in replies] == [Status.OK] * 5
    assert outbox.room.depth == 5
    assert not outbox.room.connected
    assert config.memory.socket_path is not None
    sink = await start_sink(nursery, config.memory.socket_path, os.path.join(tmp_path, "mem"))
    with trio.fail_after(WAIT_S):
        await outbox.wait_drained()
    assert {f"down-{n}" for n in range(5)} <= audit_ids(sink.directory)


async def test_a_sink_that_restarts_receives_the_writes_made_while_it_was_down(
    nursery: trio.Nursery, config: Config, sock_dir: str, tmp_path: os.PathLike[str]
) -> None:
    """M-2: losing the Memory Specialist mid-connection is survived; delivery reconnects."""
    assert config.memory.socket_path is not None
    memory_dir = os.path.join(tmp_path, "mem")
    sink = await start_sink(nursery, config.memory.socket_path, memory_dir)
    daemon = await start_daemon(nursery, config, os.path.join(sock_dir, "csp.sock"))
    outbox = outbox_of(daemon.dispatcher)
    async with open_client(daemon.socket_path) as client:
        await client.call(_ping("before"))
        await _wait_delivered(outbox, 1)
        assert outbox.room.connected
        await sink.stop()
        assert not os.path.exists(config.memory.socket_path)
        reply = await client.call(_ping("while-down"))
    assert reply.status is Status.OK
    await start_sink(nursery, config.memory.socket_path, memory_dir)
    with trio.fail_after(WAIT_S):
        await outbox.wait_drained()
    assert {"before", "while-down"} <= audit_ids(memory_dir)


async def test_a_new_outbox_delivers_what_an_earlier_one_left(
    tmp_path: os.PathLike[str], config: Config, sink: Sink
) -> None:
    """M-2: writes persisted by a first outbox (no Memory Specialist) are delivered after a
    restart that has one."""
    path = _outbox_path(tmp_path)
    async with open_outbox(path, OutboxConfig(), with_memory(config, None).memory) as first:
        for n in range(10):
            await first.put(_write(n))
    async with open_outbox(path, OutboxConfig(), config.memory) as second:
        assert second.room.depth == 10
        with trio.fail_after(10):
            await second.wait_drained()
        assert second.delivery.delivered == 10
    content = sink_text(sink.directory, "order/log.txt") or ""
    assert content.splitlines() == [f"line {n}" for n in range(10)]


@pytest.mark.parametrize(("max_pending", "reserve"), [(1, 0), (3, 2)])
async def test_puts_succeed_up_to_max_pending_plus_reserve_then_outbox_full(
    tmp_path: os.PathLike[str], max_pending: int, reserve: int
) -> None:
    """M-2: the outbox is bounded; past ``max_pending + reserve`` a put raises outbox_full."""
    limits = OutboxConfig(max_pending=max_pending, reserve=reserve)
    async with open_outbox(_outbox_path(tmp_path), limits, MemoryConfig()) as outbox:
        for n in range(max_pending):
            assert not outbox.room.full
            await outbox.put(_write(n))
        assert outbox.room.full
        for n in range(max_pending, max_pending + reserve):
            await outbox.put(_write(n))
        with pytest.raises(OpError) as refused:
            await outbox.put(_write(99))
        assert refused.value.code is ErrorCode.OUTBOX_FULL
        assert (outbox.room.depth, outbox.room.refused) == (max_pending + reserve, 1)
    totals, _ = await _stored(_outbox_path(tmp_path))
    assert totals[0] == max_pending + reserve


async def test_a_flood_of_refused_writes_logs_one_warning_with_the_count(
    tmp_path: os.PathLike[str], caplog: pytest.LogCaptureFixture
) -> None:
    """A full outbox may refuse thousands of writes a second: one line, not one each."""
    limits = OutboxConfig(max_pending=1, reserve=0)
    async with open_outbox(_outbox_path(tmp_path), limits, MemoryConfig()) as outbox:
        await outbox.put(_write(0))
        with caplog.at_level(logging.WARNING, logger="csp_web.memory.outbox_room"):
            for n in range(1, 1001):
                with pytest.raises(OpError):
                    await outbox.put(_write(n))
        assert outbox.room.refused == 1000
    warnings = [r.getMessage() for r in caplog.records if "outbox full" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "1 refused since start" in warnings[0]


async def test_a_web_op_runs_below_max_pending_and_is_refused_at_it(
    nursery: trio.Nursery, config: Config, sock_dir: str
) -> None:
    """M-2, E-1: at N-1 pending writes a web op runs (its audit makes N); at N the next web op
    gets FAIL outbox_full, while IN:SYS ops are still served."""
    max_pending = 3
    # A Memory Specialist that never answers (nothing listens): the writes stay pending.
    silent = with_memory(config, os.path.join(sock_dir, "nobody.sock"))
    limited = replace(silent, outbox=OutboxConfig(max_pending=max_pending, reserve=2))
    daemon = await start_daemon(nursery, limited, os.path.join(sock_dir, "csp.sock"), [NOOP])
    outbox = outbox_of(daemon.dispatcher)
    for n in range(max_pending - 1):
        await outbox.put(_write(n))
    noop = partial(Task, "noop", "TEST", "DONE", None)
    async with open_client(daemon.socket_path) as client:
        admitted = await client.call(noop((("ID", "at-n-minus-1"),)))
        assert outbox.room.depth == max_pending
        refused = await client.call(noop((("ID", "at-n"),)))
        ping = await client.call(_ping("sys-at-n"))
    assert admitted == Reply(
        Status.OK, (("ID", "at-n-minus-1"), ("SCOPE", "[test]"), ("DATA", "done"))
    )
    assert refused.status is Status.FAIL
    assert [key for key, _ in refused.fields] == ["ID", "SCOPE", "DATA", "ERROR"]
    assert refused.id == "at-n"
    assert (refused.get("ERROR") or "").partition(":")[0] == ErrorCode.OUTBOX_FULL
    assert ping.status is Status.OK


async def _serve_scripted_memory(
    path: str,
    handler: Callable[[str | None, Params], Awaitable[Result]],
    state_dir: str,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """A Memory Specialist built from the daemon's own parts with a scripted ``write`` op."""

    async def write(params: Params, ctx: OpContext, _: Any) -> Result:
        return await handler(ctx.client_id, params)

    fields = tuple(FieldSpec(name, required=True) for name in ("FROM", "TYPE", "PATH", "DATA"))
    write_op: Op[Any] = Op("write", "MEMORY", "ACK", "memory", write, fields)
    # No memory path: a Memory Specialist audits nothing, keeps no outbox (issue 7).
    dispatcher = build_dispatcher(Config(), None, [write_op], None)
    options = StreamOptions(ConnectionConfig(), None, sequential=True)
    async with trio.open_nursery() as nursery:

        async def handle(stream: trio.SocketStream, peer: Peer, _lease: Lease) -> None:
            await serve_connection(stream, dispatcher, peer, options, Shutdown())

        await nursery.start(
            partial(serve_unix, path, SocketConfig(), handle, handler_nursery=nursery)
        )
        task_status.started()


async def test_a_write_the_memory_specialist_fails_is_set_aside_and_the_queue_goes_on(
    nursery: trio.Nursery, tmp_path: os.PathLike[str], config: Config
) -> None:
    """M-2: a FAIL answer moves the write to the ``rejected`` table with its ERROR; later
    writes are still delivered."""
    received: list[str] = []

    async def handler(write_id: str | None, params: Params) -> Result:
        if write_id == "w-test-1":
            raise OpError(ErrorCode.INVALID_FIELD, "scripted refusal")
        received.append(params.text("DATA"))
        return Result("stored")

    assert config.memory.socket_path is not None
    await nursery.start(_serve_scripted_memory, config.memory.socket_path, handler, str(tmp_path))
    path = _outbox_path(tmp_path)
    async with open_outbox(path, OutboxConfig(), config.memory) as outbox:
        for n in range(4):
            await outbox.put(_write(n))
        with trio.fail_after(10):
            await outbox.wait_drained()
        assert (outbox.room.depth, outbox.delivery.delivered, outbox.delivery.rejected) == (0, 3, 1)
    assert received == ["line 0", "line 2", "line 3"]
    ((rejected_id, error),) = await _rejected_rows(path)
    assert rejected_id == "w-test-1"
    assert error.partition(":")[0] == ErrorCode.INVALID_FIELD
    totals, _ = await _stored(path)
    assert totals == (0, 0)


def _outbox_stats(reply: Reply) -> dict[str, str]:
    return dict(item.split(":", 1) for item in (reply.get("OUTBOX") or "").split(","))


async def test_stats_reports_outbox_depth_and_deliveries(
    nursery: trio.Nursery, config: Config, sock_dir: str, tmp_path: os.PathLike[str]
) -> None:
    """M-2: REQ:stats shows writes pending while the Memory Specialist is away, then delivered."""
    daemon = await start_daemon(nursery, config, os.path.join(sock_dir, "csp.sock"))
    outbox: Outbox = outbox_of(daemon.dispatcher)
    stats = Task("stats", "SYS", "STATS")
    async with open_client(daemon.socket_path) as client:
        await client.call_many([_ping(f"s{n}") for n in range(3)])
        waiting = await client.call(stats)
        assert config.memory.socket_path is not None
        await start_sink(nursery, config.memory.socket_path, os.path.join(tmp_path, "mem"))
        await _wait_delivered(outbox, 4)
        delivered = await client.call(stats)
    assert _outbox_stats(waiting) == {
        "depth": "3",
        "delivered": "0",
        "rejected": "0",
        "refused": "0",
        "connected": "false",
        "waiting": "0",
    }
    assert "outbox_depth:3" in (waiting.get("DATA") or "").split(",")
    assert _outbox_stats(delivered) == {
        "depth": "0",
        "delivered": "4",  # three pings and the first stats
        "rejected": "0",
        "refused": "0",
        "connected": "true",
        "waiting": "0",
    }


async def test_refused_frames_and_sys_pings_never_use_the_reserve_of_admitted_ops(
    config: Config, mock_clock: trio.testing.MockClock
) -> None:
    """An op admitted before the outbox filled still gets its audit record written, however
    many refused frames and pings arrive meanwhile (their records may not use the reserve)."""
    from csp_web.core.api.records import make_write
    from tests.harness import open_harness

    config = replace(config, outbox=OutboxConfig(max_pending=3, reserve=1))
    async with open_harness(config) as harness:
        outbox = outbox_of(harness.dispatcher)
        peer = harness.connect()
        await peer.send(b"TASK REQ:sleep 1000 IN:TEST OUT:SLEPT\nID slow\n\n")
        await trio.testing.wait_all_tasks_blocked()
        for n in range(3):
            await outbox.put(make_write("sys", "document", "x", str(n), suffix=".txt"))
        assert outbox.room.full
        await peer.send(b"TASK REQ:sleep 1 IN:TEST OUT:SLEPT\nID refused\n\n" + _PING_BYTES * 3)
        replies = await peer.replies(4)
        assert {(r.id, _code(r)) for r in replies if r.id} == {("refused", "outbox_full")}
        mock_clock.jump(1.5)
        slow = await peer.reply()
        rows = outbox._store.oldest(10)
    assert slow is not None
    assert slow.get("DATA") == "slept:1000"
    audited = [json.loads(w.data).get("id") for _, w in rows if w.type == "audit"]
    assert audited == ["slow"]  # in the reserve; the refused frame's and pings' were not kept


# --- Back-pressure, per-peer shares, folding, bounded writes (issue 8) ---------------------


def _sleep_task(task_id: str, ms: int = 0, timeout_ms: int | None = None) -> Task:
    fields: tuple[tuple[str, str], ...] = (("ID", task_id), ("MS", str(ms)))
    if timeout_ms is not None:
        fields += (("TIMEOUT_MS", str(timeout_ms)),)
    return Task("sleep", "TEST", "SLEPT", None, fields)


async def _gated_memory(
    nursery: trio.Nursery, config: Config, state_dir: str
) -> tuple[trio.Event, list[str]]:
    """A Memory Specialist that holds every write until the returned event is set."""
    gate = trio.Event()
    received: list[str] = []

    async def handler(write_id: str | None, params: Params) -> Result:
        await gate.wait()
        received.append(params.text("DATA"))
        return Result("stored")

    assert config.memory.socket_path is not None
    await nursery.start(_serve_scripted_memory, config.memory.socket_path, handler, state_dir)
    return gate, received


@asynccontextmanager
async def _dispatcher(config: Config) -> AsyncIterator[Dispatcher]:
    from csp_web.app.memory_path import outbox_path
    from tests.harness import TEST_OPS, build_dispatcher

    async with open_outbox(config.outbox_path, config.outbox, config.memory) as outbox:
        yield build_dispatcher(config, outbox_path(config, outbox), TEST_OPS, None)


async def test_a_full_outbox_that_drains_makes_an_op_wait_then_run_instead_of_refusing_it(
    nursery: trio.Nursery, config: Config, tmp_path: os.PathLike[str]
) -> None:
    """O-1: at max_pending with a Memory Specialist connected, a new op waits for room (it
    was refused with outbox_full before); once writes are acknowledged it runs and replies OK."""
    gate, _ = await _gated_memory(nursery, config, str(tmp_path))
    config = replace(config, outbox=OutboxConfig(max_pending=2, reserve=1))
    async with _dispatcher(config) as dispatcher:
        outbox = outbox_of(dispatcher)
        for n in range(2):
            await outbox.put(_write(n))
        await _wait_connected(outbox)
        replies: list[Reply] = []

        async def call() -> None:
            replies.append(await dispatcher.run(_sleep_task("waits"), Peer("a")))

        async with trio.open_nursery() as calls:
            calls.start_soon(call)
            await trio.testing.wait_all_tasks_blocked()
            assert replies == []  # waiting for room, not refused
            gate.set()
        with trio.fail_after(10):
            await outbox.wait_drained()
    assert replies == [
        Reply(Status.OK, (("ID", "waits"), ("SCOPE", "[test]"), ("DATA", "slept:0")))
    ]


async def test_an_op_waiting_for_room_past_its_deadline_gets_outbox_full(
    nursery: trio.Nursery,
    config: Config,
    tmp_path: os.PathLike[str],
    autojump_clock: trio.testing.MockClock,
) -> None:
    """O-1: the wait for room is bounded by the task's deadline: then FAIL outbox_full."""
    await _gated_memory(nursery, config, str(tmp_path))
    config = replace(config, outbox=OutboxConfig(max_pending=1, reserve=1))
    async with _dispatcher(config) as dispatcher:
        outbox = outbox_of(dispatcher)
        await outbox.put(_write(0))
        await _wait_connected(outbox)
        reply = await dispatcher.run(_sleep_task("late", timeout_ms=500), Peer("a"))
        assert (outbox.room.depth, outbox.room.folded) == (
            1,
            1,
        )  # not admitted: its audit is folded
    assert reply.status is Status.FAIL
    assert _code(reply) == ErrorCode.OUTBOX_FULL


@pytest.mark.parametrize("share", [1, 3])
async def test_one_peer_at_its_share_of_the_outbox_is_refused_while_another_is_served(
    config: Config, share: int
) -> None:
    """O-2: each op's audit record counts against its peer; at N-1 held writes the peer's op
    runs, at N (its share) the next is refused, and another peer is still served."""
    limits = OutboxConfig(max_pending=100, max_pending_per_peer=share)
    config = replace(with_memory(config, None), outbox=limits)
    async with _dispatcher(config) as dispatcher:
        outbox = outbox_of(dispatcher)
        for n in range(share):  # the last of these runs at N-1 held writes
            reply = await dispatcher.run(_sleep_task(f"a{n}"), Peer("a"))
            assert reply.status is Status.OK
        assert outbox.room.peer_full("a")
        assert not outbox.room.full
        refused = await dispatcher.run(_sleep_task("a-over"), Peer("a"))
        other = await dispatcher.run(_sleep_task("b0"), Peer("b"))
    assert (refused.id, _code(refused)) == ("a-over", ErrorCode.OUTBOX_FULL)
    assert other.status is Status.OK


async def test_sys_op_audits_past_max_pending_are_folded_into_one_summary_record(
    config: Config, tmp_path: os.PathLike[str]
) -> None:
    """O-3: pings past max_pending are answered and their audit records are counted in one
    summary written at close (never silently dropped); refused frames fold the same way."""
    config = replace(with_memory(config, None), outbox=OutboxConfig(max_pending=2, reserve=5))
    async with _dispatcher(config) as dispatcher:
        outbox = outbox_of(dispatcher)
        pings = [await dispatcher.run(_ping(f"p{n}"), Peer("a")) for n in range(5)]
        unknown = await dispatcher.run(Task("nope", "SYS", "X", None, (("ID", "u"),)), Peer("a"))
        assert (outbox.room.depth, outbox.room.folded) == (2, 4)
    assert all(reply.status is Status.OK for reply in pings)
    assert _code(unknown) == ErrorCode.UNKNOWN_OP
    _, pending = await _stored(config.outbox_path)
    records = [json.loads(w.data) for w in pending]
    assert [r.get("ids") for r in records[:2]] == [["p0"], ["p1"]]
    assert records[2]["folded"] == {"SYS/nope:unknown_op": 1, "SYS/ping": 3}
    assert records[2]["total"] == 4


async def test_refused_frames_never_take_the_reserve_of_admitted_ops(config: Config) -> None:
    """O-1 (issue 8.13): unknown_op, wrong_domain and shutting_down frames past max_pending
    leave the reserve alone (they used to take it: 1,000 shutting_down audits filled it)."""
    config = replace(with_memory(config, None), outbox=OutboxConfig(max_pending=1, reserve=3))
    async with _dispatcher(config) as dispatcher:
        outbox = outbox_of(dispatcher)
        await outbox.put(_write(0))
        unknown = await dispatcher.run(Task("nope", "TEST", "X", None, (("ID", "u"),)), Peer("a"))
        wrong = await dispatcher.run(Task("sleep", "WEB", "SLEPT", None, (("ID", "w"),)), Peer("a"))
        dispatcher.shutting_down = True
        stopping = await dispatcher.run(_sleep_task("s"), Peer("a"))
        assert (outbox.room.depth, outbox.room.folded) == (1, 3)
    assert [_code(r) for r in (unknown, wrong, stopping)] == [
        ErrorCode.UNKNOWN_OP,
        ErrorCode.WRONG_DOMAIN,
        ErrorCode.SHUTTING_DOWN,
    ]


@pytest.mark.parametrize(("extra", "cut"), [(0, False), (1, True)])
async def test_a_write_longer_than_max_write_bytes_keeps_its_head_and_tail(
    config: Config, extra: int, cut: bool
) -> None:
    """O-2: DATA of exactly max_write_bytes is kept whole; one byte more keeps head and tail
    within the limit, saying how much was cut."""
    limit = 1000
    config = replace(with_memory(config, None), outbox=OutboxConfig(max_write_bytes=limit))
    data = "H" * 400 + "é" * 100 + "T" * (400 + extra)  # é takes two bytes
    async with _dispatcher(config) as dispatcher:
        ctx = OpContext(dispatcher.services, Peer("a"), "exec", "t1")
        write = await ctx.remember("tool", "exec_log", "exec-logs", data, suffix=".log")
    assert len(write.data.encode("utf-8")) <= limit
    assert (write.data == data) is not cut
    assert write.data.startswith("H" * 400)
    assert write.data.endswith("T" * 400)
    assert ("bytes cut" in write.data) is cut


async def test_flush_at_exit_returns_at_once_when_the_memory_specialist_is_down(
    config: Config,
) -> None:
    """Issue 9.8: with memory.socket_path set and nothing listening, the exit flush ends after
    the first failed connect instead of waiting out the grace period; writes stay on disk."""
    async with open_outbox(config.outbox_path, OutboxConfig(), config.memory) as outbox:
        await outbox.put(_write(0))
        with trio.fail_after(5):
            await outbox.wait_flushed()
        assert (outbox.room.depth, outbox.room.connected) == (1, False)


async def test_flush_at_exit_waits_for_delivery_while_connected(config: Config, sink: Sink) -> None:
    """The exit flush delivers what is pending while the Memory Specialist answers."""
    async with open_outbox(config.outbox_path, OutboxConfig(), config.memory) as outbox:
        for n in range(20):
            await outbox.put(_write(n))
        with trio.fail_after(10):
            await outbox.wait_flushed()
        assert (outbox.room.depth, outbox.delivery.delivered) == (0, 20)


async def test_pipelined_batches_reach_the_sink_in_put_order(
    tmp_path: os.PathLike[str], config: Config, sink: Sink
) -> None:
    """M-2: with several one-write batches in flight at once, the sink still stores in order."""
    memory = replace(config.memory, batch_size=1)
    limits = OutboxConfig(delivery_window=8)
    async with open_outbox(_outbox_path(tmp_path), limits, memory) as outbox:
        async with trio.open_nursery() as writers:
            for n in range(40):
                writers.start_soon(outbox.put, _write(n))
                await trio.testing.wait_all_tasks_blocked()
        with trio.fail_after(10):
            await outbox.wait_drained()
    content = sink_text(sink.directory, "order/log.txt")
    assert content is not None
    assert content.splitlines() == [f"line {n}" for n in range(40)]


async def test_a_relayed_frame_to_a_memory_specialist_that_is_down_names_its_socket(
    config: Config,
) -> None:
    """Issue 9.8: memory_unavailable says which socket could not be reached."""
    from csp_web.memory.relay import MemoryRelay

    assert config.memory.socket_path is not None
    read = Task("read", "MEMORY", "CONTENT", None, (("ID", "r1"), ("PATH", "notes/x")))
    with pytest.raises(OpError) as down:
        await MemoryRelay(config.memory).forward(read)
    assert down.value.code is ErrorCode.MEMORY_UNAVAILABLE
    assert down.value.detail == f"FileNotFoundError at {config.memory.socket_path}"


def test_an_audit_record_past_max_write_bytes_keeps_the_heads_and_tails_of_its_texts() -> None:
    """O-2 for the one record per op: a 1 MiB target (escaped by JSON to 6 MiB) is cut
    around its middle, and the record stays JSON within the bound."""
    from csp_web.core.dispatch.dispatcher import audit_record

    @dataclass(frozen=True)
    class Target(OpAudit):
        target: str
        cache_hit: bool

    task = Task("fetch", "WEB", "CONTENT", None, (("ID", "f-1"),))
    target = "head" + "\x01" * (1 << 20) + "tail"
    text = audit_record(task, Peer("p"), Reply(Status.OK, ()), 1.0, Target(target, True), 4096)
    fields = json.loads(text)
    assert len(text.encode("utf-8")) <= 4096
    assert fields["target"].startswith("head")
    assert fields["target"].endswith("tail")
    assert (fields["id"], fields["cache_hit"]) == ("f-1", True)


@dataclass(frozen=True)
class _ProbeAudit(OpAudit):
    command: str
    exit: int | None
    outcome: str = "forged"  # a common field: the record's own wins


@pytest.mark.parametrize(
    ("peer", "reply", "extra"),
    [
        (Peer("unix-1", 1000, 42), Reply(Status.OK, (("DATA", "pong"),)), None),
        (Peer("stdin"), Reply(Status.FAIL, (("ERROR", 'bad_"é\n:x'),)), None),
        (Peer("cron", 0, None), Reply(Status.OK, ()), _ProbeAudit("ls", 0)),
    ],
)
def test_an_audit_record_is_the_json_record_of_its_fields(
    peer: Peer, reply: Reply, extra: OpAudit | None
) -> None:
    """M-1: the directly formatted audit record reads back as the same compact, key-sorted
    JSON that ``json_record`` writes, whatever the strings hold; an op's audit adds its
    fields, never in place of a common one."""
    from csp_web.core.api.records import json_record
    from csp_web.core.dispatch.dispatcher import audit_record

    task = Task("ping", "SYS", "PONG", None, (("ID", 'i"d\\'),))
    text = audit_record(task, peer, reply, 0.125, extra)
    fields = json.loads(text)
    assert text == json_record(**fields)
    assert fields["outcome"] == str(reply.status)
    if extra is not None:
        assert (fields["command"], fields["exit"]) == ("ls", 0)
    assert (fields["id"], fields["connection"], fields["uid"], fields["error"]) == (
        'i"d\\',
        peer.connection,
        peer.uid,
        reply.get("ERROR"),
    )


async def test_a_stdin_daemon_whose_memory_specialist_is_down_exits_without_waiting_its_grace(
    config: Config,
) -> None:
    """Issue 9.8: at EOF with memory.socket_path set and nothing listening, the daemon does
    not spend its grace period waiting for a delivery that cannot happen (it used to wait the
    whole grace_period_s on every run); the write stays in the outbox."""
    from csp_web.app.memory_path import open_memory_path
    from csp_web.core.daemon.compose import open_daemon
    from csp_web.core.daemon.lifecycle import serve

    async def serve_with_memory(config: Config, server: trio.abc.Stream) -> None:
        async with open_daemon(config, (), memory=open_memory_path(config)) as daemon:
            await serve(daemon, stdio=server, socket_path=None)

    grace_s = 600.0  # far past the bound below: waiting it out fails the test
    config = replace(config, daemon=replace(config.daemon, grace_period_s=grace_s))
    client, server = trio.testing.memory_stream_pair()
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_with_memory, config, server)
            await client.send_all(_PING_BYTES)
            await client.send_eof()
            received = b""
            while not received.endswith(b"\n\n"):
                received += await client.receive_some()
    assert received.startswith(b"STATUS OK")
    totals, _ = await _stored(config.outbox_path)
    assert totals[0] == 1


async def test_a_ping_at_a_full_outbox_that_drains_is_paced_and_audited_per_frame(
    nursery: trio.Nursery, config: Config, tmp_path: os.PathLike[str]
) -> None:
    """O-3: while a Memory Specialist drains a full outbox, a ping waits for room (it used to
    be answered at once with its audit record dropped), then is answered and audited as a
    record of its own (a summary of one frame here), not folded."""
    gate, received = await _gated_memory(nursery, config, str(tmp_path))
    config = replace(config, outbox=OutboxConfig(max_pending=2, reserve=1))
    async with _dispatcher(config) as dispatcher:
        outbox = outbox_of(dispatcher)
        for n in range(2):
            await outbox.put(_write(n))
        await _wait_connected(outbox)
        replies: list[Reply] = []

        async def call() -> None:
            replies.append(await dispatcher.run(_ping("paced"), Peer("a")))

        async with trio.open_nursery() as calls:
            calls.start_soon(call)
            await trio.testing.wait_all_tasks_blocked()
            assert replies == []  # paced, not answered past the limit
            gate.set()
        with trio.fail_after(10):
            await outbox.wait_drained()
        assert outbox.room.folded == 0
    assert [r.id for r in replies if r.status is Status.OK] == ["paced"]
    assert [json.loads(data).get("ids") for data in received[2:]] == [["paced"]]


class _Arrivals:
    """Write IDs in the order a peer received them; ``wait_for`` waits for a count."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.reads: list[list[str]] = []  # the IDs each read of the peer's socket brought
        self._more = trio.Event()

    def add(self, task_id: str) -> None:
        self.ids.append(task_id)
        self._more.set()
        self._more = trio.Event()

    async def wait_for(self, count: int) -> None:
        with trio.fail_after(WAIT_S):
            while len(self.ids) < count:
                await self._more.wait()


async def _held_acks_memory(
    nursery: trio.Nursery, path: str
) -> tuple[_Arrivals, Callable[[], None]]:
    """A Memory Specialist that records each write's ID as it arrives and holds every ACK
    until the returned function is called (then acknowledges all, and later ones at once)."""
    from protocol import CLOSED, NEED_DATA, Connection

    received = _Arrivals()
    released = trio.Event()

    async def handle(stream: trio.SocketStream, peer: Peer, _lease: Lease) -> None:
        codec = Connection()
        send_ids, ids = trio.open_memory_channel[str](math.inf)

        async def acknowledge() -> None:
            await released.wait()
            async for task_id in ids:
                await stream.send_all(f"STATUS OK\nID {task_id}\nDATA stored\n\n".encode())

        async with stream, trio.open_nursery() as acks:
            acks.start_soon(acknowledge)
            while data := await stream.receive_some(1 << 16):
                codec.receive_data(data)
                received.reads.append([])
                while isinstance(event := codec.next_event(), Task):
                    received.reads[-1].append(event.id or "")
                    received.add(event.id or "")
                    send_ids.send_nowait(event.id or "")
                assert event in (NEED_DATA, CLOSED), event
            acks.cancel_scope.cancel()

    await nursery.start(partial(serve_unix, path, SocketConfig(), handle, handler_nursery=nursery))
    return received, released.set


async def test_while_a_batch_is_in_flight_the_next_goes_only_once_full(
    nursery: trio.Nursery, tmp_path: os.PathLike[str], config: Config
) -> None:
    """Nagle's rule for delivery (issue 8.8): a write with nothing in flight goes after the
    linger; while a batch is unacknowledged, batch_size - 1 new writes wait and the batch_size-th
    sends them all as one batch; the rest goes once the ACKs are in, in put order."""
    assert config.memory.socket_path is not None
    received, release = await _held_acks_memory(nursery, config.memory.socket_path)
    memory = replace(config.memory, batch_size=4)
    async with open_outbox(_outbox_path(tmp_path), OutboxConfig(), memory) as outbox:
        with trio.fail_after(10):
            await outbox.put(_write(0))
            await received.wait_for(1)
            for n in range(1, 4):
                await outbox.put(_write(n))
            await trio.testing.wait_all_tasks_blocked()
            assert received.ids == ["w-test-0"]  # three of batch_size 4: held back
            await outbox.put(_write(4))
            await received.wait_for(5)
            await outbox.put(_write(5))
            await trio.testing.wait_all_tasks_blocked()
            assert len(received.ids) == 5
            release()
            await outbox.wait_drained()
    assert received.ids == [f"w-test-{n}" for n in range(6)]


async def test_writes_put_one_after_another_with_nothing_in_flight_go_as_one_batch(
    nursery: trio.Nursery, tmp_path: os.PathLike[str], config: Config
) -> None:
    """The linger (issue 26): a lone write waits ``outbox.linger_s`` for company, so the audit
    records of ops answered one at a time reach the Memory Specialist in one batch, not one
    batch (store, ACK, settle) each."""
    assert config.memory.socket_path is not None
    received, release = await _held_acks_memory(nursery, config.memory.socket_path)
    release()
    async with open_outbox(_outbox_path(tmp_path), OutboxConfig(), config.memory) as outbox:
        with trio.fail_after(WAIT_S):
            await _wait_connected(outbox)
            for n in range(3):
                await outbox.put(_write(n))
            await received.wait_for(3)
            await outbox.wait_drained()
    assert received.reads == [["w-test-0", "w-test-1", "w-test-2"]]


@pytest.mark.parametrize(
    "data",
    [
        '{"op":"ping","error":null}',
        "plain text",
        "tab\there",
        "line\nbreak",
        '"leading quote',
        " leading space",
        "trailing space ",
        "trailing tab\t",
        "",
        "bell\x07 and c1\x85",
        "del\x7f in ascii",
        "escape\x1b in ascii",
        "ünïcödé ✓",
        "ünïcödé then space ",
        "x" * 5000,
    ],
)
def test_a_write_frame_is_the_bytes_the_codec_serialises_for_its_task(data: str) -> None:
    """M-1: the outbox's own write serialiser gives exactly ``serialize(write.to_task())``,
    values that may stand raw and values that must be quoted alike."""
    from csp_web.memory.outbox_frames import write_frame
    from protocol import serialize

    for write in (
        MemoryWrite("sys", "audit", "audit/2026-01-01/w-1.json", data, "w-1"),
        MemoryWrite("tool", "exec_log", data or "p", "d", "w-2"),
    ):
        assert write_frame(write).encode() == serialize(write.to_task())
