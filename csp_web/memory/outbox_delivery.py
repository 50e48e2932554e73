"""Delivery of outbox writes to the Memory Specialist: in order, pipelined, forgotten on ACK.

``serve`` connects over the link and keeps up to ``outbox.delivery_window`` batches of
``memory.batch_size`` in flight (while one is, the next goes when it is full: Nagle's rule;
while none is, a partial batch lingers ``outbox.linger_s`` for more), reconnecting with
exponential backoff. A write leaves the store only when its ACK (``STATUS OK`` with the same
ID) arrives; a ``FAIL`` moves it to the ``rejected`` table, so one bad write cannot block the
queue forever.
"""

from __future__ import annotations

import logging
import sqlite3

import trio

from csp_web.client.trio_client import Client, ClientClosed, PendingBatch
from csp_web.config import MemoryConfig, OutboxConfig
from csp_web.core.api.records import MemoryWrite
from csp_web.core.api.storage import is_storage_full
from csp_web.memory.link import MemoryLink
from csp_web.memory.outbox_commits import GroupCommit
from csp_web.memory.outbox_frames import batch_frames, sort_replies
from csp_web.memory.outbox_room import OutboxRoom
from csp_web.memory.outbox_store import OutboxStore

log = logging.getLogger(__name__)


class Delivery:
    """Sends the stored writes of ``store`` over ``link`` and settles them by their answers."""

    def __init__(
        self,
        store: OutboxStore,
        room: OutboxRoom,
        commits: GroupCommit,
        config: OutboxConfig,
        memory: MemoryConfig,
    ) -> None:
        self._store = store
        self._room = room
        self._commits = commits
        self._config = config
        self._memory = memory
        self.attempted = trio.Event()  # set once delivery has tried to connect
        self.delivered = 0
        self.rejected = 0
        self._sent_upto = 0  # highest seq sent on the current connection
        self._backoff_s = memory.backoff_initial_s

    async def serve(self, link: MemoryLink | None) -> None:
        """Deliver pending writes to the Memory Specialist until cancelled."""
        if link is None:
            log.info("no Memory Specialist: writes wait in the outbox")
            self.attempted.set()
            await trio.sleep_forever()
        self._backoff_s = self._memory.backoff_initial_s
        while True:
            try:
                await self._connect_and_deliver(link)
            except* (OSError, ClientClosed, trio.TooSlowError) as group:
                log.info(
                    "memory specialist unreachable (%s); retry in %.1fs",
                    "; ".join(map(str, group.exceptions)),
                    self._backoff_s,
                )
            except* sqlite3.Error as group:
                # Disk full or locked: unsettled writes are simply sent again later (their IDs
                # make that harmless, SPEC M-2); the daemon must not go down with delivery.
                if all(map(is_storage_full, group.exceptions)):  # a condition: no traceback
                    log.warning("outbox: disk full while settling; retry in %.1fs", self._backoff_s)
                else:
                    log.exception("outbox store error in delivery; retry in %.1fs", self._backoff_s)
            await trio.sleep(self._backoff_s)
            self._backoff_s = min(self._backoff_s * 2, self._memory.backoff_max_s)

    async def _connect_and_deliver(self, link: MemoryLink) -> None:
        try:
            async with link.open_client(id_prefix="o") as client:
                self._connected(True)
                self._backoff_s = self._memory.backoff_initial_s
                await self._deliver_forever(client)
        finally:
            self._connected(False)

    def _connected(self, connected: bool) -> None:
        self.attempted.set()
        self._room.set_connected(connected)

    async def _deliver_forever(self, client: Client) -> None:
        """Keep up to ``outbox.delivery_window`` batches in flight on ``client``, oldest first.
        This loop sends every batch itself (so they go on the wire in order); a task per batch
        waits for its replies and settles it."""
        self._sent_upto = 0
        window = trio.Semaphore(self._config.delivery_window)
        async with trio.open_nursery() as nursery:
            while True:
                try:  # a slot free now costs no scheduler pass
                    window.acquire_nowait()
                except trio.WouldBlock:
                    await window.acquire()
                # Nagle's rule: while a batch is on its way, the next one goes once it is full
                # (or the one in flight is settled), so under load batches grow instead of one
                # round trip, transaction and wake-up per scheduler round.
                while (
                    self._room.in_flight
                    and self._room.depth - self._room.in_flight < self._memory.batch_size
                ):
                    await self._commits.wait_new_rows()
                await self._linger()
                # On the reader connection, on the event loop: beside the producers' commits
                # (WAL), never behind their fsyncs, no thread hop (outbox_store.py).
                rows = self._store.after(self._sent_upto, self._memory.batch_size)
                if not rows:
                    window.release()
                    await self._commits.wait_new_rows()
                    continue
                self._sent_upto = rows[-1][0]
                # The batch is one buffer and one waiter (not a Task, bytes and Event per write).
                ids, data = batch_frames(rows)
                try:
                    batch = await client.start_batch(ids, data)
                except BaseException:
                    window.release()
                    raise
                self._room.in_flight += len(rows)
                nursery.start_soon(self._settle_batch, batch, rows, window)

    async def _linger(self) -> None:
        """With nothing in flight and a partial batch unsent, wait up to ``linger_s`` for it
        to fill (Kafka's ``linger.ms``): one op at a time otherwise sends, stores, ACKs and
        settles a batch of one write per op."""
        unsent = self._room.depth - self._room.in_flight
        if self._room.in_flight or not 0 < unsent < self._memory.batch_size:
            return
        with trio.move_on_after(self._config.linger_s):
            while self._room.depth - self._room.in_flight < self._memory.batch_size:
                await self._commits.wait_new_rows()

    async def _settle_batch(
        self, batch: PendingBatch, rows: list[tuple[int, MemoryWrite]], window: trio.Semaphore
    ) -> None:
        unsettled = len(rows)
        try:
            replies = await batch.replies(timeout_s=self._memory.ack_timeout_s)
            acked, rejected, retry = sort_replies(rows, replies)
            await self._commits.db_nowait(self._store.settle, acked, rejected)
            settled = [w for seq, w in rows if seq not in retry]
            unsettled -= len(settled)
            self._settled(settled, len(acked), len(rejected))
            if retry:  # the Memory Specialist is busy or stopping: same writes again later
                raise ClientClosed(f"{len(retry)} writes refused for now; retrying")
        finally:
            self._room.in_flight -= unsettled
            self._commits.note_new_rows()  # the delivery loop may be holding a partial batch back
            window.release()

    def _settled(self, writes: list[MemoryWrite], acked: int, rejected: int) -> None:
        self._room.remove(writes)  # every write not to retry was acked or rejected
        self._room.in_flight -= len(writes)
        self._room.grant(len(writes))  # as many ops waiting for a turn may start (SPEC O-5)
        self.delivered += acked
        self.rejected += rejected
        if rejected:
            log.error("memory specialist rejected %d writes; kept in outbox.rejected", rejected)
        if not (self._room.full or self._room.storage_full) and (
            summary := self._room.take_folded()
        ):
            self._commits.add_now(summary)
        self._room.wake()
