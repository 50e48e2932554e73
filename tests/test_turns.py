"""Fair admission of frame starts across connections (SPEC L-10), and L-7 under load."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import pytest
import trio
import trio.testing

from csp_web.config import AuditConfig, Config, ConnectionConfig
from csp_web.core.api.context import Peer
from csp_web.core.wire.connection import StreamOptions, serve_connection
from csp_web.core.wire.turns import FairStarts, Seat
from protocol import Connection, Reply
from tests.harness import Harness, open_harness

PING = b"TASK REQ:ping IN:SYS OUT:PONG\n\n"


async def _start(starts: FairStarts, seat: Seat, name: str, log: list[tuple[str, int]]) -> None:
    await starts.wait_start(seat)
    log.append((name, starts.rounds))


async def _busy_seats(starts: FairStarts, count: int) -> list[Seat]:
    """Seats that already started a frame this round (so they are not new), with this round's
    budget spent (so every further start waits for the pump)."""
    for _ in range(starts.frames_per_round):
        await starts.wait_start(Seat(next_round=starts.round + 1))  # no waiters: no checkpoint
        starts.done()
    assert starts.rounds == 0
    return [Seat(next_round=starts.round + 1) for _ in range(count)]


async def _twice(starts: FairStarts, seat: Seat, name: str, log: list[tuple[str, int]]) -> None:
    """One connection's reader: a frame, then its next one (one waiting start at a time)."""
    for tag in ("busy", "again"):
        await starts.wait_start(seat)
        log.append((f"{tag}{name}", starts.rounds))
        starts.done()


@pytest.mark.parametrize(("waiting", "rounds"), [(3, 1), (4, 2)])
async def test_at_most_frames_per_round_start_in_one_scheduler_round(
    waiting: int, rounds: int
) -> None:
    """L-10: with frames_per_round 3 and the budget spent, 3 waiting starts take one scheduler
    round and a 4th takes a second."""
    starts = FairStarts(frames_per_round=3, max_running=100)
    seats = await _busy_seats(starts, 3)  # spends this round's budget
    log: list[tuple[str, int]] = []
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            for n in range(waiting):
                nursery.start_soon(_start, starts, seats[n % 3], f"s{n}", log)
    assert len(log) == waiting
    assert starts.rounds == rounds  # the pump's scheduler rounds


async def test_a_new_connections_first_frame_starts_in_the_next_round_behind_full_queues() -> None:
    """L-10: 50 busy connections wait to start frames (each has one more queued behind), two
    granted per scheduler round; a new connection that asks while ~95 starts wait is granted
    in the next round or the one after, and the busy ones go round-robin: every first frame
    before any second one."""
    starts = FairStarts(frames_per_round=2, max_running=1000)
    seats = await _busy_seats(starts, 50)
    log: list[tuple[str, int]] = []
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            for n, seat in enumerate(seats):
                nursery.start_soon(_twice, starts, seat, str(n), log)
            while starts.rounds < 3:
                await trio.lowlevel.checkpoint()
            asked_in = starts.rounds
            await starts.wait_start(Seat())  # the new connection's first frame
            log.append(("new", starts.rounds))
    names = [name for name, _ in log]
    assert len(names) == 101
    (granted_in,) = [rounds for name, rounds in log if name == "new"]
    # The pump may run before or after us in the round we ask; it grants us in its next one.
    assert granted_in <= asked_in + 2
    assert sum(rounds > granted_in for _, rounds in log) > 85  # ahead of the ~95 waiting
    # Every busy connection's first frame no later than any busy connection's second. A task
    # logs the round it resumes in: trio runs a batch in random order, so the pump may count
    # one more round before a task granted in the previous one runs (one round of slack).
    rounds_of = dict(log)
    assert max(rounds_of[f"busy{n}"] for n in range(50)) <= 1 + min(
        rounds_of[f"again{n}"] for n in range(50)
    )


