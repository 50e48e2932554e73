"""The one read loop (``csp_web.core.wire.stream``) with a recording handler, over trio's in-memory
streams: events in order, one ``on_drained`` per read, the end of input, the frame clock."""

from __future__ import annotations

import math

import trio
import trio.testing

from csp_web.core.wire.stream import StreamHandler, serve_stream
from protocol import Connection, ErrorCode, ProtocolError, Reply, Status, Task

PING = b"TASK REQ:ping IN:SYS OUT:PONG\nID p\n\n"
PONG = b"STATUS OK\nID q\n\n"
BAD = b"NOT A FRAME\n\n"


class Recorder(StreamHandler):
    """Records every call; ``stop_at`` makes the handler stop at that event's kind."""

    def __init__(self, stop_at: str | None = None, deadline_s: float = math.inf) -> None:
        self.calls: list[str] = []
        self.stop_at = stop_at
        self.deadline_s = deadline_s
        self.clocks: list[float | None] = []

    async def on_task(self, task: Task) -> bool:
        self.calls.append(f"task {task.req}")
        return self.stop_at != "task"

    async def on_reply(self, reply: Reply) -> bool:
        self.calls.append(f"reply {reply.status}")
        return self.stop_at != "reply"

    async def on_bad_frame(self, error: ProtocolError) -> bool:
        self.calls.append(f"bad {error.code}")
        return self.stop_at != "bad"

    async def on_drained(self, reading: bool) -> bool:
        self.calls.append(f"drained {reading}")
        return reading

    def read_deadline(self, frame_started: float | None) -> float:
        self.clocks.append(frame_started)
        return math.inf if frame_started is None else frame_started + self.deadline_s

    async def on_read_deadline(self, in_frame: bool) -> bool:
        self.calls.append(f"deadline in_frame={in_frame}")
        return False

    def on_eof(self, *, reset: bool) -> None:
        self.calls.append(f"eof reset={reset}")


async def _serve(chunks: list[bytes], handler: Recorder) -> None:
    """Serve ``chunks`` (one read each), then EOF."""
    ours, theirs = trio.testing.memory_stream_pair()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_stream, theirs, Connection(), handler)
            for chunk in chunks:
                await ours.send_all(chunk)
                await trio.testing.wait_all_tasks_blocked()
            await ours.send_eof()


async def test_each_event_of_a_read_reaches_the_handler_in_order_then_on_drained() -> None:
    handler = Recorder()
    await _serve([PING + BAD + PONG, PING], handler)
    bad = f"bad {ErrorCode.BAD_HEADER}"
    assert handler.calls == [
        *("task ping", bad, f"reply {Status.OK}", "drained True"),
        *("task ping", "drained True"),
        *("eof reset=False", "drained False"),
    ]


async def test_a_handler_that_stops_ends_the_loop_after_on_drained() -> None:
    handler = Recorder(stop_at="reply")
    await _serve([PONG + PING], handler)
    assert handler.calls == [f"reply {Status.OK}", "drained False"]


async def test_a_read_that_fails_is_the_end_of_input_with_reset() -> None:
    handler = Recorder()
    _ours, theirs = trio.testing.lockstep_stream_pair()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_stream, theirs, Connection(), handler)
            await trio.testing.wait_all_tasks_blocked()
            await theirs.aclose()  # the loop's own stream closed under it
    assert handler.calls == ["eof reset=True", "drained False"]


async def test_the_frame_clock_starts_when_a_frame_begins_and_restarts_after_one_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """L-5: the handler is told when the frame still arriving began to: None with none, the
    time of the read that began it, and afresh when a read ends one frame and begins another;
    past the deadline the handler is asked what to do."""
    handler = Recorder(deadline_s=10)
    ours, theirs = trio.testing.memory_stream_pair()
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_stream, theirs, Connection(), handler)
            await ours.send_all(PING[:5])  # at 0
            await trio.sleep(4)
            await ours.send_all(PING[5:] + PING[:5])  # at 4: one ends, the next begins
            await trio.sleep(4)
            await ours.send_all(PING[5:8])  # at 8: the same frame goes on
    assert handler.clocks == [None, 0, 4, 4]
    assert handler.calls == [
        *("drained True", "task ping", "drained True", "drained True"),
        "deadline in_frame=True",
    ]
