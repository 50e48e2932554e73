"""The durable memory outbox: persist every write, deliver in order, forget only on ACK.

``put`` returns once the write is committed to SQLite (WAL); many concurrent puts share one
commit (group commit, as databases batch fsyncs), so a busy daemon pays one disk sync per batch,
not per write. ``serve_delivery`` sends pending writes to the Memory Specialist in order,
pipelined in batches, reconnecting with exponential backoff; a write leaves the store only when
its ACK (``STATUS OK`` with the same ID) arrives. A ``FAIL`` answer moves the write to a
``rejected`` table, kept locally and counted, so one bad write cannot block the queue forever.

When ``max_pending`` writes wait, the dispatcher refuses new ops with ``outbox_full`` (their
logs could not be kept); writes of ops already running may still use ``reserve`` more.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

import trio

from protocol import ErrorCode, Reply, Status

from .client import Client, ClientClosed
from .config import MemoryConfig, OutboxConfig
from .errors import OpError
from .memory import MemoryWrite
from .memory_link import MemoryLink, socket_link
from .outbox_store import OutboxStore

log = logging.getLogger("csp_web.outbox")
T = TypeVar("T")


class _Waiter:
    def __init__(self, write: MemoryWrite) -> None:
        self.write = write
        self.done = trio.Event()
        self.error: str | None = None


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
        self._batch: list[_Waiter] = []
        self._batch_ready = trio.Event()
        self._new_rows = trio.Event()
        self._drained = trio.Event()
        self.depth, self.bytes = store.totals()
        self.delivered = 0
        self.rejected = 0
        self.refused = 0
        self.connected = False
        # Without fsync a WAL commit of a batch takes tens of microseconds: less than the
        # round trip to a worker thread, so it runs on the event loop. With fsync ("full")
        # it can take milliseconds and goes to a thread.
        self._inline_commits = config.synchronous == "normal"

    @property
    def full(self) -> bool:
        """Whether new ops should be refused (SPEC: ``outbox_full``)."""
        return self.depth >= self._config.max_pending or self.bytes >= self._config.max_bytes

    async def put(self, write: MemoryWrite, *, use_reserve: bool = True) -> None:
        """Persist ``write``; returns once it is committed. Raises OpError(outbox_full).

        Only writes of ops already admitted may use the reserve past ``max_pending``; audit
        records of refused frames and of IN:SYS ops pass ``use_reserve=False``, so they can
        never take the room an admitted op's log needs.
        """
        size = len(write.data) + len(write.path)
        hard_cap = self._config.max_pending + (self._config.reserve if use_reserve else 0)
        if self.depth >= hard_cap or self.bytes + size > self._config.max_bytes:
            self.refused += 1
            log.warning("outbox full: refused write %s (%s pending)", write.id, self.depth)
            raise OpError(ErrorCode.OUTBOX_FULL, f"{self.depth} writes pending")
        self.depth += 1
        self.bytes += size
        self._drained = trio.Event() if self._drained.is_set() else self._drained
        waiter = _Waiter(write)
        self._batch.append(waiter)
        self._batch_ready.set()
        await waiter.done.wait()
        if waiter.error is not None:
            raise OpError(ErrorCode.OUTBOX_FULL, f"not persisted: {waiter.error}")

    async def wait_drained(self) -> None:
        """Return once every pending write has been delivered (or rejected)."""
        if self.depth:
            await self._drained.wait()

    async def serve_committer(self) -> None:
        """Commit queued writes in batches until cancelled; run for the outbox's lifetime."""
        while True:
            await self._batch_ready.wait()
            batch, self._batch = self._batch, []
            self._batch_ready = trio.Event()
            try:
                writes = [waiter.write for waiter in batch]
                await self._db(self._store.insert, writes, inline=self._inline_commits)
            except Exception as exc:
                log.exception("outbox commit failed")
                self._forget(batch, str(exc))
            self._new_rows.set()
            for waiter in batch:
                waiter.done.set()

    async def serve_delivery(self) -> None:
        """Deliver pending writes to the Memory Specialist until cancelled."""
        link = self._link
        if link is None:
            log.info("no Memory Specialist: writes wait in the outbox")
            await trio.sleep_forever()
        backoff = self._memory.backoff_initial_s
        while True:
            try:
                async with link.open_client(id_prefix="o") as client:
                    self.connected = True
                    backoff = self._memory.backoff_initial_s
                    await self._deliver_forever(client)
            except (OSError, ClientClosed, trio.TooSlowError) as exc:
                log.info("memory specialist unreachable (%s); retry in %.1fs", exc, backoff)
            except sqlite3.Error:
                # Disk full or locked: unsettled writes are simply sent again later (their IDs
                # make that harmless, SPEC M-2); the daemon must not go down with delivery.
                log.exception("outbox store error during delivery; retry in %.1fs", backoff)
            finally:
                self.connected = False
            await trio.sleep(backoff)
            backoff = min(backoff * 2, self._memory.backoff_max_s)

    async def _deliver_forever(self, client: Client) -> None:
        while True:
            rows = await self._db(self._store.oldest, self._memory.batch_size)
            if not rows:
                await self._new_rows.wait()
                self._new_rows = trio.Event()
                continue
            replies = await client.call_many(
                [write.to_task() for _, write in rows], timeout_s=self._memory.ack_timeout_s
            )
            acked, rejected, retry = _sort_replies(rows, replies)
            await self._db(self._store.settle, acked, rejected)
            self._settled([w for seq, w in rows if seq not in retry], len(acked), len(rejected))
            if retry:  # the Memory Specialist is busy or stopping: same writes again later
                raise ClientClosed(f"{len(retry)} writes refused for now; retrying")

    def _settled(self, writes: list[MemoryWrite], acked: int, rejected: int) -> None:
        for write in writes:
            self.bytes -= len(write.data) + len(write.path)
        self.depth -= acked + rejected
        self.delivered += acked
        self.rejected += rejected
        if rejected:
            log.error("memory specialist rejected %d writes; kept in outbox.rejected", rejected)
        if self.depth == 0:
            self._drained.set()

    def _forget(self, batch: list[_Waiter], error: str) -> None:
        for waiter in batch:
            waiter.error = error
            self.depth -= 1
            self.bytes -= len(waiter.write.data) + len(waiter.write.path)
        if self.depth == 0:
            self._drained.set()

    async def _db(self, fn: Callable[..., T], *args: object, inline: bool = False) -> T:
        async with self._db_lock:
            if inline:
                return fn(*args)
            return await trio.to_thread.run_sync(fn, *args)


