"""The one adapter loop between a byte stream and the dispatcher (h11's trio example shape).

stdin/stdout and every Unix-socket connection are ``trio.abc.Stream``s served by
``serve_stream``: a reader task feeds the sans-IO codec and starts one task per frame, a writer
task sends replies in order. Budgets (SPEC L-4 to L-7): tasks in flight per connection
(back-pressure), a deadline to finish a started frame (slowloris), an idle timeout, a bounded
reply queue with a write timeout, and a malformed-frame budget.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import trio

from protocol import (
    CLOSED,
    NEED_DATA,
    Connection,
    ErrorCode,
    Limits,
    ProtocolError,
    Reply,
    Task,
    serialize,
)

from .config import ConnectionConfig
from .context import Peer
from .dispatch import Dispatcher
from .errors import OpError
from .replies import fail_reply

log = logging.getLogger("csp_web.connection")
_RECEIVE_BYTES = 65536


class Shutdown:
    """Tells every connection to stop reading; in-flight frames still finish and reply."""

    def __init__(self) -> None:
        self.begun = trio.Event()
        self._scopes: set[trio.CancelScope] = set()

    def begin(self) -> None:
        self.begun.set()
        for scope in self._scopes:
            scope.cancel()

    @contextmanager
    def reader_scope(self) -> Iterator[None]:
        with trio.CancelScope() as scope:
            if self.begun.is_set():
                scope.cancel()
            self._scopes.add(scope)
            try:
                yield
            finally:
                self._scopes.discard(scope)


class ReplyOrder:
    """Releases replies of frames without ID in request order (SPEC C-2)."""

    def __init__(self) -> None:
        self._next = 0
        self._head = 0
        self._done: dict[int, bytes] = {}

    def reserve(self, task_id: str | None) -> int | None:
        if task_id is not None:
            return None
        self._next += 1
        return self._next - 1

    def complete(self, slot: int | None, data: bytes) -> bytes:
        """The bytes now sendable: ``data`` itself for ID'd frames, else the ready prefix."""
        if slot is None:
            return data
        self._done[slot] = data
        ready = []
        while self._head in self._done:
            ready.append(self._done.pop(self._head))
            self._head += 1
        return b"".join(ready)


@dataclass(frozen=True)
class StreamOptions:
    """How one transport is served; ``idle_timeout_s`` None means never idle out (stdin)."""

    config: ConnectionConfig
    idle_timeout_s: float | None
    sequential: bool = False  # run frames one at a time (the memory sink keeps write order)


async def serve_stream(
    stream: trio.abc.Stream,
    dispatcher: Dispatcher,
    peer: Peer,
    options: StreamOptions,
    shutdown: Shutdown,
) -> None:
    """Serve frames from ``stream`` until EOF, a budget closes it, or shutdown; closes it."""
    session = _Session(stream, dispatcher, peer, options)
    dispatcher.stats.connections += 1
    try:
        await session.run(shutdown)
    finally:
        dispatcher.stats.connections -= 1
        await trio.aclose_forcefully(stream)
        log.debug("connection %s closed", peer.connection)


