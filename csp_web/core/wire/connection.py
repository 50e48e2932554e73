"""The daemon's connections: a ``StreamHandler`` for the one read loop (``core.stream``).

stdin/stdout and every Unix-socket connection are ``trio.abc.Stream``s served by
``serve_connection``: the reader (``stream.serve_stream`` with this module's ``_Session``)
turns each frame into a task, or answers an instant op at once (``Dispatcher.try_now``); a
writer task sends replies in order (``reply_writer``). Budgets (SPEC L-4 to L-8): tasks in
flight per connection (back-pressure), a deadline to finish a started frame (slowloris), an
idle timeout, a bounded reply queue whose oldest reply must be written within the write limit,
a malformed-frame budget and an empty-line budget. Every frame start is admitted by the
daemon-wide ``FairStarts`` (SPEC L-10): a bounded number per scheduler round, round-robin
across connections, a new connection first, so busy connections cannot hold the scheduler
while a fresh one waits.

At shutdown every task still gets exactly one reply (SPEC R-1): a frame already received but not
started (held by the in-flight cap, or still in the codec's buffer) is answered
``shutting_down`` at once; one still running when the grace period ends is cancelled and
answered ``shutting_down``; then the connection closes.

Each task the connection receives holds a ticket (``core.cancels``) from its frame until its
work ends, so ``REQ:cancel`` can end it; when the peer hangs up (EOF with the socket closed
both ways, or a reply that cannot be written), its unfinished tasks are cancelled, and so is
every task read after (``tasks.cancel_on_disconnect``); their replies, audited as any other,
are dropped.
"""

from __future__ import annotations

import enum
import logging
import math
import select
from dataclasses import dataclass

import trio

from csp_web.config import ConnectionConfig
from csp_web.core.api.context import Peer
from csp_web.core.api.deadlines import CUT_DETAIL
from csp_web.core.api.errors import OpError
from csp_web.core.api.replies import fail_reply
from csp_web.core.dispatch.cancels import Ticket
from csp_web.core.dispatch.dispatcher import Dispatcher, Now
from csp_web.core.transports.unix import Lease
from csp_web.core.wire.reply_writer import ReplyWriter
from csp_web.core.wire.shutdown import Shutdown
from csp_web.core.wire.stream import StreamHandler, serve_stream
from csp_web.core.wire.turns import FairStarts, Seat
from protocol import (
    Connection,
    ErrorCode,
    Limits,
    ProtocolError,
    Reply,
    Task,
    serialize,
)

__all__ = ["Shutdown", "State", "StreamOptions", "serve_connection"]  # Shutdown: core.shutdown

log = logging.getLogger(__name__)
_CUT = OpError(ErrorCode.SHUTTING_DOWN, CUT_DETAIL).wire_text  # work the grace period ended


@dataclass(frozen=True)
class StreamOptions:
    """How one transport is served; ``idle_timeout_s`` None means never idle out (stdin)."""

    config: ConnectionConfig
    idle_timeout_s: float | None
    sequential: bool = False  # run frames one at a time (a Memory Specialist keeps write order)


class State(enum.Enum):
    """Where a connection's reader is. Eviction and the idle clock look at it; a peer that
    hung up is the writer's (``peer_gone``) and the tickets' (``Cancels``) to know."""

    HANDLING = "handling"  # turning the frames read into tasks (``held``: one waits to start)
    READING = "reading"  # waiting for bytes: the only state that may idle out or be evicted
    EVICTED = "evicted"  # evicted (a cap, a revoked uid): the frames read still run, no more
    CLOSING = "closing"  # reads nothing more: its tasks finish and the writer drains