async def test_a_new_connections_instant_frame_starts_at_once_and_the_next_round_pays() -> None:
    """L-10: with the round's budget spent, a new connection's instant frame that nobody is
    ahead of starts without waiting for the pump (two scheduler rounds saved on a fresh ping);
    its start comes out of the next round's budget, so 4 waiting starts at 2 per round take
    3 rounds instead of 2."""
    starts = FairStarts(frames_per_round=2, max_running=100)
    seats = await _busy_seats(starts, 4)
    log: list[tuple[str, int]] = []
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            for n, seat in enumerate(seats):
                nursery.start_soon(_start, starts, seat, f"busy{n}", log)
            await starts.wait_start(Seat(), instant=True)  # before the busy ones queue
            log.append(("new", starts.rounds))
    assert log[0] == ("new", 0)
    assert starts.rounds == 3  # the pump's rounds: 1 + 2 + 1 grants


async def test_an_idle_connections_instant_frame_waits_behind_an_earlier_newcomer() -> None:
    """L-10: the at-once start is for a connection nobody is ahead of: with a new
    connection's frame already waiting (held by the one running place), the next newcomer's
    instant frame waits for the pump's grant."""
    starts = FairStarts(frames_per_round=1, max_running=1)
    with trio.fail_after(5):
        await starts.wait_start(Seat())  # takes the one running place
        log: list[tuple[str, int]] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_start, starts, Seat(), "first", log)
            while not starts.waiting:  # it waits for the running place, steadily
                await trio.lowlevel.checkpoint()
            asked_in = starts.rounds
            await starts.wait_start(Seat(), instant=True)
            log.append(("second", starts.rounds))
            assert log == [("second", log[0][1])]  # the first still waits for its place
            assert log[0][1] > asked_in  # granted by the pump, not at once
            starts.done()
    assert [name for name, _ in log] == ["second", "first"]


async def test_newcomers_borrow_at_most_one_rounds_budget() -> None:
    """L-10 under a flood of new connections: with the round's budget spent, new connections'
    instant frames start at once only until one round's budget is borrowed; the next waits
    for the pump, which repays the debt first (no starving the busy ones without bound)."""
    starts = FairStarts(frames_per_round=2, max_running=100)
    await _busy_seats(starts, 0)  # spends this round's budget
    for _ in range(2):
        await starts.wait_start(Seat(), instant=True)  # at once: no pump round
    assert starts.rounds == 0
    with trio.fail_after(5):
        await starts.wait_start(Seat(), instant=True)
    assert starts.rounds >= 1


@pytest.mark.parametrize(("running", "third_waits"), [(2, True), (3, False)])
async def test_max_running_frames_holds_the_next_start_until_one_is_done(
    running: int, third_waits: bool
) -> None:
    """L-10: with max_running 2 a third start waits for done(); with 3 it starts at once."""
    starts = FairStarts(frames_per_round=100, max_running=running)
    log: list[tuple[str, int]] = []
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            for n in range(3):
                nursery.start_soon(_start, starts, Seat(), f"f{n}", log)
            await trio.testing.wait_all_tasks_blocked()
            assert len(log) == (2 if third_waits else 3)
            starts.done()
    assert len(log) == 3
    assert starts.running == 3 - 1


async def test_a_start_cancelled_while_waiting_gives_its_place_up() -> None:
    """L-10: a cancelled wait starts nothing and does not use a running slot."""
    starts = FairStarts(frames_per_round=100, max_running=1)
    await starts.wait_start(Seat())
    with trio.move_on_after(0) as scope:  # the first holds the only slot
        await starts.wait_start(Seat())
    assert scope.cancelled_caught
    starts.done()
    with trio.fail_after(5):
        await starts.wait_start(Seat())
    assert starts.running == 1


class _Spawns(trio.abc.Instrument):
    """Counts the tasks spawned under one name, and scheduler rounds (one I/O check each)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.spawned = 0
        self.rounds = 0

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.spawned += task.name == self.name

    def before_io_wait(self, timeout: float) -> None:
        self.rounds += 1


async def test_a_reader_spending_the_budget_round_after_round_keeps_one_pump() -> None:
    """L-10 at the cost of one pump task: a connection that starts frames_per_round frames
    each round (the budget spent, its next start waiting) is granted by the same pump task
    round after round, not by a task spawned per budget's worth of frames."""
    starts = FairStarts(frames_per_round=2, max_running=100)
    spawns = _Spawns("csp_web.core.wire.turns.pump")
    seat = Seat()
    trio.lowlevel.add_instrument(spawns)
    try:
        with trio.fail_after(5):
            for _ in range(40):
                await starts.wait_start(seat)
                starts.done()
    finally:
        trio.lowlevel.remove_instrument(spawns)
    assert starts.running == 0
    assert spawns.rounds >= 40 // 2 - 1  # still at most 2 starts per scheduler round
    assert spawns.spawned == 1


