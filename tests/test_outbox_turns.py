"""Delivery's turns under a flood of producers (SPEC O-5), against real peers.

Every wait is bounded (``trio.fail_after``); nothing asserts on elapsed time.
"""

from __future__ import annotations

import math
import os
import sqlite3
from collections.abc import Callable
from dataclasses import replace
from functools import partial

import trio
import trio.testing

from csp_web.app.memory_path import outbox_path
from csp_web.config import Config, OutboxConfig, SocketConfig
from csp_web.core.api.context import Peer
from csp_web.core.api.records import MemoryWrite
from csp_web.core.transports.unix import Lease, serve_unix
from csp_web.memory.outbox import Outbox, open_outbox
from csp_web.memory.outbox_room import OutboxRoom
from protocol import CLOSED, NEED_DATA, Connection, ErrorCode, Reply, Status, Task
from tests.conftest import Sink
from tests.harness import TEST_OPS, build_dispatcher

WAIT_S = 10.0  # a bound on waits that end on an event, never a timing assertion
BATCH_SIZE = 4
WINDOW = 2
TURN_AT = BATCH_SIZE * WINDOW  # writes unsent at which delivery is behind


def _write(n: int) -> MemoryWrite:
    return MemoryWrite("web", "web_op", "flood/log.txt", f"line {n}", f"w-flood-{n}")


def _small_window(config: Config) -> Config:
    return replace(
        config,
        memory=replace(config.memory, batch_size=BATCH_SIZE),
        outbox=OutboxConfig(delivery_window=WINDOW),
    )


async def _acks_on_demand(
    nursery: trio.Nursery, path: str
) -> tuple[list[str], Callable[[int], None]]:
    """A Memory Specialist that records each write's ID as it arrives and acknowledges writes
    only as told: ``ack(n)`` lets the next ``n`` ACKs go, in arrival order, as writes come."""
    received: list[str] = []
    send_news, news = trio.open_memory_channel[int](math.inf)  # ACKs allowed (0: a write came)

    async def handle(stream: trio.SocketStream, peer: Peer, _lease: Lease) -> None:
        codec = Connection()

        async def acknowledge() -> None:
            acked = budget = 0
            async for allowed in news:
                budget += allowed
                ids = received[acked : acked + budget]
                acked, budget = acked + len(ids), budget - len(ids)
                if ids:
                    replies = "".join(f"STATUS OK\nID {i}\nDATA stored\n\n" for i in ids)
                    await stream.send_all(replies.encode())

        async with stream, trio.open_nursery() as acks:
            acks.start_soon(acknowledge)
            while data := await stream.receive_some(1 << 16):
                codec.receive_data(data)
                while isinstance(event := codec.next_event(), Task):
                    received.append(event.id or "")
                assert event in (NEED_DATA, CLOSED), event
                send_news.send_nowait(0)
            acks.cancel_scope.cancel()

    await nursery.start(partial(serve_unix, path, SocketConfig(), handle, handler_nursery=nursery))
    return received, send_news.send_nowait


async def _put_in_one_commit(outbox: Outbox, writes: range) -> None:
    async with trio.open_nursery() as puts:
        for n in writes:
            puts.start_soon(outbox.put, _write(n))


async def test_ops_wait_for_a_turn_from_a_whole_window_unsent_and_start_one_per_settled_write(
    nursery: trio.Nursery, tmp_path: os.PathLike[str], config: Config
) -> None:
    """O-5 at N and N+1: with a window in flight, TURN_AT - 1 writes unsent let an op start at
    once; TURN_AT make it wait for a turn. Then each settled write lets one waiting op start,
    first come first served, and all start once delivery is no longer behind."""
    assert config.memory.socket_path is not None
    received, ack = await _acks_on_demand(nursery, config.memory.socket_path)
    config = _small_window(config)
    path = os.path.join(tmp_path, "outbox.sqlite3")
    async with open_outbox(path, config.outbox, config.memory) as outbox:
        started: list[int] = []

        async def op(n: int) -> None:
            await outbox.wait_room("peer")
            started.append(n)

        with trio.fail_after(WAIT_S):
            await _put_in_one_commit(outbox, range(2 * TURN_AT - 1))
            while len(received) < TURN_AT:  # a window in flight, TURN_AT - 1 unsent
                await trio.testing.wait_all_tasks_blocked()
            await outbox.wait_room("peer")  # N - 1 unsent: at once
            await outbox.put(_write(2 * TURN_AT - 1))  # N unsent: behind
            async with trio.open_nursery() as ops:
                for n in range(BATCH_SIZE + 2):
                    ops.start_soon(op, n)
                    await trio.testing.wait_all_tasks_blocked()
                assert started == []  # each waits for a turn
                ack(BATCH_SIZE)  # one batch settles: as many ops start, the first to come
                while outbox.delivery.delivered < BATCH_SIZE:
                    await trio.testing.wait_all_tasks_blocked()
                await trio.testing.wait_all_tasks_blocked()
                assert sorted(started) == list(range(BATCH_SIZE))
                ack(1_000_000)  # delivery catches up: every waiting op starts
            await outbox.wait_drained()
    assert sorted(started) == list(range(BATCH_SIZE + 2))


