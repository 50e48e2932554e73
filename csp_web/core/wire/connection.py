"""The one adapter loop between a byte stream and the dispatcher (h11's trio example shape).

stdin/stdout and every Unix-socket connection are ``trio.abc.Stream``s served by
``serve_stream``: a reader task feeds the sans-IO codec and starts one task per frame, a writer
task sends replies in order (``reply_writer``: before waiting for bytes the reader sends what
is queued itself when no send is in progress: a lone reply skips a scheduler round). Budgets
(SPEC L-4 to L-8): tasks in flight per connection (back-pressure), a deadline to finish a
started frame (slowloris), an idle timeout, a bounded reply queue whose oldest reply must be
written within the write limit, a malformed-frame budget and an empty-line budget. Every
frame start is admitted by the daemon-wide ``FairStarts`` (SPEC L-10): a bounded number per
scheduler round, round-robin across connections, a new connection first, so busy connections
cannot hold the scheduler while a fresh one waits.

At shutdown every task still gets exactly one reply (SPEC R-1): a frame already received but not
started (held by the in-flight cap, or still in the codec's buffer) is answered
``shutting_down`` at once; one still running when the grace period ends is cancelled and
answered ``shutting_down``; then the connection closes.

Each task the connection receives holds a ticket (``core.cancels``) from its frame until its
work ends, so ``REQ:cancel`` can end it; when the peer hangs up (EOF with the socket closed
both ways, or a reply that cannot be written), its unfinished tasks are cancelled
(``tasks.cancel_on_disconnect``) and their replies, audited as any other, are dropped.
"""

from __future__ import annotations

import logging
import math
import select
from dataclasses import dataclass

import trio

from csp_web.config import ConnectionConfig
from csp_web.core.api.context import Peer
from csp_web.core.api.deadlines import CUT_DETAIL
from csp_web.core.api.errors import OpError
from csp_web.core.api.ops import BoundOp
from csp_web.core.api.replies import fail_reply
from csp_web.core.dispatch.cancels import BY_HANGUP, Ticket
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.core.transports.unix import Lease
from csp_web.core.wire.reply_writer import ReplyWriter
from csp_web.core.wire.shutdown import Shutdown
from csp_web.core.wire.turns import FairStarts, Seat
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

__all__ = ["Shutdown", "StreamOptions", "serve_stream"]  # Shutdown: core.shutdown

log = logging.getLogger(__name__)
_CUT = OpError(ErrorCode.SHUTTING_DOWN, CUT_DETAIL).wire_text  # work the grace period ended
_RECEIVE_BYTES = 65536


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
    *,
    lease: Lease | None = None,
    starts: FairStarts | None = None,
) -> None:
    """Serve frames from ``stream`` until EOF, a budget closes it, or shutdown; closes it.

    With a ``lease`` (a Unix-socket connection) the gate may evict the connection while it is
    idle, to admit a new one past a connection cap. ``starts`` is the fair queue the daemon's
    connections share (L-10); without one the connection gets its own.
    """
    if starts is None:
        starts = FairStarts(options.config.frames_per_round, options.config.max_running_frames)
    session = _Session(stream, dispatcher, peer, options, shutdown, starts)
    if lease is not None:
        lease.tenant = session
    dispatcher.stats.connections += 1
    try:
        await session.run()
    finally:
        dispatcher.stats.connections -= 1
        dispatcher.connection_closed(peer)
        await trio.aclose_forcefully(stream)
        log.debug("connection %s closed", peer.connection)