async def serve_connection(
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
        dispatcher.cancels.forget(peer.connection)
        dispatcher.connection_closed(peer)
        await trio.aclose_forcefully(stream)
        log.debug("connection %s closed", peer.connection)


class _Session(StreamHandler):
    """One connection: the reader's handler, its writer and its budgets."""

    tasks: trio.Nursery  # the frames' tasks, open while the reader runs

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
        self.state = State.HANDLING
        self.last_activity = trio.current_time()  # the idle clock (L-5)
        self.held: Task | None = None  # parsed, waiting for an in-flight place or its turn
        self.receive_scope: trio.CancelScope | None = None  # the wait for bytes, while READING

    def enter(self, state: State) -> None:
        """Move the reader to ``state``; an evicted reader stays so until it closes."""
        if self.state is not State.EVICTED or state is State.CLOSING:
            self.state = state

    def idle_since(self) -> float | None:
        """When the connection last did anything, or None while it has anything to do."""
        idle = (
            self.state is State.READING
            and not self.writer.writing
            and not len(self.writer.replies)
            and self.in_flight.value == self.options.config.max_in_flight
            and not self.codec.in_frame
        )
        return self.last_activity if idle else None

    def evict(self) -> None:
        """Close the connection once it waits for bytes (now, if it does): nothing read is
        lost, the frames read run to their replies."""
        reading = self.state is State.READING
        self.enter(State.EVICTED)
        if reading and self.receive_scope is not None:
            self.receive_scope.cancel()

    async def run(self) -> None:
        async with trio.open_nursery() as outer:
            self.writer.connection_scope = outer.cancel_scope
            outer.start_soon(self.writer.write_replies)
            async with trio.open_nursery() as self.tasks:
                try:
                    with self.shutdown.reader_scope():
                        await serve_stream(self.stream, self.codec, self)
                finally:
                    self.writer.replies.wake()  # what the reader queued and did not send
                self.enter(State.CLOSING)
                if self.shutdown.begun.is_set():
                    self.refuse_received()
            self.writer.replies.close()

    # --- the read loop's handler (``core.stream.StreamHandler``)

    def reading(self, scope: trio.CancelScope | None) -> None:
        self.receive_scope = scope
        if scope is None:
            self.enter(State.HANDLING)
        elif self.state is State.EVICTED:
            scope.cancel()
        else:
            self.enter(State.READING)

    def on_eof(self, *, reset: bool) -> None:
        # Reset by the peer, or closed both ways: nobody reads the replies either.
        if reset or _peer_closed(self.stream):
            self.hung_up()

    def read_deadline(self, frame_started: float | None) -> float:
        config = self.options.config
        if self.codec.in_frame:
            started = frame_started if frame_started is not None else trio.current_time()
            return started + config.frame_deadline_s
        idle = self.options.idle_timeout_s
        if idle is None:
            return math.inf
        # Idle counts from the last frame either way (a reply just sent is activity, empty lines
        # are not); while work in flight keeps a quiet connection open, look again later.
        deadline = self.last_activity + idle
        now = trio.current_time()
        nothing_in_flight = self.in_flight.value == config.max_in_flight
        return deadline if deadline > now or nothing_in_flight else now + idle

    async def on_read_deadline(self, in_frame: bool) -> bool:
        config = self.options.config
        if self.state is State.EVICTED:
            log.info("connection %s idle at a connection cap, evicted", self.peer.connection)
            return False
        if in_frame:
            self.dispatcher.stats.reject(ErrorCode.FRAME_TIMEOUT)
            detail = f"frame not completed within {config.frame_deadline_s:g}s"
            await self.emit_error(ErrorCode.FRAME_TIMEOUT, detail, None)
            return False
        idle = self.options.idle_timeout_s
        quiet_since = trio.current_time() - self.last_activity
        if self.in_flight.value == config.max_in_flight and quiet_since >= (idle or math.inf):
            log.info("connection %s idle, closing", self.peer.connection)
            return False
        return True

    async def on_bad_frame(self, error: ProtocolError) -> bool:
        return await self.count_bad_frame(error.code, error.detail, error.frame_id)

    async def on_reply(self, reply: Reply) -> bool:
        self.last_activity = trio.current_time()
        return await self.count_bad_frame(ErrorCode.BAD_HEADER, "expected a TASK frame", reply.id)

    async def on_task(self, task: Task) -> bool:
        self.last_activity = trio.current_time()
        self.held = task  # answered shutting_down if the daemon stops before it starts
        route = None if self.options.sequential else self.dispatcher.answers_now(task, self.peer)
        if not (route is not None and await self.answer_now(task, route)):
            await self.start_task(task)
        return True

    async def on_drained(self, reading: bool) -> bool:
        if not reading:
            return False
        if self.codec.in_frame:
            self.last_activity = trio.current_time()
        # The reader sends what is queued itself: a lone reply skips the writer's scheduler
        # round (bench/daemon.py --quick, 1-client ping p50 0.44 to 0.82 ms with it, 0.68 to
        # 1.37 ms without, three and two runs; CPU per pipelined frame 110 us either way).
        return await self.writer.send_at_once()

    # --- starting frames

    async def answer_now(self, task: Task, route: Now) -> bool:
        """Answer ``task`` in the reader when it is an instant op, an op's hot answer (a
        cache hit, dispatch/hot.py), or refused ``busy`` as its specialist's pool is full
        (``Dispatcher.try_now``):
        it takes neither an in-flight place nor a running one, so slow work filling both
        never holds it back (issue 21), and a task of its own would cost more than the op
        (bench/daemon.py --quick, pipelined pings: 115 us of daemon CPU per frame answered
        here, 195 us as tasks; 1-client ping p50 0.8 ms against 3.8 ms; one loaded 2-core
        host, issue 23). It still takes its turn (L-10). False: start a task of its own.
        Only a task ``Dispatcher.answers_now`` names a route for comes here (``on_task``)."""
        # A hot frame is cancellable while it waits for its turn, as a task is (C-6): if it
        # was, its task answers it ``cancelled``, exactly as the task route does.
        ticket = self.dispatcher.cancels.open(self.peer, task.id) if route is Now.HOT else None
        try:
            if not self.starts.start_now(self.seat, instant=True):
                await self.wait_turn(instant=True)  # a turn, no running place
        except BaseException:
            if ticket is not None:
                ticket.close()
            raise
        if ticket is not None:
            if ticket.cancelled:  # by REQ:cancel, or its peer hung up
                await self.start_task(task, ticket)
                return True
            ticket.close()  # no checkpoint from here until its work ends
        reply = await self.dispatcher.try_now(task, self.peer, route)
        if reply is None:  # the sys pool filled or pacing began meanwhile: it waits like any
            return False
        self.held = None
        # The reader sends its own replies before it next waits (``flush``): waking the
        # writer for each cost two more task steps per reply behind busy connections
        # (bench/fairness.py --only busy --pauses: write_replies 42,801 steps for ~20k pongs).
        slot = self.writer.order.reserve(task.id)
        self.writer.queue(slot, self.encode(task, reply), wake=False)
        if self.writer.replies.full:  # back-pressure, once its reply is queued
            await self.flush()
            await self.writer.replies.wait_room()
        return True

    async def wait_turn(self, *, instant: bool = False) -> None:
        """This connection's turn to start a frame (L-10), replies queued sent first if it
        must wait past the next round for it. A wait of one round (the round's budget
        spent, nobody else waiting) keeps them queued for the read's one send: sending at
        each round's end sent a pipelining connection's replies eight at a time (20 % of
        the daemon's samples, bench/daemon.py --quick under py-spy, issue 26)."""
        if self.starts.waits_long(instant=instant):
            await self.flush()
        await self.starts.wait_start(self.seat, instant=instant)

    async def flush(self) -> None:
        """Send the replies the reader queued without waking the writer, before it waits;
        a send under way (the writer's) takes them after its own."""
        await self.writer.send_at_once()

    async def start_task(self, task: Task, ticket: Ticket | None = None) -> None:
        """Start ``task`` as a task of its own once it has an in-flight place (L-4) and its
        turn (L-10); ``sequential``: run it here. ``ticket``: its cancel ticket, opened
        already (``answer_now``'s)."""
        # IN:SYS ops never wait for work, so there is nothing to cancel (and a REQ:cancel
        # naming its own ID cannot cancel itself). A ticket opened after the peer hung up
        # is cancelled at once (``Cancels.open``).
        if ticket is None and task.domain != "SYS":
            ticket = self.dispatcher.cancels.open(self.peer, task.id)
        try:
            # Wait only at the cap: every frame through wait_slot (a checkpoint and the
            # hang-up watch) cost 651 us of daemon CPU per pipelined frame against 195 us
            # (bench/daemon.py --quick with pings run as tasks, issue 23).
            try:
                self.in_flight.acquire_nowait()
            except trio.WouldBlock:
                await self.flush()
                await self.wait_slot()  # back-pressure: stop reading (L-4)
            try:
                await self.wait_turn()  # this connection's turn (L-10)
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
            self.tasks.start_soon(self.run_task, task, slot, ticket)

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
                reply = await self.dispatcher.run(
                    task, self.peer, grace=self.shutdown.grace, ticket=ticket
                )
            finally:
                self.starts.done()
            await self.writer.send(slot, self.encode(task, reply))
        finally:
            self.in_flight.release()

    def encode(self, task: Task, reply: Reply) -> bytes:
        """``reply`` to ``task`` as bytes, counted as answered once shutdown began (unless
        the grace period cut its work); ``internal_error`` if it cannot be serialized."""
        shutdown = self.shutdown
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
