"""The send side of one connection: replies queued in request order (SPEC C-2), written by a
writer task in batches, or by the reader itself when it finds one queued and no send going
(a lone reply then skips the writer's scheduler round), each within the write limit (SPEC L-7).

A reply not written within ``write_timeout_s`` of being queued cuts the connection: the
deadline runs from the queueing, so neither load nor a trickling reader can postpone it. A
peer that has gone (a write finds the socket broken) cuts nothing: the connection hears of
it (``on_hangup``) and the replies still to come are dropped, so the tasks in flight end as
the connection decides (SPEC C-6), each still audited.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from csp_web.config import ConnectionConfig
from csp_web.core.wire.reply_queue import ReplyOrder, ReplyQueue

log = logging.getLogger(__name__)


class ReplyWriter:
    """Writes one connection's replies to ``stream``. ``pipelining()`` says whether a frame
    waits for its start (its reply will soon join the queue); ``on_written`` runs after each
    write (a reply sent is activity). ``connection_scope``, set by the connection, is
    cancelled when a write fails or overruns the write limit."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        config: ConnectionConfig,
        connection: str,
        *,
        pipelining: Callable[[], bool],
        on_written: Callable[[], None],
        on_hangup: Callable[[], None],
    ) -> None:
        self.stream = stream
        self.connection = connection
        self.write_timeout_s = config.write_timeout_s
        self.pipelining = pipelining
        self.on_written = on_written
        self.on_hangup = on_hangup
        self.peer_gone = False  # set by the connection: nobody reads, replies are dropped
        self.replies = ReplyQueue(config.max_queued_replies)
        self.order = ReplyOrder()
        self.writing = False  # a send is in progress (the writer's or the reader's)
        self.writer_batch = False  # the writer holds a batch taken from the queue, unsent
        self.send_done = trio.lowlevel.ParkingLot()  # the writer waits here for the reader's send
        self.connection_scope: trio.CancelScope | None = None
        self.send_scope: trio.CancelScope | None = None  # the reader's own send, shielded

    def queue(self, slot: int | None, data: bytes, *, wake: bool = True) -> None:
        """Queue ``data`` for ``slot``; ``wake=False``: the caller (the reader) sends it
        itself before it next waits (``send_at_once``), so the writer takes no round."""
        # One queue entry per completion keeps ordered chunks from interleaving.
        ready = self.order.complete(slot, data)
        if ready:
            self.replies.put(ready, wake=wake)

    async def send(self, slot: int | None, data: bytes) -> None:
        self.queue(slot, data)
        await self.replies.wait_room()  # back-pressure; the reply itself is already queued

    async def send_at_once(self) -> bool:
        """Before waiting for bytes, the reader writes what is queued itself when no send is
        in progress or taken (a lone instant reply then skips the writer's scheduler round);
        False when the write limit (L-7) cut the connection. The send is shielded from the
        reader's own cancellation (a half-written frame would corrupt the stream) and bounded
        by the same write limit as the writer's; a cancellation of the whole connection still
        ends it (the writer, cancelled with it, cancels ``send_scope``)."""
        if not len(self.replies) or self.writing or self.writer_batch:
            return True
        queued_at, writes = self.replies.take_now()
        sent = False
        with trio.CancelScope(shield=True) as self.send_scope:
            sent = await self.write(queued_at, writes)
        self.send_scope = None
        self.send_done.unpark_all()
        return sent

    async def write(self, queued_at: float, writes: list[bytes]) -> bool:
        """Send ``writes`` in order by ``queued_at`` + the write limit (L-7), else cut the
        connection; drop them when the peer has gone."""
        if self.peer_gone:
            return True
        self.writing = True
        try:
            with trio.fail_at(queued_at + self.write_timeout_s):
                for data in writes:
                    await self.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            log.info("connection %s: the peer has gone; replies dropped", self.connection)
            self.on_hangup()
            return True
        except trio.TooSlowError:
            log.warning("connection %s: peer not reading, closing", self.connection)
            assert self.connection_scope is not None
            self.connection_scope.cancel()
            return False
        finally:
            self.writing = False
        self.on_written()
        return True

    async def write_replies(self) -> None:
        """Send queued replies, batching what is ready (while the reader holds a frame waiting
        for its start, one scheduler round longer, so its next replies join the write). A
        batch taken while the reader is sending waits for that send."""
        try:
            while (batch := await self.replies.take(linger=self.pipelining)) is not None:
                self.writer_batch = True
                try:
                    while self.writing:
                        await self.send_done.park()
                    if not await self.write(*batch):
                        return
                finally:
                    self.writer_batch = False
        finally:
            if self.send_scope is not None:  # the connection is ending: so does the reader's send
                self.send_scope.cancel()
