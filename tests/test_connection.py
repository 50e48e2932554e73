"""The connection loop: ordering, back-pressure and every per-connection budget at N and N+1."""

from __future__ import annotations

from dataclasses import replace

import pytest
import trio
import trio.testing

from csp_web.config import AuditConfig, Config, ConnectionConfig
from protocol import Reply, Status
from tests.harness import open_harness

PING = b"TASK REQ:ping IN:SYS OUT:PONG\n\n"


def _code(reply: Reply | None) -> str:
    assert reply is not None
    assert reply.status is Status.FAIL, reply
    return (reply.get("ERROR") or "").partition(":")[0]


async def test_replies_without_id_keep_request_order(
    config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    """C-2: a slow first frame holds back later ID-less replies, in order."""
    frames = (
        b"TASK REQ:sleep 300 IN:TEST OUT:SLEPT\n\nTASK REQ:sleep 100 IN:TEST OUT:SLEPT\n\n"
        b"TASK REQ:sleep 200 IN:TEST OUT:SLEPT\n\n"
    )
    async with open_harness(config) as harness:
        peer = harness.connect()
        await peer.send(frames)
        replies = await peer.replies(3)
    assert [r.get("DATA") for r in replies] == ["slept:300", "slept:100", "slept:200"]


async def test_frame_with_id_is_answered_as_soon_as_done(
    config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    """C-2: an ID'd frame overtakes an earlier slow one."""
    frames = b"TASK REQ:sleep 500 IN:TEST OUT:SLEPT\n\nTASK REQ:sleep 1 IN:TEST OUT:SLEPT\nID q\n\n"
    async with open_harness(config) as harness:
        peer = harness.connect()
        await peer.send(frames)
        replies = await peer.replies(2)
    assert [r.id for r in replies] == ["q", None]


@pytest.mark.parametrize(("sent", "running"), [(3, 3), (4, 3)])
async def test_in_flight_cap_stops_reading_at_n(
    config: Config, mock_clock: trio.testing.MockClock, sent: int, running: int
) -> None:
    """L-4: with max_in_flight 3, a fourth frame is not started until one finishes."""
    conn = replace(config.connection, max_in_flight=3)
    frames = b"".join(
        f"TASK REQ:sleep 1000 IN:TEST OUT:SLEPT\nID f{n}\n\n".encode() for n in range(sent)
    )
    async with open_harness(config) as harness:
        peer = harness.connect(connection=conn)
        await peer.send(frames)
        await trio.testing.wait_all_tasks_blocked()
        assert harness.dispatcher.slots("web").running == running
        assert harness.dispatcher.stats.in_flight == running
        mock_clock.jump(1.5)
        first = await peer.replies(running)
        assert all(r.status is Status.OK for r in first)
        if sent > running:
            await trio.testing.wait_all_tasks_blocked()
            assert harness.dispatcher.stats.in_flight == sent - running


@pytest.mark.parametrize(("wait_s", "closed"), [(9.9, False), (10.1, True)])
async def test_started_frame_must_complete_within_the_frame_deadline(
    config: Config, mock_clock: trio.testing.MockClock, wait_s: float, closed: bool
) -> None:
    """L-5: slowloris: a half-sent frame gets frame_timeout after 10 s and the peer is closed."""
    async with open_harness(config) as harness:
        peer = harness.connect()
        await peer.send(b"TASK REQ:ping IN:SYS OUT:PONG\n")
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(wait_s)
        await trio.testing.wait_all_tasks_blocked()
        if closed:
            assert _code(await peer.reply()) == "frame_timeout"
            assert await peer.reply() is None
        else:
            await peer.send(b"\n")
            reply = await peer.reply()
            assert reply is not None
            assert reply.get("DATA") == "pong"


@pytest.mark.parametrize(("wait_s", "closed"), [(299.0, False), (301.0, True)])
async def test_idle_socket_connection_is_closed_after_idle_timeout(
    config: Config, mock_clock: trio.testing.MockClock, wait_s: float, closed: bool
) -> None:
    """L-5: an idle connection is closed quietly after idle_timeout_s."""
    async with open_harness(config) as harness:
        peer = harness.connect(idle_timeout_s=300.0)
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(wait_s)
        await trio.testing.wait_all_tasks_blocked()
        if closed:
            assert await peer.reply() is None
        else:
            await peer.send(PING)
            reply = await peer.reply()
            assert reply is not None
            assert reply.get("DATA") == "pong"


async def test_connection_with_work_in_flight_is_not_idle(
    config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    """L-5: a long task outlives the idle timeout and still gets its reply."""
    async with open_harness(config) as harness:
        peer = harness.connect(idle_timeout_s=5.0)
        await peer.send(b"TASK REQ:sleep 20000 IN:TEST OUT:SLEPT\nTIMEOUT_MS 60000\n\n")
        reply = await peer.reply()
    assert reply is not None
    assert reply.get("DATA") == "slept:20000"


@pytest.mark.parametrize("bad", [10, 11])
async def test_malformed_frame_budget_closes_after_n(config: Config, bad: int) -> None:
    """L-6, R-5: ten malformed frames each get a FAIL; the eleventh closes the connection."""
    async with open_harness(config) as harness:
        peer = harness.connect()
        await peer.send(b"NONSENSE\n\n" * bad + PING)
        replies = [await peer.reply() for _ in range(min(bad, 10))]
        assert {_code(r) for r in replies} == {"bad_header"}
        last = await peer.reply()
        if bad > 10:
            assert _code(last) == "too_many_bad_frames"
            assert await peer.reply() is None
        else:
            assert last is not None
            assert last.get("DATA") == "pong"


async def test_oversize_line_is_answered_and_the_connection_resynchronises(config: Config) -> None:
    """L-1, R-5, R-6: frame_too_large, then the next frame after the blank line is served."""
    conn = replace(config.connection, max_line_bytes=100, max_frame_bytes=1000)
    async with open_harness(config) as harness:
        peer = harness.connect(connection=conn)
        await peer.send(
            b"TASK REQ:ping IN:SYS OUT:PONG\nDATA " + b"x" * 5000 + b"\nMORE y\n\n" + PING
        )
        first, second = await peer.replies(2)
    assert _code(first) == "frame_too_large"
    assert second.get("DATA") == "pong"


@pytest.mark.parametrize(("fields", "ok"), [(3, True), (4, False)])
async def test_fields_per_frame_cap_holds_at_n_and_n_plus_1(
    config: Config, fields: int, ok: bool
) -> None:
    """L-3 over the daemon: max_fields 3 admits three field lines, not four."""
    conn = replace(config.connection, max_fields=3)
    frame = b"TASK REQ:ping IN:SYS OUT:PONG\n" + b"TIMEOUT_MS 100\n" * fields + b"\n"
    async with open_harness(config) as harness:
        peer = harness.connect(connection=conn)
        await peer.send(frame)
        reply = await peer.reply()
    assert reply is not None
    if ok:
        assert _code(reply) == "duplicate_field"  # parsed, then refused by validation
    else:
        assert _code(reply) == "frame_too_large"


async def test_reply_frame_from_a_client_is_bad_header(config: Config) -> None:
    async with open_harness(config) as harness:
        peer = harness.connect()
        await peer.send(b"STATUS OK\nID z\n\n" + PING)
        first, second = await peer.replies(2)
    assert (_code(first), first.id) == ("bad_header", "z")
    assert second.get("DATA") == "pong"


@pytest.mark.parametrize(("wait_s", "closed"), [(9.0, False), (11.0, True)])
async def test_peer_that_does_not_read_is_disconnected_after_write_timeout(
    config: Config, mock_clock: trio.testing.MockClock, wait_s: float, closed: bool
) -> None:
    """L-7: a reply write blocked for write_timeout_s (10 s) closes the connection."""
    # No audit write, so no worker thread runs while virtual time is jumped.
    config = replace(config, audit=AuditConfig(enabled=False))
    async with open_harness(config) as harness:
        peer = harness.connect(lockstep=True)
        await peer.send(PING)
        await trio.testing.wait_all_tasks_blocked()
        assert harness.dispatcher.stats.connections == 1
        mock_clock.jump(wait_s)
        await trio.testing.wait_all_tasks_blocked()
        # The lockstep pair may still hand over the abandoned bytes, so observe the close.
        assert harness.dispatcher.stats.connections == (0 if closed else 1)


async def test_eof_finishes_in_flight_work_before_closing(
    config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    """F-6: EOF ends a pending frame, which still runs and replies."""
    async with open_harness(config) as harness:
        peer = harness.connect()
        await peer.send(b"TASK REQ:sleep 100 IN:TEST OUT:SLEPT")
        await peer.stream.send_eof()  # type: ignore[attr-defined]
        reply = await peer.reply()
        assert reply is not None
        assert reply.get("DATA") == "slept:100"
        assert await peer.reply() is None


def test_connection_config_defaults_match_spec_limits() -> None:
    """L-1 to L-7: the documented defaults."""
    conn = ConnectionConfig()
    assert (conn.max_line_bytes, conn.max_frame_bytes, conn.max_fields) == (262144, 1048576, 128)
    assert (conn.max_in_flight, conn.frame_deadline_s, conn.idle_timeout_s) == (64, 10.0, 300.0)
    assert (conn.max_bad_frames, conn.max_queued_replies, conn.write_timeout_s) == (10, 128, 10.0)


async def test_slowloris_clock_restarts_for_each_frame_of_a_pipelining_client(
    config: Config, mock_clock: trio.testing.MockClock
) -> None:
    """L-5: a chunk that ends one frame and starts the next gives the next its own 10 s."""
    async with open_harness(config) as harness:
        peer = harness.connect()
        await peer.send(b"TASK REQ:ping IN:SYS OUT:PONG\nID a\n")
        mock_clock.jump(9)
        await trio.testing.wait_all_tasks_blocked()
        await peer.send(b"\nTASK REQ:ping IN:SYS OUT:PONG\nID b\n")
        mock_clock.jump(3)  # 12 s after A began, 3 s after B began
        await trio.testing.wait_all_tasks_blocked()
        await peer.send(b"\n")
        replies = [await peer.reply(), await peer.reply()]
    assert sorted(r.id or "" for r in replies if r is not None) == ["a", "b"]
    assert all(r is not None and r.status is Status.OK for r in replies)


async def test_idle_time_counts_from_the_last_reply_not_from_the_request(
    config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    """L-5: a long task's reply is activity; the connection stays for a ping right after."""
    async with open_harness(config) as harness:
        peer = harness.connect(idle_timeout_s=20.0)
        await peer.send(b"TASK REQ:sleep 19000 IN:TEST OUT:SLEPT\n\n")
        first = await peer.reply()
        assert first is not None
        assert first.get("DATA") == "slept:19000"
        await trio.sleep(2)
        await peer.send(PING)
        second = await peer.reply()
    assert second is not None
    assert second.get("DATA") == "pong"


def _sleeps(ids: list[str], ms: int) -> bytes:
    return b"".join(f"TASK REQ:sleep {ms} IN:TEST OUT:SLEPT\nID {i}\n\n".encode() for i in ids)


async def test_frames_held_by_the_in_flight_cap_are_answered_shutting_down_at_shutdown(
    config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    """C-5, R-1, L-4: two tasks run; the third waits for a slot and the fourth is still in the
    buffer. At shutdown both get FAIL shutting_down at once; the running two finish."""
    conn = replace(config.connection, max_in_flight=2)
    async with open_harness(config) as harness:
        peer = harness.connect(connection=conn)
        await peer.send(_sleeps(["r0", "r1", "held", "buffered"], 1000))
        await trio.testing.wait_all_tasks_blocked()
        harness.dispatcher.shutting_down = True
        harness.shutdown.begin()
        with trio.fail_after(60):
            replies = await peer.replies(4)
            assert await peer.reply() is None
    # ID'd replies may overtake each other (C-2): the two that ran finish in either order.
    assert sorted((r.id, r.status) for r in replies[2:]) == [("r0", Status.OK), ("r1", Status.OK)]
    assert {r.id for r in replies[:2]} == {"held", "buffered"}
    assert {_code(r) for r in replies[:2]} == {"shutting_down"}
    assert (harness.shutdown.answered, harness.shutdown.cut, harness.shutdown.refused) == (2, 0, 2)


async def test_ordered_replies_still_come_in_request_order_when_shutdown_refuses_the_rest(
    config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    """C-2, C-5: frames without ID: the refused ones wait behind the running one's reply.
    (Sleeps, not pings: an instant op never waits for an in-flight place.)"""
    conn = replace(config.connection, max_in_flight=1)
    frames = b"TASK REQ:sleep 500 IN:TEST OUT:SLEPT\n\n" * 3
    async with open_harness(config) as harness:
        peer = harness.connect(connection=conn)
        await peer.send(frames)
        await trio.testing.wait_all_tasks_blocked()
        harness.dispatcher.shutting_down = True
        harness.shutdown.begin()
        with trio.fail_after(60):
            first, *rest = await peer.replies(3)
    assert first.get("DATA") == "slept:500"
    assert [_code(r) for r in rest] == ["shutting_down", "shutting_down"]


@pytest.mark.parametrize(("grace_s", "cut"), [(30.1, False), (29.9, True)])
async def test_work_the_grace_period_cuts_is_answered_shutting_down_before_the_close(
    config: Config, autojump_clock: trio.testing.MockClock, grace_s: float, cut: bool
) -> None:
    """C-5, R-1: a 30 s task under a longer grace period finishes; under a shorter one it is
    cancelled at the deadline and still gets its one reply, FAIL shutting_down."""
    async with open_harness(config) as harness:
        peer = harness.connect()
        await peer.send(b"TASK REQ:sleep 30000 IN:TEST OUT:SLEPT\nID long\nTIMEOUT_MS 60000\n\n")
        await trio.testing.wait_all_tasks_blocked()
        harness.dispatcher.shutting_down = True
        harness.shutdown.begin()
        harness.shutdown.cut_at(trio.current_time() + grace_s)
        with trio.fail_after(60):
            reply = await peer.reply()
            assert await peer.reply() is None
    assert reply is not None
    assert reply.id == "long"
    if cut:
        assert _code(reply) == "shutting_down"
    else:
        assert reply.get("DATA") == "slept:30000"
    assert (harness.shutdown.answered, harness.shutdown.cut) == ((0, 1) if cut else (1, 0))


@pytest.mark.parametrize(("read_at_s", "closed"), [(14.9, False), (15.1, True)])
async def test_write_limit_runs_from_when_a_reply_is_queued(
    config: Config, mock_clock: trio.testing.MockClock, read_at_s: float, closed: bool
) -> None:
    """L-7: reply A blocks the writer at t=0 and reply B is queued behind it at t=5. The peer
    reads A at t=9, so A met its limit; B must then be written by t=15, not by 9 + 10 = 19."""
    config = replace(config, audit=AuditConfig(enabled=False))
    async with open_harness(config) as harness:
        peer = harness.connect(lockstep=True)
        await peer.send(_sleeps(["a"], 0) + _sleeps(["b"], 5000))
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(5)
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(4)
        first = await peer.reply()  # t=9: reads A, which lets the writer take B
        assert first is not None
        assert first.id == "a"
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(read_at_s - 9)
        await trio.testing.wait_all_tasks_blocked()
        assert harness.dispatcher.stats.connections == (0 if closed else 1)


@pytest.mark.parametrize(("blank", "closed"), [(32, False), (33, True)])
async def test_empty_lines_between_frames_are_budgeted(
    config: Config, blank: int, closed: bool
) -> None:
    """L-8: 32 extra empty lines after a frame are skipped; the 33rd closes the connection
    with FAIL too_many_blank_lines."""
    async with open_harness(config) as harness:
        peer = harness.connect()
        await peer.send(PING + b"\n" * blank + PING)
        with trio.fail_after(10):
            first = await peer.reply()
            second = await peer.reply()
            assert first is not None
            assert first.get("DATA") == "pong"
            if closed:
                assert _code(second) == "too_many_blank_lines"
                assert await peer.reply() is None
            else:
                assert second is not None
                assert second.get("DATA") == "pong"


async def test_a_flood_of_newlines_is_cut_off(config: Config) -> None:
    """L-8: 64 KiB of bare newlines is one FAIL too_many_blank_lines and a close."""
    async with open_harness(config) as harness:
        peer = harness.connect()
        await peer.send(b"\n" * 65536)
        with trio.fail_after(10):
            assert _code(await peer.reply()) == "too_many_blank_lines"
            assert await peer.reply() is None


@pytest.mark.parametrize(("wait_s", "closed"), [(299.0, False), (301.0, True)])
async def test_empty_lines_do_not_keep_an_idle_connection_open(
    config: Config, mock_clock: trio.testing.MockClock, wait_s: float, closed: bool
) -> None:
    """L-5, L-8: a newline every 10 s is not activity: the connection still idles out at 300 s."""
    async with open_harness(config) as harness:
        peer = harness.connect(idle_timeout_s=300.0)
        await trio.testing.wait_all_tasks_blocked()
        for _ in range(int(wait_s // 10)):
            await peer.send(b"\n")
            mock_clock.jump(10)
            await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(wait_s - 10 * int(wait_s // 10))
        await trio.testing.wait_all_tasks_blocked()
        assert harness.dispatcher.stats.connections == (0 if closed else 1)


async def test_an_instant_reply_waits_behind_an_earlier_id_less_reply(
    config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    """C-2: the reader sends an instant op's reply itself only when nothing is queued before
    it; an ID-less ping behind a slow ID-less frame is still answered second."""
    frames = b"TASK REQ:sleep 300 IN:TEST OUT:SLEPT\n\n" + PING
    async with open_harness(config) as harness:
        peer = harness.connect()
        await peer.send(frames)
        replies = await peer.replies(2)
    assert [r.get("DATA") for r in replies] == ["slept:300", "pong"]


async def test_a_ping_arriving_while_the_writer_is_blocked_is_sent_after_its_batch(
    config: Config, mock_clock: trio.testing.MockClock
) -> None:
    """The reader never writes while the writer's send is in progress (two writers on one
    stream): a ping whose reply is ready while the writer is blocked on a peer not reading
    is queued, and both replies arrive whole, in the order they were ready."""
    config = replace(config, audit=AuditConfig(enabled=False))
    async with open_harness(config) as harness:
        peer = harness.connect(lockstep=True)
        await peer.send(_sleeps(["a"], 0))
        await trio.testing.wait_all_tasks_blocked()  # the writer is blocked sending a
        await peer.send(b"TASK REQ:ping IN:SYS OUT:PONG\nID p\n\n")
        await trio.testing.wait_all_tasks_blocked()
        with trio.fail_after(1):
            replies = await peer.replies(2)
    assert [(r.id, r.status) for r in replies] == [("a", Status.OK), ("p", Status.OK)]
    assert replies[1].get("DATA") == "pong"


@pytest.mark.parametrize(("wait_s", "closed"), [(9.0, False), (11.0, True)])
async def test_a_reader_sending_to_a_peer_that_does_not_read_is_cut_after_write_timeout(
    config: Config, mock_clock: trio.testing.MockClock, wait_s: float, closed: bool
) -> None:
    """L-7 for the reader's own send: a lone ping's reply is written by the reader; blocked
    on a peer that never reads, it is cut at write_timeout_s (10 s), not before, and the
    blocked reader does not keep the connection from closing when the harness stops."""
    config = replace(config, audit=AuditConfig(enabled=False))
    async with open_harness(config) as harness:
        peer = harness.connect(lockstep=True)
        await peer.send(b"TASK REQ:ping IN:SYS OUT:PONG\nID p\n\n")
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(wait_s)
        await trio.testing.wait_all_tasks_blocked()
        assert harness.dispatcher.stats.connections == (0 if closed else 1)
