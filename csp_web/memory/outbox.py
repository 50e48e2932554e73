"""The durable memory outbox: persist every write, deliver in order, forget only on ACK.

``put`` returns once the write is committed to SQLite (WAL). Writes made in the same scheduler
tick share one commit (group commit, as databases batch fsyncs): the first writer to resume
commits them all, so a busy daemon pays one transaction per tick, not per write, and a lone
writer pays no hop to another task. ``serve_delivery`` sends pending writes to the Memory
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

``Outbox`` is a facade over ``outbox_room`` (limits, shares, folding), ``outbox_commits``
(group commit) and ``outbox_delivery`` (connect, window, backoff, ACKs).
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

    A facade over three parts: ``OutboxRoom`` (limits, shares, folding: outbox_room.py),
    ``GroupCommit`` (outbox_commits.py) and ``Delivery`` (outbox_delivery.py).
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
        self._room = OutboxRoom(config, *store.totals(), turn_at=turn_at)
        self._room.set_storage_full(not store.ready)  # opened on a full disk (SPEC O-6)
        self._commits = GroupCommit(store, self._room, inline=config.synchronous == "normal")
        self._delivery = Delivery(store, self._room, self._commits, config, memory)

    @property
    def depth(self) -> int:
        """Writes pending (persisted, not yet acknowledged or rejected)."""
        return self._room.depth

    @property
    def bytes(self) -> int:
        return self._room.bytes

    @property
    def refused(self) -> int:
        return self._room.refused

    @property
    def folded(self) -> int:
        return self._room.folded

    @property
    def connected(self) -> bool:
        return self._room.connected

    @property
    def waiting(self) -> int:
        """Ops waiting for their turn while delivery is behind (SPEC O-5)."""
        return self._room.waiting_turns

    @property
    def delivered(self) -> int:
        return self._delivery.delivered

    @property
    def rejected(self) -> int:
        return self._delivery.rejected

    @property
    def full(self) -> bool:
        """Whether new ops must wait for room (SPEC O-1)."""
        return self._room.full

    @property
    def storage_full(self) -> bool:
        """Whether the outbox's disk was full at its last commit (SPEC O-6)."""
        return self._room.storage_full

    def peer_full(self, owner: str) -> bool:
        """Whether ``owner`` holds its whole share of pending writes (SPEC O-2)."""
        return self._room.peer_full(owner)

    async def wait_room(self, owner: str) -> None:
        """Return once an op of ``owner`` may start: it has had its turn while delivery is
        behind (SPEC O-5), the outbox is below its limits and ``owner`` below its share.
        Waits while delivery is connected (back-pressure; the caller bounds the wait with its
        deadline); raises OpError(outbox_full) at once when no Memory Specialist is connected,
        as then nothing would make room. Raises StorageFull("outbox") while the disk is full
        (SPEC O-6): its space is probed, so the first op after it returned runs."""
        if not self._space_returned():
            raise self._room.refuse_storage_full()
        await self._room.wait_room(owner)

    async def wait_paced(self, owner: str) -> bool:
        """Wait while the outbox (or ``owner``'s share) is full and a Memory Specialist is
        draining it; True once there is room, False when nothing drains. IN:SYS ops are paced
        this way (SPEC O-3) so that a flood of them runs at the rate delivery keeps up with."""
        return await self._room.wait_paced(owner)

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
        self._room.admit(write, size, use_reserve=use_reserve)
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
        if not self._room.fold(key, size):
            try:
                await self._commits.persist(write, size, owner)
            except OpError:
                self._room.count_folded(key)

    def put_or_fold_nowait(
        self, write: MemoryWrite, key: str | Mapping[str, int], *, owner: str | None = None
    ) -> None:
        """``put_or_fold`` without waiting for the commit: the write joins the commit being
        gathered, committed after one scheduler pass (``synchronous: normal``) or by the
        committer, so the summaries of many connections closing at once share one transaction.
        For summaries written at a connection's close or by a timer: no reply waits for them."""
        size = write_size(write)
        self._space_returned()
        if not self._room.fold(key, size):
            self._commits.add_nowait(write, size, owner)

    def _space_returned(self) -> bool:
        """False while the outbox's disk is full; while it is marked so, its space is probed
        (a small write beside the store: SPEC O-6), and found again clears the mark."""
        if self._room.storage_full and self._store.has_room():
            self._room.set_storage_full(False)
        return not self._room.storage_full

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
        if self.depth:
            await self._room.drained.wait()

    async def wait_changed(self) -> None:
        """Return at the next settled batch, freeing of room or change of delivery's
        connection; a waiter re-checks its condition (``connected``, ``delivered``) after."""
        await self._room.wait_changed()

    async def wait_flushed(self) -> None:
        """At exit: return once every pending write is delivered, or at once when delivery is
        not connected after its first attempt (what is left stays on disk for the next start).
        The caller bounds it (the daemon: with what is left of its grace period)."""
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:

                async def unreachable() -> None:
                    await self._delivery.attempted.wait()
                    while self.connected:
                        await self.wait_changed()
                    scope.cancel()

                nursery.start_soon(unreachable)
                await self.wait_drained()
                scope.cancel()

    async def serve_committer(self) -> None:
        """Commit queued writes in a worker thread until cancelled (``synchronous: full``)."""
        await self._commits.serve()

    async def serve_delivery(self) -> None:
        """Deliver pending writes to the Memory Specialist until cancelled."""
        await self._delivery.serve(self._link)

    def write_folded_now(self) -> None:
        """At close: store what is still folded, and writes not yet committed (blocking; the
        outbox is no longer served)."""
        if summary := self._room.take_folded():
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
            nursery.start_soon(outbox.serve_committer)
            nursery.start_soon(outbox.serve_delivery)
            yield outbox
            nursery.cancel_scope.cancel()
        outbox.write_folded_now()
    finally:
        await trio.to_thread.run_sync(store.close)