class _Session:
    def __init__(
        self, stream: trio.abc.Stream, dispatcher: Dispatcher, peer: Peer, options: StreamOptions
    ) -> None:
        config = options.config
        self.stream = stream
        self.dispatcher = dispatcher
        self.peer = peer
        self.options = options
        self.codec = Connection(
            Limits(config.max_line_bytes, config.max_frame_bytes, config.max_fields)
        )
        self.send_replies, self.replies = trio.open_memory_channel[bytes](config.max_queued_replies)
        self.order = ReplyOrder()
        self.in_flight = trio.Semaphore(config.max_in_flight)
        self.bad_frames = 0
        self.frame_started: float | None = None
        self.last_activity = trio.current_time()

    async def run(self, shutdown: Shutdown) -> None:
        async with trio.open_nursery() as outer:
            outer.start_soon(self.write_replies, outer.cancel_scope)
            async with trio.open_nursery() as tasks:
                with shutdown.reader_scope():
                    await self.read_frames(tasks)
            await self.send_replies.aclose()

    async def read_frames(self, tasks: trio.Nursery) -> None:
        while True:
            data = await self.receive()
            if data is None:
                return
            self.codec.receive_data(data)
            keep_going = await self.handle_events(tasks)
            # The slowloris clock runs from when the frame now pending began to arrive: a frame
            # completed in this chunk (or time spent in back-pressure) never counts against it.
            if not self.codec.in_frame:
                self.frame_started = None
            elif self.frame_started is None:
                self.frame_started = trio.current_time()
            if not keep_going or not data:
                return

    async def receive(self) -> bytes | bytearray | None:
        """The next bytes (``b""`` at EOF), or None when a deadline closed the connection."""
        config = self.options.config
        while True:
            with trio.move_on_at(self._deadline()):
                try:
                    data = await self.stream.receive_some(_RECEIVE_BYTES)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return b""
                self.last_activity = trio.current_time()
                return data
            if self.codec.in_frame:
                self.dispatcher.stats.reject(ErrorCode.FRAME_TIMEOUT)
                detail = f"frame not completed within {config.frame_deadline_s:g}s"
                await self.emit_error(ErrorCode.FRAME_TIMEOUT, detail, None)
                return None
            idle = self.options.idle_timeout_s
            quiet_since = trio.current_time() - self.last_activity
            if self.in_flight.value == config.max_in_flight and quiet_since >= (idle or math.inf):
                log.info("connection %s idle, closing", self.peer.connection)
                return None

    def _deadline(self) -> float:
        if self.codec.in_frame:
            started = self.frame_started if self.frame_started is not None else trio.current_time()
            return started + self.options.config.frame_deadline_s
        idle = self.options.idle_timeout_s
        if idle is None:
            return math.inf
        # Idle counts from the last byte either way (a reply just sent is activity); while work
        # in flight keeps a quiet connection open, look again one idle period later.
        deadline = self.last_activity + idle
        now = trio.current_time()
        return deadline if deadline > now else now + idle

    async def handle_events(self, tasks: trio.Nursery) -> bool:
        """Start a task per complete frame; False when the connection should stop reading."""
        while True:
            try:
                event = self.codec.next_event()
            except ProtocolError as exc:
                self.frame_started = None
                if not await self.count_bad_frame(exc.code, exc.detail, exc.frame_id):
                    return False
                continue
            if event is NEED_DATA:
                return True
            if event is CLOSED:
                return False
            self.frame_started = None  # a frame ended: the next one's clock starts afresh
            if isinstance(event, Reply):
                detail = "expected a TASK frame"
                if not await self.count_bad_frame(ErrorCode.BAD_HEADER, detail, event.id):
                    return False
                continue
            assert isinstance(event, Task)
            try:  # a checkpoint per frame would cost a scheduler round; wait only at the cap
                self.in_flight.acquire_nowait()
            except trio.WouldBlock:
                await self.in_flight.acquire()  # back-pressure: stop reading (L-4)
            slot = self.order.reserve(event.id)
            if self.options.sequential:
                await self.run_task(event, slot)
            else:
                tasks.start_soon(self.run_task, event, slot)

    async def count_bad_frame(self, code: ErrorCode, detail: str, frame_id: str | None) -> bool:
        self.bad_frames += 1
        self.dispatcher.stats.reject(code)
        if self.bad_frames > self.options.config.max_bad_frames:
            limit = self.options.config.max_bad_frames
            await self.emit_error(ErrorCode.TOO_MANY_BAD_FRAMES, f"over {limit}", None)
            log.warning("connection %s: too many malformed frames", self.peer.connection)
            return False
        await self.emit_error(code, detail, frame_id)
        return True

    async def emit_error(self, code: ErrorCode, detail: str, frame_id: str | None) -> None:
        reply = fail_reply(OpError(code, detail), frame_id)
        await self.send(self.order.reserve(frame_id), serialize(reply))

    async def run_task(self, task: Task, slot: int | None) -> None:
        try:
            reply = await self.dispatcher.run(task, self.peer)
            try:
                data = serialize(reply)
            except ValueError:
                log.exception("reply to %s cannot be serialized", task.req)
                error = OpError(ErrorCode.INTERNAL_ERROR, "reply not serializable")
                data = serialize(fail_reply(error, task.id))
            await self.send(slot, data)
        finally:
            self.in_flight.release()

    async def send(self, slot: int | None, data: bytes) -> None:
        # One channel send per completion keeps ordered chunks from interleaving.
        ready = self.order.complete(slot, data)
        if ready:
            try:
                self.send_replies.send_nowait(ready)
            except trio.WouldBlock:
                await self.send_replies.send(ready)

    async def write_replies(self, connection_scope: trio.CancelScope) -> None:
        """Send queued replies, batching what is ready; a stuck peer is disconnected (L-7)."""
        async for first in self.replies:
            chunks = [first]
            while True:
                try:
                    chunks.append(self.replies.receive_nowait())
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
            try:
                with trio.fail_after(self.options.config.write_timeout_s):
                    await self.stream.send_all(b"".join(chunks))
            except (trio.TooSlowError, trio.BrokenResourceError, trio.ClosedResourceError):
                log.warning("connection %s: peer not reading, closing", self.peer.connection)
                connection_scope.cancel()
                return
            self.last_activity = trio.current_time()