# --- the whole connection loop under load


class _Steps(trio.abc.Instrument):
    """Counts task steps: scheduler work, independent of any clock."""

    def __init__(self) -> None:
        self.steps = 0

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1


def _serve(harness: Harness, starts: FairStarts, config: ConnectionConfig) -> trio.abc.Stream:
    client, server = trio.testing.memory_stream_pair()
    serve = partial(serve_connection, lease=None, starts=starts)
    options = StreamOptions(config, None)
    harness.nursery.start_soon(
        serve, server, harness.dispatcher, Peer("test"), options, harness.shutdown
    )
    return client


async def _keep_pipeline_full(stream: trio.abc.Stream, depth: int) -> None:
    codec = Connection()
    await stream.send_all(PING * depth)
    while data := await stream.receive_some(65536):
        codec.receive_data(data)
        answered = 0
        while isinstance(codec.next_event(), Reply):
            answered += 1
        if answered:
            await stream.send_all(PING * answered)


async def _ping(stream: trio.abc.Stream) -> Reply:
    codec = Connection()
    await stream.send_all(PING)
    while True:
        event = codec.next_event()
        if isinstance(event, Reply):
            return event
        codec.receive_data(await stream.receive_some(65536))


async def test_a_fresh_ping_is_answered_within_bounded_work_behind_40_full_pipelines(
    config: Config,
) -> None:
    """L-10: 40 connections each keep 64 pings in flight. A fresh connection's ping is answered
    after fewer scheduler steps than one pass over the busy frames (40 x 64): without the fair
    queue every busy frame started ahead of it in each round."""
    config = replace(config, audit=AuditConfig(enabled=False))
    conn = config.connection
    starts = FairStarts(conn.frames_per_round, conn.max_running_frames)
    counter = _Steps()
    async with open_harness(config) as harness:
        busy = [_serve(harness, starts, conn) for _ in range(40)]
        for stream in busy:
            harness.nursery.start_soon(_keep_pipeline_full, stream, conn.max_in_flight)
        for _ in range(200):  # let every pipeline fill and the load settle
            await trio.lowlevel.checkpoint()
        fresh = _serve(harness, starts, conn)
        trio.lowlevel.add_instrument(counter)
        try:
            with trio.fail_after(30):
                reply = await _ping(fresh)
        finally:
            trio.lowlevel.remove_instrument(counter)
        assert reply.get("DATA") == "pong"
        assert starts.waiting > 0  # the busy connections really were contending
        harness.nursery.cancel_scope.cancel()
    assert counter.steps < 40 * 64