# FAIL codes that say "not now" rather than "never": such writes stay pending (SPEC M-2).
_TRANSIENT = frozenset(
    {
        "busy",
        "shutting_down",
        "timeout_exceeded",
        "internal_error",
        "outbox_full",
        "rate_limited",
        "memory_unavailable",
    }
)


def _sort_replies(
    rows: list[tuple[int, MemoryWrite]], replies: list[Reply]
) -> tuple[list[int], list[tuple[int, str]], set[int]]:
    """(acknowledged seqs, rejected (seq, error), seqs to retry) for one delivered batch."""
    acked: list[int] = []
    rejected: list[tuple[int, str]] = []
    retry: set[int] = set()
    for (seq, _), reply in zip(rows, replies, strict=True):
        error = reply.get("ERROR") or "FAIL"
        if reply.status is not Status.FAIL:
            acked.append(seq)
        elif error.partition(":")[0] in _TRANSIENT:
            retry.add(seq)
        else:
            rejected.append((seq, error))
    return acked, rejected, retry


@asynccontextmanager
async def open_outbox(
    path: str, config: OutboxConfig, memory: MemoryConfig, *, link: MemoryLink | None = None
) -> AsyncIterator[Outbox]:
    """Open (creating if needed) the outbox at ``path`` and run its committer and delivery.

    Delivery goes over ``link``, by default to ``memory.socket_path``; with neither, writes
    wait. Pending writes from an earlier run are delivered first. The store is closed on exit;
    what was not delivered stays in it for the next start.
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
    finally:
        await trio.to_thread.run_sync(store.close)