async def test_ops_waiting_for_a_turn_start_when_the_memory_specialist_goes_away(
    nursery: trio.Nursery, tmp_path: os.PathLike[str], config: Config
) -> None:
    """O-5: turns are taken from delivery; once it is not connected the ops waiting for one
    start (room alone decides, O-1), none is left waiting or refused."""
    assert config.memory.socket_path is not None
    received, _ack = await _acks_on_demand(nursery, config.memory.socket_path)
    config = _small_window(config)
    path = os.path.join(tmp_path, "outbox.sqlite3")
    async with open_outbox(path, config.outbox, config.memory) as outbox:
        started: list[int] = []

        async def op(n: int) -> None:
            await outbox.wait_room("peer")
            started.append(n)

        with trio.fail_after(WAIT_S):
            await _put_in_one_commit(outbox, range(2 * TURN_AT))
            while len(received) < TURN_AT:
                await trio.testing.wait_all_tasks_blocked()
            async with trio.open_nursery() as ops:
                for n in range(3):
                    ops.start_soon(op, n)
                await trio.testing.wait_all_tasks_blocked()
                assert started == []
                nursery.cancel_scope.cancel()  # the Memory Specialist's server and connection
            assert not outbox.room.connected
    assert sorted(started) == [0, 1, 2]
    assert outbox.room.depth == 2 * TURN_AT  # kept for the next connection


async def test_turns_granted_with_nobody_waiting_are_kept_up_to_a_window_then_lapse() -> None:
    """O-5 at N and N+1: turns granted by settled writes nobody waited for are kept up to
    TURN_AT (a burst after a settle cannot run past the writes settled), the TURN_AT + 1st op
    waits; all of them are dropped, and every waiting op starts, once delivery is no longer
    behind."""
    room = OutboxRoom(OutboxConfig(), 0, 0, turn_at=TURN_AT)
    room.set_connected(True)
    writes = [_write(n) for n in range(4 * TURN_AT)]
    for write in writes:
        room.add(write, 1, None)
    room.remove(writes[:TURN_AT])
    room.grant(TURN_AT + 1)  # more than a window settled with nobody waiting
    assert room.behind
    with trio.fail_after(WAIT_S):
        for _ in range(TURN_AT):
            await room.wait_turn()  # granted: at once
        async with trio.open_nursery() as ops:
            ops.start_soon(room.wait_turn)
            await trio.testing.wait_all_tasks_blocked()
            assert room.waiting_turns == 1  # the N+1st waits
            room.remove(writes[TURN_AT : 3 * TURN_AT + 1])  # TURN_AT - 1 left unsent
            room.grant(TURN_AT + 1)
        assert (room.behind, room.waiting_turns) == (False, 0)
        room.add(writes[0], 1, None)  # behind again: nothing was kept
        assert room.behind
        async with trio.open_nursery() as ops:
            ops.start_soon(room.wait_turn)
            await trio.testing.wait_all_tasks_blocked()
            assert room.waiting_turns == 1
            room.set_connected(False)  # nothing to take turns with
        assert room.waiting_turns == 0