class _Session:
    def __init__(
        self,
        stream: trio.abc.Stream,
        dispatcher: Dispatcher,
        peer: Peer,
        options: StreamOptions,
        shutdown: Shutdown,
        starts: FairStarts,
    ) -> None:
        config = options.config
        self.shutdown = shutdown
        self.starts = starts
        self.seat = Seat()
        self.stream = stream
        self.dispatcher = dispatcher
        self.peer = peer
        self.options = options
        self.codec = Connection(
            Limits(
                config.max_line_bytes,
                config.max_frame_bytes,
                config.max_fields,
                config.max_blank_lines,
            )
        )
        self.writer = ReplyWriter(
            stream,
            config,
            peer.connection,
            pipelining=self.pipelining,
            on_written=self.touch,
            on_hangup=self.hung_up,
        )
        self.in_flight = trio.Semaphore(config.max_in_flight)
        self.bad_frames = 0
        self.frame_started: float | None = None
        self.last_activity = trio.current_time()
        self.held: Task | None = None  # parsed, waiting for an in-flight slot
        self.receive_scope: trio.CancelScope | None = None  # set while waiting for bytes
        self.evicted = False
        self.hangup_cancels = False  # the peer hung up: frames read from now on are cancelled

    def idle_since(self) -> float | None:
        """When the connection last did anything, or None while it has anything to do."""
        idle = (
            self.receive_scope is not None
            and not self.writer.writing
            and not len(self.writer.replies)
            and self.in_flight.value == self.options.config.max_in_flight
            and not self.codec.in_frame
        )
        return self.last_activity if idle else None

    def evict(self) -> None:
        """Close the connection if it is still waiting for bytes (nothing read is lost)."""
        self.evicted = True
        if self.receive_scope is not None:
            self.receive_scope.cancel()

    async def run(self) -> None:
        async with trio.open_nursery() as outer:
            self.writer.connection_scope = outer.cancel_scope
            outer.start_soon(self.writer.write_replies)
            async with trio.open_nursery() as tasks:
                with self.shutdown.reader_scope():
                    await self.read_frames(tasks)
                if self.shutdown.begun.is_set():
                    self.refuse_received()
            self.writer.replies.close()

    async def read_frames(self, tasks: trio.Nursery) -> None:
        while True:
            data = await self.receive()
            if data is None:
                return
            if not data and _peer_closed(self.stream):
                self.hung_up()
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
            with trio.move_on_at(self._deadline()) as self.receive_scope:
                if self.evicted:
                    self.receive_scope.cancel()
                try:
                    data = await self.stream.receive_some(_RECEIVE_BYTES)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    self.hung_up()  # reset by the peer: nobody reads the replies either
                    return b""
                finally:
                    self.receive_scope = None
                return data
            if self.evicted:
                log.info("connection %s idle at a connection cap, evicted", self.peer.connection)
                return None
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
        # Idle counts from the last frame either way (a reply just sent is activity, empty lines
        # are not); while work in flight keeps a quiet connection open, look again later.
        deadline = self.last_activity + idle
        now = trio.current_time()
        nothing_in_flight = self.in_flight.value == self.options.config.max_in_flight
        return deadline if deadline > now or nothing_in_flight else now + idle

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
                if self.codec.in_frame:
                    self.last_activity = trio.current_time()
                return await self.writer.send_at_once()
            if event is CLOSED:
                return False
            self.frame_started = None  # a frame ended: the next one's clock starts afresh
            self.last_activity = trio.current_time()
            if isinstance(event, Reply):
                detail = "expected a TASK frame"
                if not await self.count_bad_frame(ErrorCode.BAD_HEADER, detail, event.id):
                    return False
                continue
            assert isinstance(event, Task)
            await self.start_task(tasks, event)

    async def start_task(self, tasks: trio.Nursery, task: Task) -> None:
        self.held = task  # answered shutting_down if the daemon stops before it starts
        if not self.options.sequential and self.dispatcher.is_instant(task):
            await self.starts.wait_start(self.seat, instant=True)  # a turn, no running place
            if (op := self.dispatcher.instant_op(task, self.peer)) is not None:
                self.held = None
                await self.run_at_once(task, op, self.writer.order.reserve(task.id))
                return
            # The sys pool filled or pacing began meanwhile: it waits like any frame.
        # IN:SYS ops never wait for work, so there is nothing to cancel (and a REQ:cancel
        # naming its own ID cannot cancel itself).
        ticket = self.dispatcher.cancels.open(self.peer, task.id) if task.domain != "SYS" else None
        if ticket is not None and self.hangup_cancels:  # sent before the hang-up, read after
            ticket.cancel(BY_HANGUP)
        try:
            try:  # a checkpoint per frame would cost a scheduler round; wait only at the cap
                self.in_flight.acquire_nowait()
            except trio.WouldBlock:
                await self.wait_slot()  # back-pressure: stop reading (L-4)
            try:
                await self.starts.wait_start(self.seat)  # this connection's turn (L-10)
            except BaseException:
                self.in_flight.release()
                raise
        except BaseException:
            if ticket is not None:
                ticket.close()
            raise
        self.held = None
        slot = self.writer.order.reserve(task.id)
        if self.options.sequential:
            await self.run_task(task, slot, ticket)
        else:
            tasks.start_soon(self.run_task, task, slot, ticket)

    def refuse_received(self) -> None:
        """Answer ``shutting_down`` to every task received but not started (SPEC R-1)."""
        refused = [self.held] if self.held is not None else []
        self.held = None
        while True:
            try:
                event = self.codec.next_event()
            except ProtocolError as exc:
                self.queue_error(exc.code, exc.detail, exc.frame_id)
                continue
            if isinstance(event, Reply):
                self.queue_error(ErrorCode.BAD_HEADER, "expected a TASK frame", event.id)
            elif isinstance(event, Task):
                refused.append(event)
            else:
                break  # NEED_DATA or CLOSED
        for task in refused:
            self.queue_error(ErrorCode.SHUTTING_DOWN, "daemon is stopping", task.id)
        self.shutdown.refused += len(refused)

    async def count_bad_frame(self, code: ErrorCode, detail: str, frame_id: str | None) -> bool:
        self.bad_frames += 1
        self.dispatcher.stats.reject(code)
        if code is ErrorCode.TOO_MANY_BLANK_LINES:
            log.info("connection %s: newline flood, closing", self.peer.connection)
            await self.emit_error(code, detail, None)
            return False
        if self.bad_frames > self.options.config.max_bad_frames:
            limit = self.options.config.max_bad_frames
            await self.emit_error(ErrorCode.TOO_MANY_BAD_FRAMES, f"over {limit}", None)
            log.warning("connection %s: too many malformed frames", self.peer.connection)
            return False
        await self.emit_error(code, detail, frame_id)
        return True

    def queue_error(self, code: ErrorCode, detail: str, frame_id: str | None) -> None:
        self.dispatcher.stats.reject(code)
        reply = fail_reply(OpError(code, detail), frame_id)
        self.writer.queue(self.writer.order.reserve(frame_id), serialize(reply))

    async def emit_error(self, code: ErrorCode, detail: str, frame_id: str | None) -> None:
        reply = fail_reply(OpError(code, detail), frame_id)
        await self.writer.send(self.writer.order.reserve(frame_id), serialize(reply))

    async def run_task(self, task: Task, slot: int | None, ticket: Ticket | None) -> None:
        try:
            try:
                data = await self.work(task, ticket=ticket)
            finally:
                self.starts.done()
            await self.writer.send(slot, data)
        finally:
            self.in_flight.release()

    async def run_at_once(self, task: Task, op: BoundOp, slot: int | None) -> None:
        """Run an op that does not wait (``Dispatcher.instant_op``: IN:SYS) in the reader:
        a task of its own would cost more than the op, and it holds neither an in-flight
        place nor a running one, so slow work filling both never holds it back. Its one wait,
        an audit summary's commit (O-4), is shielded, so a shutdown that stops the reader
        never takes its reply; back-pressure on the reply queue waits after it is queued."""
        self.writer.queue(slot, await self.work(task, instant=op))
        await self.writer.replies.wait_room()

    async def work(
        self, task: Task, *, instant: BoundOp | None = None, ticket: Ticket | None = None
    ) -> bytes:
        """The serialized reply to ``task``; ``shutting_down`` if the grace period cut it,
        ``cancelled`` if ``ticket`` was cancelled."""
        shutdown = self.shutdown
        reply = await self.dispatcher.run(
            task, self.peer, grace=shutdown.grace, instant=instant, ticket=ticket
        )
        if shutdown.begun.is_set() and reply.get("ERROR") != _CUT:
            shutdown.answered += 1
        try:
            return serialize(reply)
        except ValueError:
            log.exception("reply to %s cannot be serialized", task.req)
            error = OpError(ErrorCode.INTERNAL_ERROR, "reply not serializable")
            return serialize(fail_reply(error, task.id))

    async def wait_slot(self) -> None:
        """Wait for an in-flight slot (L-4). The reader reads nothing meanwhile, so it would
        not see the peer hang up: on a socket, a watch for that runs beside the wait."""
        if not isinstance(self.stream, trio.SocketStream) or self.writer.peer_gone:
            await self.in_flight.acquire()
            return
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.watch_hangup, self.stream)
            await self.in_flight.acquire()
            nursery.cancel_scope.cancel()

    async def watch_hangup(self, stream: trio.SocketStream) -> None:
        await _wait_hangup(stream)
        self.hung_up()

    def hung_up(self) -> None:
        """The peer has gone (SPEC C-6): its replies are dropped from now on and, unless
        ``tasks.cancel_on_disconnect`` is false, its unfinished tasks are cancelled, and so
        is every task read after this (it was sent before the hang-up)."""
        if self.writer.peer_gone:
            return
        self.writer.peer_gone = True
        if not self.dispatcher.services.config.tasks.cancel_on_disconnect:
            return
        self.hangup_cancels = True
        cancelled = self.dispatcher.cancels.cancel_connection(self.peer.connection)
        if cancelled:
            log.info("connection %s hung up: %d tasks cancelled", self.peer.connection, cancelled)

    def touch(self) -> None:
        """A reply was written: the connection is active (the idle timeout counts from here)."""
        self.last_activity = trio.current_time()

    def pipelining(self) -> bool:
        """Whether a received frame waits for its start: its reply will soon join the queue."""
        return self.held is not None


def _peer_closed(stream: trio.abc.Stream) -> bool:
    """At EOF: whether the peer closed the socket both ways (POLLHUP on a Unix socket), not
    just its sending side (``shutdown(SHUT_WR)``, after which it still reads its replies).
    A stream that is not a socket (stdin) never hangs up this way: its EOF ends the input."""
    if not isinstance(stream, trio.SocketStream):
        return False
    poller = select.poll()
    poller.register(stream.socket.fileno(), 0)  # POLLHUP is reported whatever is asked
    return any(events & select.POLLHUP for _, events in poller.poll(0))


async def _wait_hangup(stream: trio.SocketStream) -> None:
    """Return once the peer has closed ``stream``'s socket both ways. An epoll set of its own
    watches the socket for that alone (EPOLLHUP and EPOLLERR are reported whatever is
    asked), so bytes waiting unread do not wake it, as they would trio's ``wait_readable``
    on the socket itself; the set's own descriptor is what trio waits on."""
    watch = select.epoll()
    try:
        watch.register(stream.socket.fileno(), 0)
        await trio.lowlevel.wait_readable(watch)
    finally:
        trio.lowlevel.notify_closing(watch)
        watch.close()
