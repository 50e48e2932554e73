"""The one read loop of every CSP/1 program: bytes from a stream, through the sans-IO codec, to
a handler (h11's trio example server, trio-websocket's reader task).

The daemon's connections (``core.connection``), the reference Memory Specialist
(``memory.sink.server``) and the daemon's end of a node link (``specialists.node.link``) each
supply a ``StreamHandler``: what to do with a task, a reply and a malformed frame, what to do
once a read's frames are handled (send their replies), and when to stop waiting for bytes.
The loop owns what they share: reading, feeding the codec, draining its events in order, the
end of input, and the clock of a frame still arriving (a slowloris's, SPEC L-5).
"""

from __future__ import annotations

import math
from typing import Protocol

import trio

from protocol import CLOSED, NEED_DATA, Connection, ProtocolError, Reply, Task

__all__ = ["RECEIVE_BYTES", "StreamHandler", "serve_stream"]

RECEIVE_BYTES = 65536  # one read: h11's example server reads 64 KiB too
# Frames the codec parses in one pass before the handler sees the first of them
# (``Connection.read_ahead``): a read of 64 KiB holds 2,000 pings, handled 64 at a time.
FRAMES_AHEAD = 64


class StreamHandler(Protocol):
    """What a program does with the frames ``serve_stream`` reads. Each ``on_*`` returning
    False stops the loop (after ``on_drained``). Subclass it to inherit the defaults: no read
    deadline, nothing to do at a read's end or at EOF."""

    async def on_task(self, task: Task) -> bool:
        """A TASK frame arrived (in order)."""
        ...

    async def on_reply(self, reply: Reply) -> bool:
        """A STATUS frame arrived."""
        ...

    async def on_bad_frame(self, error: ProtocolError) -> bool:
        """A malformed frame (or a budget the codec keeps) was skipped."""
        ...

    async def on_drained(self, reading: bool) -> bool:
        """Every frame the last read brought is handled (``reading``: the loop would read
        on); False stops. The place to send what those frames were answered."""
        return reading

    def read_deadline(self, frame_started: float | None) -> float:
        """When to stop waiting for bytes (trio clock); ``frame_started`` is when the frame
        still arriving began to (None: none is)."""
        return math.inf

    async def on_read_deadline(self, in_frame: bool) -> bool:
        """``read_deadline`` passed with no bytes; True to wait again (``in_frame``: a
        frame had begun to arrive)."""
        return False

    def reading(self, scope: trio.CancelScope | None) -> None:
        """The loop waits for bytes inside ``scope`` (cancel it to stop reading); None once
        the wait is over."""
        return None

    def on_eof(self, *, reset: bool) -> None:
        """The input ended: EOF, or ``reset`` (the read failed: the peer is gone)."""
        return None


async def serve_stream(
    stream: trio.abc.ReceiveStream,
    codec: Connection,
    handler: StreamHandler,
    *,
    receive_bytes: int = RECEIVE_BYTES,
) -> None:
    """Feed ``stream`` into ``codec`` and each event to ``handler`` until EOF, the codec's
    CLOSED, a deadline or the handler stops it. Closes nothing: the caller owns ``stream``."""
    frame_started: float | None = None
    while True:
        data = await _receive(stream, codec, handler, frame_started, receive_bytes)
        if data is None:
            return
        codec.receive_data(data)
        reading, events = await _drain(codec, handler)
        if not await handler.on_drained(reading) or not reading or not data:
            return
        # The slowloris clock runs from when the frame now pending began to arrive: a frame
        # completed in this read (or time spent in back-pressure) never counts against it.
        if not codec.in_frame:
            frame_started = None
        elif frame_started is None or events:
            frame_started = trio.current_time()


async def _receive(
    stream: trio.abc.ReceiveStream,
    codec: Connection,
    handler: StreamHandler,
    frame_started: float | None,
    receive_bytes: int,
) -> bytes | bytearray | None:
    """The next bytes (``b""`` at EOF), or None when the handler gave up at its deadline."""
    while True:
        with trio.move_on_at(handler.read_deadline(frame_started)) as scope:
            handler.reading(scope)
            try:
                data = await stream.receive_some(receive_bytes)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                handler.on_eof(reset=True)
                return b""
            finally:
                handler.reading(None)
            if not data:
                handler.on_eof(reset=False)
            return data
        if not await handler.on_read_deadline(codec.in_frame):
            return None


async def _drain(codec: Connection, handler: StreamHandler) -> tuple[bool, int]:
    """Hand every complete event buffered to ``handler``: whether the loop reads on, and how
    many frames (well formed or not) ended."""
    events = 0
    while True:
        codec.read_ahead(FRAMES_AHEAD)
        try:
            event = codec.next_event()
        except ProtocolError as exc:
            events += 1
            if not await handler.on_bad_frame(exc):
                return False, events
            continue
        if event is NEED_DATA:
            return True, events
        if event is CLOSED:
            return False, events
        events += 1
        if isinstance(event, Reply):
            going = await handler.on_reply(event)
        else:
            assert isinstance(event, Task)
            going = await handler.on_task(event)
        if not going:
            return False, events