async def test_delivery_keeps_delivering_while_a_flood_of_audited_ops_keeps_committing(
    sink: Sink, config: Config
) -> None:
    """O-5, the regression (the issue: delivery starved while producers flooded): twelve
    tasks run audited ops back to back, each committing its audit record, against the
    reference Memory Specialist on the same event loop. Delivery keeps its turns: the writes
    pending never exceed what the turns allow (a whole window unsent, a window in flight,
    the turns granted and not taken, one write of each op past its turn), ops never stop
    while their writes are delivered, and each is stored exactly once. Before, the flood took
    nearly every turn of the loop and the backlog grew with every round of commits."""
    config = _small_window(config)
    producers = 12  # within the web pool (32 running, 96 queued): none refused busy
    bound = TURN_AT + TURN_AT + TURN_AT + producers
    target = 40 * TURN_AT
    deepest = 0
    done = [0] * producers
    async with open_outbox(config.outbox_path, config.outbox, config.memory) as outbox:
        dispatcher = build_dispatcher(config, outbox_path(config, outbox), TEST_OPS, None)

        async def producer(n: int) -> None:
            nonlocal deepest
            while (
                outbox.delivery.delivered < target
            ):  # ops back to back until the target is delivered
                task = Task(
                    "sleep", "TEST", "SLEPT", None, (("ID", f"p{n}-{done[n]}"), ("MS", "0"))
                )
                reply = await dispatcher.run(task, Peer(f"peer-{n}"))
                assert reply.status is Status.OK, reply
                done[n] += 1
                deepest = max(deepest, outbox.room.depth)

        with trio.fail_after(WAIT_S * 6):
            async with trio.open_nursery() as flood:
                for n in range(producers):
                    flood.start_soon(producer, n)
        with trio.fail_after(WAIT_S):
            await outbox.wait_drained()
    assert deepest <= bound, (deepest, bound)
    assert sink.store.count == sum(done)  # every audit record stored, none twice


