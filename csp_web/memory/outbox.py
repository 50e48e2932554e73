"""The durable memory outbox: persist every write, deliver in order, forget only on ACK.

``put`` returns once the write is committed to SQLite (WAL). Writes made in the same scheduler
tick share one commit (group commit, as databases batch fsyncs): the first writer to resume
commits them all, so a busy daemon pays one transaction per tick, not per write, and a lone
writer pays no hop to another task. Delivery (``serve``) sends pending writes to the Memory
Specialist in order, pipelined (``outbox.delivery_window`` batches of ``memory.batch_size`` in
flight; while one is, the next goes when it is full: Nagle's rule), reconnecting with
exponential backoff; a write leaves the store only when its ACK (``STATUS OK`` with the same
ID) arrives. A ``FAIL`` answer moves the write to a ``rejected`` table, kept locally and
counted, so one bad write cannot block the queue forever.

Room (SPEC O-1, O-2): an op that will log first waits in ``wait_room`` while the outbox is at
``max_pending`` (or ``max_bytes``), or its caller holds its share (``max_pending_per_peer``,
``max_bytes_per_peer``) — back-pressure, bounded by the task's deadline; it is refused with
``outbox_full`` only when that deadline passes or no Memory Specialist is connected to make
room. Writes of ops already admitted may use ``reserve`` more. Audit records of IN:SYS ops and
of refused frames never use the reserve: past ``max_pending`` they are folded into one summary
record (counts per op and error), written as soon as there is room again or at close.

Turns (SPEC O-5): delivery shares the event loop with the ops that write. While a whole window
of writes waits unsent, ``wait_room`` first takes a turn, one per write delivery settled, so
a flood of ops runs at the rate its writes are delivered instead of starving delivery.

``Outbox`` puts these parts together and exposes the two the core reads: ``room``
(outbox_room.py: limits, shares, turns, folding) and ``delivery`` (outbox_delivery.py:
connect, window, backoff, ACKs, its counts); the group commit (outbox_commits.py) and the
store (outbox_store.py) stay its own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import trio

from csp_web.client.trio_client import ClientClosed
from csp_web.config import MemoryConfig, OutboxConfig
from csp_web.core.api.errors import OpError
from csp_web.core.api.records import MemoryWrite
from csp_web.memory.link import MemoryLink, socket_link
from csp_web.memory.outbox_commits import GroupCommit
from csp_web.memory.outbox_delivery import Delivery
from csp_web.memory.outbox_room import OutboxRoom, write_size
from csp_web.memory.outbox_store import OutboxStore
from protocol import ErrorCode, Reply, Task


class Outbox:
    """Pending memory writes; made by ``open_outbox``, which owns the store.

    Its parts are public, each the one place for its concern: ``room`` (``OutboxRoom``:
    what is pending, the limits and each peer's share, turns, folded records, SPEC O-1..O-5)
    and ``delivery`` (``Delivery``: what was delivered or rejected). The outbox itself holds
    what needs more than one part: a write persisted (room, then the group commit), room
    waited for with the disk probed (SPEC O-6), the flush at exit, reads and writes the Memory
    Specialist answers (``call_memory``).
    """

    def __init__(
        self,
        store: OutboxStore,
        config: OutboxConfig,
        memory: MemoryConfig,
        *,
        link: MemoryLink | None = None,
    ) -> None:
        self._store = store
        self._link = link
        turn_at = config.delivery_window * memory.batch_size  # a whole window unsent (O-5)
        self.room = OutboxRoom(config, *store.totals(), turn_at=turn_at)
        self.room.set_storage_full(not store.ready)  # opened on a full disk (SPEC O-6)
        self._commits = GroupCommit(store, self.room, inline=config.synchronous == "normal")
        self.delivery = Delivery(store, self.room, self._commits, config, memory)

    async def wait_room(self, owner: str) -> None:
        """Return once an op of ``owner`` may start: it has had its turn while delivery is
        behind (SPEC O-5), the outbox is below its limits and ``owner`` below its share.
        Waits while delivery is connected (back-pressure; the caller bounds the wait with its
        deadline); raises OpError(outbox_full) at once when no Memory Specialist is connected,
        as then nothing would make room. Raises StorageFull("outbox") while the disk is full
        (SPEC O-6): its space is probed, so the first op after it returned runs."""
        if not self._space_returned():
            raise self.room.refuse_storage_full()
        await self.room.wait_room(owner)

    def has_room_now(self, owner: str) -> bool:
        """Whether ``wait_room(owner)`` would return at once, without a probe of the disk:
        delivery is not behind (O-5), the outbox and ``owner``'s share have room (O-1, O-2)
        and its disk is not marked full (O-6)."""
        room = self.room
        return not (room.storage_full or room.behind or room.full or room.peer_full(owner))

    async def put(
        self, write: MemoryWrite, *, use_reserve: bool = True, owner: str | None = None
    ) -> None:
        """Persist ``write``; returns once it is committed. Raises OpError(outbox_full), or
        StorageFull("outbox") when the disk is full (nothing of ``write`` kept).

        Only writes of ops already admitted may use the reserve past ``max_pending``; audit
        records of refused frames and of IN:SYS ops go through ``put_or_fold`` instead.
        ``owner`` (the peer's connection) counts the write against that peer's share.
        """
        size = write_size(write)
        self.room.admit(write, size, use_reserve=use_reserve)
        await self._commits.persist(write, size, owner)

    async def put_or_fold(
        self, write: MemoryWrite, key: str | Mapping[str, int], *, owner: str | None = None
    ) -> None:
        """Persist ``write`` while the outbox is below ``max_pending``; past it, count it under
        ``key`` in one summary record instead (SPEC O-3). Never raises outbox_full. ``key`` may
        be counts per key: what a summary of several frames (SPEC O-4) stands for. A write
        whose commit fails (a full disk: SPEC O-6) is folded too: this never raises."""
        size = write_size(write)
        self._space_returned()
        if not self.room.fold(key, size):
            try:
                await self._commits.persist(write, size, owner)
            except OpError:
                self.room.count_folded(key)

    def put_or_fold_nowait(
        self, write: MemoryWrite, key: str | Mapping[str, int], *, owner: str | None = None
    ) -> None:
        """``put_or_fold`` without waiting for the commit: the write joins the commit being
        gathered, committed after one scheduler pass (``synchronous: normal``) or by the
        committer, so the summaries of many connections closing at once share one transaction.
        For summaries written at a connection's close or by a timer: no reply waits for them."""
        size = write_size(write)
        self._space_returned()
        if not self.room.fold(key, size):
            self._commits.add_nowait(write, size, owner)

    def _space_returned(self) -> bool:
        """False while the outbox's disk is full; while it is marked so, its space is probed
        (a small write beside the store: SPEC O-6), and found again clears the mark."""
        if self.room.storage_full and self._store.has_room():
            self.room.set_storage_full(False)
        return not self.room.storage_full

    async def call_memory(self, task: Task, *, timeout_s: float) -> Reply:
        """The Memory Specialist's reply to one ``task`` (a read, or a write that must be
        stored before the op answers) on a connection of its own, beside delivery (SPEC M-8).
        Raises OpError(memory_unavailable) when none is configured or reachable, or no reply
        comes within ``timeout_s`` (connecting included)."""
        if self._link is None:
            raise OpError(ErrorCode.MEMORY_UNAVAILABLE, "no Memory Specialist configured")
        try:
            with trio.fail_after(timeout_s):
                async with self._link.open_client(id_prefix="c") as client:
                    return await client.call(task, timeout_s=timeout_s)
        except (OSError, ClientClosed, trio.TooSlowError) as exc:
            detail = f"{type(exc).__name__} at {self._link.name}"
            raise OpError(ErrorCode.MEMORY_UNAVAILABLE, detail) from exc

    async def wait_drained(self) -> None:
        """Return once every pending write has been delivered (or rejected)."""
        if self.room.depth:
            await self.room.drained.wait()

    async def wait_flushed(self) -> None:
        """At exit: return once every pending write is delivered, or at once when delivery is
        not connected after its first attempt (what is left stays on disk for the next start).
        The caller bounds it (the daemon: with what is left of its grace period)."""
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:

                async def unreachable() -> None:
                    await self.delivery.attempted.wait()
                    while self.room.connected:
                        await self.room.wait_changed()
                    scope.cancel()

                nursery.start_soon(unreachable)
                await self.wait_drained()
                scope.cancel()

    async def serve(self) -> None:
        """Run the committer (a worker thread's commits, ``synchronous: full``) and delivery
        to the Memory Specialist until cancelled."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._commits.serve)
            nursery.start_soon(self.delivery.serve, self._link)

    def write_folded_now(self) -> None:
        """At close: store what is still folded, and writes not yet committed (blocking; the
        outbox is no longer served)."""
        if summary := self.room.take_folded():
            self._commits.add_now(summary)
        self._commits.commit_rest()


@asynccontextmanager
async def open_outbox(
    path: str, config: OutboxConfig, memory: MemoryConfig, *, link: MemoryLink | None = None
) -> AsyncIterator[Outbox]:
    """Open (creating if needed) the outbox at ``path`` and run its committer and delivery.

    Delivery goes over ``link``, by default to ``memory.socket_path``; with neither, writes
    wait. Pending writes from an earlier run are delivered first. The store is closed on exit;
    what was not delivered stays in it for the next start, with a summary of folded records.
    """
    store = await trio.to_thread.run_sync(OutboxStore, path, config.synchronous)
    try:
        outbox = Outbox(store, config, memory, link=link or socket_link(memory))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(outbox.serve)
            yield outbox
            nursery.cancel_scope.cancel()
        outbox.write_folded_now()
    finally:
        await trio.to_thread.run_sync(store.close)