async def test_an_instant_reply_read_with_the_inputs_end_is_sent_while_slow_work_runs(
    config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    """R-1: a ping whose frame the end of input completes (no blank line after it) is
    answered at once, not when the slow frame before it ends: the reader queued its reply for
    itself to send, and its input ended before it would have waited."""
    config = replace(config, audit=AuditConfig(enabled=False))
    conn = config.connection
    starts = FairStarts(conn.frames_per_round, conn.max_running_frames)
    async with open_harness(config) as harness:
        client = _serve(harness, starts, conn)
        await client.send_all(
            b"TASK REQ:sleep IN:TEST OUT:SLEPT\nID slow\nMS 60000\n\n"
            b"TASK REQ:ping IN:SYS OUT:PONG\nID p\n"
        )
        await client.send_stream.aclose()  # type: ignore[attr-defined]
        codec = Connection()
        with trio.fail_after(120):
            while not isinstance(event := codec.next_event(), Reply):
                codec.receive_data(await client.receive_some(65536))
        assert (event.id, event.get("DATA")) == ("p", "pong")
        assert trio.current_time() < 60  # before the slow frame's end (virtual time)
        harness.nursery.cancel_scope.cancel()


class _WriterSteps(trio.abc.Instrument):
    """Counts the task steps of connections' reply writers."""

    def __init__(self) -> None:
        self.steps = 0

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += task.name.endswith("write_replies")


async def test_instant_replies_behind_busy_connections_are_sent_by_their_reader(
    config: Config,
) -> None:
    """L-10 at low cost: 20 connections keep 8 pings in flight, one start per connection per
    round, so each reply is written alone. The reader sends each itself before it waits for
    its next turn, so the writer tasks take (almost) no steps: waking a writer per reply cost
    two more steps per ping behind busy connections (bench/fairness.py --only busy)."""
    config = replace(config, audit=AuditConfig(enabled=False))
    conn = config.connection
    starts = FairStarts(conn.frames_per_round, conn.max_running_frames)
    writers = _WriterSteps()
    answers: list[Reply] = []
    async with open_harness(config) as harness:
        for _ in range(20):
            stream = _serve(harness, starts, conn)
            harness.nursery.start_soon(_keep_pipeline_full_of, stream, PING, 8, answers)
        trio.lowlevel.add_instrument(writers)
        try:
            with trio.fail_after(30):
                while len(answers) < 2000:
                    await trio.lowlevel.checkpoint()
        finally:
            trio.lowlevel.remove_instrument(writers)
        harness.nursery.cancel_scope.cancel()
    assert {reply.get("DATA") for reply in answers} == {"pong"}
    assert writers.steps < len(answers) // 10


@pytest.mark.parametrize(("read_at_s", "closed"), [(9.9, False), (10.1, True)])
async def test_a_non_reading_peer_is_closed_at_the_write_limit_while_others_keep_the_daemon_busy(
    config: Config, autojump_clock: trio.testing.MockClock, read_at_s: float, closed: bool
) -> None:
    """L-7 under load: 3 connections keep 5 timed frames each in flight (the web specialist's
    15 slots: a busy refusal would be answered, and resent, in no virtual time), so the daemon
    never idles; a peer that never reads its reply is still closed 10 s after it was queued."""
    config = replace(config, audit=AuditConfig(enabled=False))
    conn = config.connection
    starts = FairStarts(conn.frames_per_round, conn.max_running_frames)
    sleeps = b"TASK REQ:sleep 100 IN:TEST OUT:SLEPT\n\n"
    async with open_harness(config) as harness:
        answers: list[Reply] = []
        for _ in range(3):
            stream = _serve(harness, starts, conn)
            harness.nursery.start_soon(_keep_pipeline_full_of, stream, sleeps, 5, answers)
        client, server = trio.testing.lockstep_stream_pair()
        done = trio.Event()

        async def serve_non_reader() -> None:
            options = StreamOptions(conn, None)
            await serve_connection(
                server, harness.dispatcher, Peer("nr"), options, harness.shutdown, starts=starts
            )
            done.set()

        harness.nursery.start_soon(serve_non_reader)
        sent_at = trio.current_time()
        await client.send_all(PING)
        with trio.move_on_at(sent_at + read_at_s):
            await done.wait()
        assert done.is_set() is closed
        assert len(answers) > 400  # 5 or more 0.1 s frames running all along: 500 or more done
        assert {reply.get("DATA") for reply in answers} == {"slept:100"}
        harness.nursery.cancel_scope.cancel()


async def _keep_pipeline_full_of(
    stream: trio.abc.Stream, frame: bytes, depth: int, answers: list[Reply]
) -> None:
    codec = Connection()
    await stream.send_all(frame * depth)
    while data := await stream.receive_some(65536):
        codec.receive_data(data)
        answered = 0
        while isinstance(event := codec.next_event(), Reply):
            answers.append(event)
            answered += 1
        if answered:
            await stream.send_all(frame * answered)


async def test_an_instant_start_is_granted_while_max_running_frames_run() -> None:
    """L-10: an instant frame needs a turn but no running place: with max_running 1 held, it
    starts (and needs no ``done``), while an ordinary frame waits for the place."""
    starts = FairStarts(frames_per_round=100, max_running=1)
    await starts.wait_start(Seat())
    with trio.fail_after(5):
        await starts.wait_start(Seat(), instant=True)  # the fast path
    assert starts.running == 1
    log: list[tuple[str, int]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_start, starts, Seat(), "ordinary", log)
        await trio.testing.wait_all_tasks_blocked()
        with trio.fail_after(5):
            await starts.wait_start(Seat(), instant=True)  # granted by the pump
        assert log == []
        starts.done()
    assert [name for name, _ in log] == ["ordinary"]
    assert starts.running == 1