async def test_an_op_whose_turn_does_not_come_before_its_deadline_gets_outbox_full(
    nursery: trio.Nursery,
    tmp_path: os.PathLike[str],
    config: Config,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """O-5: the wait for a turn is part of the wait for room: an op whose turn does not come
    (nothing is acknowledged) within its deadline is answered FAIL outbox_full."""
    assert config.memory.socket_path is not None
    received, _ack = await _acks_on_demand(nursery, config.memory.socket_path)
    config = _small_window(config)
    async with open_outbox(config.outbox_path, config.outbox, config.memory) as outbox:
        dispatcher = build_dispatcher(config, outbox_path(config, outbox), TEST_OPS, None)
        with trio.fail_after(WAIT_S):
            await _put_in_one_commit(outbox, range(2 * TURN_AT))
            while len(received) < TURN_AT:
                await trio.testing.wait_all_tasks_blocked()
        fields = (("ID", "late"), ("MS", "0"), ("TIMEOUT_MS", "500"))
        reply = await dispatcher.run(Task("sleep", "TEST", "SLEPT", None, fields), Peer("a"))
    error = f"{ErrorCode.OUTBOX_FULL}:no room for its log within 500ms"
    assert reply == Reply(
        Status.FAIL, (("ID", "late"), ("SCOPE", "[]"), ("DATA", "none"), ("ERROR", error))
    )


async def test_with_synchronous_full_delivery_reads_and_sends_while_a_commit_is_in_progress(
    nursery: trio.Nursery, tmp_path: os.PathLike[str], config: Config
) -> None:
    """Delivery reads on a connection of its own, beside the writer (WAL): with
    ``synchronous: full`` a commit in progress in the committer's thread (here held by another
    process's write lock) does not hold delivery back from sending what is committed. Before,
    every store call of delivery waited for the commit in progress."""
    assert config.memory.socket_path is not None
    outbox_config = OutboxConfig(synchronous="full", delivery_window=WINDOW)
    memory = replace(config.memory, batch_size=BATCH_SIZE)
    path = os.path.join(tmp_path, "outbox.sqlite3")
    async with open_outbox(path, outbox_config, memory) as outbox:
        with trio.fail_after(WAIT_S):
            await _put_in_one_commit(outbox, range(2 * BATCH_SIZE))  # no sink yet: unsent
            assert not outbox.room.connected
            holder = sqlite3.connect(path, isolation_level=None)
            holder.execute("BEGIN IMMEDIATE")  # a commit now waits for this write lock
            committed = trio.Event()

            async def put_last() -> None:
                await outbox.put(_write(2 * BATCH_SIZE))
                committed.set()

            nursery.start_soon(put_last)
            await trio.testing.wait_all_tasks_blocked()
            received, ack = await _acks_on_demand(nursery, config.memory.socket_path)
            while len(received) < 2 * BATCH_SIZE:  # a window of batches sent ...
                await trio.testing.wait_all_tasks_blocked()
            assert not committed.is_set()  # ... while the commit was still in progress
            holder.execute("ROLLBACK")
            holder.close()
            await committed.wait()
            ack(1_000_000)
            await outbox.wait_drained()
    assert sorted(received) == sorted(f"w-flood-{n}" for n in range(2 * BATCH_SIZE + 1))


async def test_a_batch_partly_refused_for_now_is_settled_in_part_and_the_rest_sent_again(
    nursery: trio.Nursery, tmp_path: os.PathLike[str], config: Config
) -> None:
    """M-2 with O-5's count of writes in flight: a batch whose first write is answered
    ``FAIL busy`` (not now) settles the rest; the busy write is sent again on the next
    connection; and the count of writes in flight returns to nothing, so a lone write later
    goes at once (a count left over would hold it back as part of a batch forever)."""
    assert config.memory.socket_path is not None
    received: list[str] = []

    async def handle(stream: trio.SocketStream, peer: Peer, _lease: Lease) -> None:
        codec = Connection()
        async with stream:
            while data := await stream.receive_some(1 << 16):
                codec.receive_data(data)
                replies = []
                while isinstance(event := codec.next_event(), Task):
                    received.append(event.id or "")
                    if len(received) == 1:
                        replies.append(f"STATUS FAIL\nID {event.id}\nERROR busy:not now\n\n")
                    else:
                        replies.append(f"STATUS OK\nID {event.id}\nDATA stored\n\n")
                assert event in (NEED_DATA, CLOSED), event
                await stream.send_all("".join(replies).encode())

    socket_path = config.memory.socket_path
    await nursery.start(
        partial(serve_unix, socket_path, SocketConfig(), handle, handler_nursery=nursery)
    )
    config = _small_window(config)
    path = os.path.join(tmp_path, "outbox.sqlite3")
    async with open_outbox(path, config.outbox, config.memory) as outbox:
        with trio.fail_after(WAIT_S):
            await _put_in_one_commit(outbox, range(2))
            await outbox.wait_drained()
            assert len(received) == 3
            assert received[2] == received[0]  # the busy one, again
            assert sorted(received[:2]) == ["w-flood-0", "w-flood-1"]
            await outbox.put(_write(2))
            await outbox.wait_drained()
        assert (outbox.delivery.delivered, outbox.delivery.rejected) == (3, 0)
    assert received[3:] == ["w-flood-2"]


async def test_ops_waiting_for_a_turn_start_when_the_commit_that_put_delivery_behind_fails(
    nursery: trio.Nursery, tmp_path: os.PathLike[str], config: Config
) -> None:
    """O-5: the writes that put delivery behind may never be stored (their commit fails:
    here one write SQLite cannot encode, as a full disk would). They leave the outbox, so
    delivery is no longer behind and the ops waiting for a turn start. Before, nothing woke
    them (no write would ever settle), and each waited out its deadline to get outbox_full
    from an empty outbox."""
    assert config.memory.socket_path is not None
    _received, _ack = await _acks_on_demand(nursery, config.memory.socket_path)
    config = _small_window(config)
    path = os.path.join(tmp_path, "outbox.sqlite3")
    async with open_outbox(path, config.outbox, config.memory) as outbox:
        started: list[int] = []

        async def op(n: int) -> None:
            await outbox.wait_room("peer")
            started.append(n)

        with trio.fail_after(WAIT_S):
            while not outbox.room.connected:
                await trio.testing.wait_all_tasks_blocked()
            bad = MemoryWrite("web", "web_op", "flood/log.txt", "\ud800", "w-unencodable")
            outbox.put_or_fold_nowait(bad, "bad")  # one commit gathers them all, after a pass
            for n in range(TURN_AT - 1):
                outbox.put_or_fold_nowait(_write(n), "flood")
            assert outbox.room.depth == TURN_AT  # counted, not committed: behind
            async with trio.open_nursery() as ops:
                for n in range(3):
                    ops.start_soon(op, n)  # each parks for a turn before the commit runs
            assert outbox.room.depth == 0
    assert sorted(started) == [0, 1, 2]
