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
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import TypeVar

import trio

from csp_web.config import MemoryConfig, OutboxConfig
from csp_web.core.client import Client, ClientClosed, PendingBatch
from csp_web.core.errors import OpError
from csp_web.core.records import MemoryWrite, json_record, make_write
from csp_web.memory.link import MemoryLink, socket_link
from csp_web.memory.outbox_frames import batch_frames, sort_replies
from csp_web.memory.outbox_store import OutboxStore
from protocol import ErrorCode, Reply, Task

log = logging.getLogger("csp_web.memory.outbox")
T = TypeVar("T")
_MAX_FOLDED_KEYS = 256
_REFUSALS_LOGGED_EVERY_S = 10.0  # a full outbox may refuse thousands of writes a second


class _Commit:
    """Writes that will share one transaction; ``done`` is set once it ran (or failed)."""

    __slots__ = ("done", "error", "finished", "scheduled", "writes")

    def __init__(self) -> None:
        self.writes: list[MemoryWrite] = []
        self.finished = False
        self.scheduled = False  # a system task will commit it (put_or_fold_nowait)
        self.error: str | None = None
        self.done = trio.Event()


def _size(write: MemoryWrite) -> int:
    return len(write.data) + len(write.path)


class Outbox:
    """Pending memory writes; made by ``open_outbox``, which owns the store."""

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
        self._config = config
        self._memory = memory
        self._db_lock = trio.Lock()
        self._open: _Commit | None = None  # the commit new writes join
        self._batch_ready = trio.Event()
        self._new_rows = trio.Event()
        self._drained = trio.Event()
        self._room = trio.Event()  # set (and replaced) whenever delivery frees room
        self._attempted = trio.Event()  # set once delivery has tried to connect
        self._owners: dict[str, list[int]] = {}  # peer -> [writes, bytes] pending
        self._owner_of: dict[str, str] = {}  # write ID -> peer, for writes of this run
        self._folded: Counter[str] = Counter()
        self._folded_since = 0.0
        self._sent_upto = 0  # highest seq sent on the current connection
        self._in_flight_rows = 0  # writes sent and not yet settled
        self._backoff_s = memory.backoff_initial_s
        self.depth, self.bytes = store.totals()
        self.delivered = 0
        self.rejected = 0
        self.refused = 0
        self._refusal_logged_at: float | None = None
        self.folded = 0
        self.connected = False
        # Without fsync a WAL commit of a batch takes tens of microseconds: less than the
        # round trip to a worker thread, so it runs on the event loop. With fsync ("full")
        # it can take milliseconds and goes to a thread.
        self._inline_commits = config.synchronous == "normal"

    @property
    def full(self) -> bool:
        """Whether new ops must wait for room (SPEC O-1)."""
        return self.depth >= self._config.max_pending or self.bytes >= self._config.max_bytes

    def peer_full(self, owner: str) -> bool:
        """Whether ``owner`` holds its whole share of pending writes (SPEC O-2)."""
        held = self._owners.get(owner)
        return held is not None and (
            held[0] >= self._config.max_pending_per_peer
            or held[1] >= self._config.max_bytes_per_peer
        )

    async def wait_room(self, owner: str) -> None:
        """Return once an op of ``owner`` may start: the outbox is below its limits and
        ``owner`` below its share. Waits while delivery is connected (back-pressure; the
        caller bounds the wait with its deadline); raises OpError(outbox_full) at once when no
        Memory Specialist is connected, as then nothing would make room."""
        if not await self.wait_paced(owner):
            self.refused += 1
            which = "outbox" if self.full else "this peer's share of the outbox"
            raise OpError(ErrorCode.OUTBOX_FULL, f"{which} is full and not draining")

    async def wait_paced(self, owner: str) -> bool:
        """Wait while the outbox (or ``owner``'s share) is full and a Memory Specialist is
        draining it; True once there is room, False when nothing drains. IN:SYS ops are paced
        this way (SPEC O-3) so that a flood of them runs at the rate delivery keeps up with."""
        while self.full or self.peer_full(owner):
            if not self.connected:
                return False
            await self._room.wait()
        return True

    async def put(
        self, write: MemoryWrite, *, use_reserve: bool = True, owner: str | None = None
    ) -> None:
        """Persist ``write``; returns once it is committed. Raises OpError(outbox_full).

        Only writes of ops already admitted may use the reserve past ``max_pending``; audit
        records of refused frames and of IN:SYS ops go through ``put_or_fold`` instead.
        ``owner`` (the peer's connection) counts the write against that peer's share.
        """
        size = _size(write)
        hard_cap = self._config.max_pending + (self._config.reserve if use_reserve else 0)
        if self.depth >= hard_cap or self.bytes + size > self._config.max_bytes:
            self.refused += 1
            self._log_refusal(write.id)
            raise OpError(ErrorCode.OUTBOX_FULL, f"{self.depth} writes pending")
        await self._persist(write, size, owner)

    def _log_refusal(self, write_id: str) -> None:
        """One warning per ``_REFUSALS_LOGGED_EVERY_S`` at most, with the running count (stats
        show it too): a line per refused write would flood the log under the very load that
        fills the outbox."""
        now = time.monotonic()
        last = self._refusal_logged_at
        if last is None or now - last >= _REFUSALS_LOGGED_EVERY_S:
            self._refusal_logged_at = now
            log.warning(
                "outbox full: refused write %s (%s pending; %s refused since start)",
                write_id,
                self.depth,
                self.refused,
            )

    async def put_or_fold(
        self, write: MemoryWrite, key: str | Mapping[str, int], *, owner: str | None = None
    ) -> None:
        """Persist ``write`` while the outbox is below ``max_pending``; past it, count it under
        ``key`` in one summary record instead (SPEC O-3). Never raises outbox_full. ``key`` may
        be counts per key: what a summary of several frames (SPEC O-4) stands for."""
        size = _size(write)
        if not self._fold(key, size):
            await self._persist(write, size, owner)

    def put_or_fold_nowait(
        self, write: MemoryWrite, key: str | Mapping[str, int], *, owner: str | None = None
    ) -> None:
        """``put_or_fold`` without waiting for the commit: the write joins the commit being
        gathered, committed after one scheduler pass (``synchronous: normal``) or by the
        committer, so the summaries of many connections closing at once share one transaction.
        For summaries written at a connection's close or by a timer: no reply waits for them."""
        size = _size(write)
        if self._fold(key, size):
            return
        commit = self._enqueue(write, size, owner)
        if not self._inline_commits:
            self._batch_ready.set()
        elif not commit.scheduled:
            commit.scheduled = True
            trio.lowlevel.spawn_system_task(self._commit_soon, commit, name="outbox.commit_soon")

    async def _commit_soon(self, commit: _Commit) -> None:
        await trio.lowlevel.cancel_shielded_checkpoint()
        if not commit.finished:
            self._commit(commit)

    def _fold(self, key: str | Mapping[str, int], size: int) -> bool:
        """Count ``key`` in the folded summary when the outbox has no room; False if it has."""
        if not (self.full or self.bytes + size > self._config.max_bytes):
            return False
        if not self._folded:
            self._folded_since = time.time()
            log.warning("outbox full: folding audit records of sys ops and refused frames")
        for name, count in ({key: 1} if isinstance(key, str) else key).items():
            if name not in self._folded and len(self._folded) >= _MAX_FOLDED_KEYS:
                name = "other"  # REQ names are the caller's: keep the summary bounded
            self._folded[name] += count
            self.folded += count
        return True

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
            await self._drained.wait()

    async def wait_flushed(self) -> None:
        """At exit: return once every pending write is delivered, or at once when delivery is
        not connected after its first attempt (what is left stays on disk for the next start).
        The caller bounds it (the daemon: with what is left of its grace period)."""
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:

                async def unreachable() -> None:
                    await self._attempted.wait()
                    while self.connected:
                        await self._room.wait()
                    scope.cancel()

                nursery.start_soon(unreachable)
                await self.wait_drained()
                scope.cancel()

    def _enqueue(self, write: MemoryWrite, size: int, owner: str | None) -> _Commit:
        """Count ``write`` as pending and add it to the commit being gathered."""
        self.depth += 1
        self.bytes += size
        if owner is not None:
            self._own(owner, write.id, size)
        if self._drained.is_set():
            self._drained = trio.Event()
        commit = self._open
        if commit is None:
            commit = self._open = _Commit()
        commit.writes.append(write)
        return commit

    async def _persist(self, write: MemoryWrite, size: int, owner: str | None) -> None:
        commit = self._enqueue(write, size, owner)
        if self._inline_commits:
            # One pass of the scheduler lets the other writers of this tick join the commit;
            # shielded, so a write counted above is never abandoned half-way.
            await trio.lowlevel.cancel_shielded_checkpoint()
            if not commit.finished:
                self._commit(commit)
        else:
            self._batch_ready.set()
            await commit.done.wait()
        if commit.error is not None:
            raise OpError(ErrorCode.OUTBOX_FULL, f"not persisted: {commit.error}")

    def _own(self, owner: str, write_id: str, size: int) -> None:
        held = self._owners.setdefault(owner, [0, 0])
        held[0] += 1
        held[1] += size
        self._owner_of[write_id] = owner

    def _commit(self, commit: _Commit) -> None:
        """Commit ``commit`` on the event loop (``synchronous: normal``)."""
        if self._open is commit:
            self._open = None
        try:
            self._store.insert(commit.writes)
        except Exception as exc:
            log.exception("outbox commit failed")
            self._forget(commit, str(exc))
        self._finish(commit)

    def _finish(self, commit: _Commit) -> None:
        commit.finished = True
        commit.done.set()
        self._new_rows.set()

    async def serve_committer(self) -> None:
        """Commit queued writes in a worker thread until cancelled (``synchronous: full``)."""
        if self._inline_commits:
            await trio.sleep_forever()
        while True:
            await self._batch_ready.wait()
            self._batch_ready = trio.Event()
            commit, self._open = self._open, None
            if commit is None:
                continue
            try:
                await self._db(self._store.insert, commit.writes)
            except Exception as exc:
                log.exception("outbox commit failed")
                self._forget(commit, str(exc))
            self._finish(commit)

    async def serve_delivery(self) -> None:
        """Deliver pending writes to the Memory Specialist until cancelled."""
        link = self._link
        if link is None:
            log.info("no Memory Specialist: writes wait in the outbox")
            self._attempted.set()
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
            except* sqlite3.Error:
                # Disk full or locked: unsettled writes are simply sent again later (their IDs
                # make that harmless, SPEC M-2); the daemon must not go down with delivery.
                log.exception("outbox store error during delivery; retry in %.1fs", self._backoff_s)
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
        self.connected = connected
        self._attempted.set()
        self._wake_room()  # waiters re-check: refused at once while nothing drains

    def _wake_room(self) -> None:
        self._room.set()
        self._room = trio.Event()

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
                    self._in_flight_rows
                    and self.depth - self._in_flight_rows < self._memory.batch_size
                ):
                    await self._new_rows.wait()
                    self._new_rows = trio.Event()
                rows = await self._db(self._store.after, self._sent_upto, self._memory.batch_size)
                if not rows:
                    window.release()
                    await self._new_rows.wait()
                    self._new_rows = trio.Event()
                    continue
                self._sent_upto = rows[-1][0]
                # The batch is one buffer and one waiter (not a Task, bytes and Event per write).
                ids, data = batch_frames(rows)
                try:
                    batch = await client.start_batch(ids, data)
                except BaseException:
                    window.release()
                    raise
                self._in_flight_rows += len(rows)
                nursery.start_soon(self._settle_batch, batch, rows, window)

    async def _settle_batch(
        self, batch: PendingBatch, rows: list[tuple[int, MemoryWrite]], window: trio.Semaphore
    ) -> None:
        try:
            replies = await batch.replies(timeout_s=self._memory.ack_timeout_s)
            acked, rejected, retry = sort_replies(rows, replies)
            await self._db(self._store.settle, acked, rejected)
            self._settled([w for seq, w in rows if seq not in retry], len(acked), len(rejected))
            if retry:  # the Memory Specialist is busy or stopping: same writes again later
                raise ClientClosed(f"{len(retry)} writes refused for now; retrying")
        finally:
            self._in_flight_rows -= len(rows)
            self._new_rows.set()  # the delivery loop may be holding a partial batch back
            window.release()

    def _settled(self, writes: list[MemoryWrite], acked: int, rejected: int) -> None:
        for write in writes:
            self._release(write)
        self.depth -= acked + rejected
        self.delivered += acked
        self.rejected += rejected
        if rejected:
            log.error("memory specialist rejected %d writes; kept in outbox.rejected", rejected)
        if self.depth == 0:
            self._drained.set()
        if self._folded and not self.full:
            self._write_folded()
        self._wake_room()

    def _release(self, write: MemoryWrite) -> None:
        size = _size(write)
        self.bytes -= size
        owner = self._owner_of.pop(write.id, None)
        if owner is not None:
            held = self._owners[owner]
            held[0] -= 1
            held[1] -= size
            if held[0] == 0:
                del self._owners[owner]

    def _write_folded(self) -> None:
        """Queue the summary of folded audit records (one write, past any limit: it is what
        the records it replaces would have taken far more room for)."""
        record = json_record(
            folded=dict(sorted(self._folded.items())),
            since=self._folded_since,
            until=time.time(),
            total=sum(self._folded.values()),
        )
        write = make_write("sys", "audit", "audit", record, suffix=".json")
        self._folded.clear()
        commit = self._enqueue(write, _size(write), None)
        if self._inline_commits:
            self._commit(commit)
        else:
            self._batch_ready.set()

    def write_folded_now(self) -> None:
        """At close: store what is still folded, and writes not yet committed (blocking; the
        outbox is no longer served)."""
        if self._folded:
            self._write_folded()
        commit, self._open = self._open, None
        if commit is not None and not commit.finished:  # the committer is gone
            self._store.insert(commit.writes)
            commit.finished = True
            commit.done.set()

    def _forget(self, commit: _Commit, error: str) -> None:
        commit.error = error
        for write in commit.writes:
            self.depth -= 1
            self._release(write)
        if self.depth == 0:
            self._drained.set()

    async def _db(self, fn: Callable[..., T], *args: object) -> T:
        if self._inline_commits:  # every store call runs on the event loop: no lock needed
            return fn(*args)
        async with self._db_lock:
            return await trio.to_thread.run_sync(fn, *args)


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
        if outbox.depth == 0:
            outbox._drained.set()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(outbox.serve_committer)
            nursery.start_soon(outbox.serve_delivery)
            yield outbox
            nursery.cancel_scope.cancel()
        outbox.write_folded_now()
    finally:
        await trio.to_thread.run_sync(store.close)
