"""Group commit for the reference Memory Specialist: many writes, one transaction, replies after.

A write is *staged* as its frame is handled: checked (path, size, a repeated ID) and queued in
arrival order, so the connection loop reads on without waiting for the disk. One commit at a
time takes everything staged so far in one transaction (as the outbox does, and databases batch
fsyncs), then the next batch. The connection that first waits for a commit lets the scheduler
pass once (the writes other connections stage in the same tick join it), then runs it, one at
a time, so the store's writer connection has one user: a batch of up to ``INLINE_ROWS`` writes
on the event loop, a larger one in a worker thread, where its SQLite work runs on a second
core beside the daemon an embedded sink shares a process with (sqlite3 releases the GIL while
it steps) and the next batch grows meanwhile. A small batch is not worth the thread: the hop,
and the GIL passed back and forth with the loop around each of the commit's SQLite calls,
cost more than the commit (WAL at ``synchronous=NORMAL``: no fsync but a checkpoint's, about
one per thousand pages, as the outbox's own commits on the loop). Retention sweeps of an idle
store run in a worker thread; commits wait for them. A
connection sends the replies of what it staged only after ``wait_settled`` returned for them
and its gate is not ``broken``: an ``OK`` is never sent for a write that is not on disk. When
a commit fails, each connection open at that moment (each gate) is marked broken and closed
with its replies unsent, so the writer sends the writes again (their IDs make that harmless,
SPEC M-2). A commit a full disk refuses is a condition, not a fault: each of its writes is
answered ``FAIL storage_full:memory`` (``unstored``) and the connections stay open (O-6).
"""

from __future__ import annotations

import logging
import sqlite3
import time
from typing import Protocol

import trio

from csp_web.core.api.errors import OpError, StorageFull
from csp_web.sink.store import Row, SinkStore, check_path, content_hash
from protocol import ErrorCode

log = logging.getLogger(__name__)

# Retention also runs when no write arrives, so an idle store still ages out.
SWEEP_INTERVAL_S = 60.0
# Batches up to this many writes are committed on the event loop, larger ones in a worker
# thread. Delivery at one audited op at a time sends about nine writes a batch (linger_s
# 0.02): committed on the loop, such a batch costs 48-51 us of CPU per write against 82-84 us
# in a thread, a batch of one 210 us against 449 us (load 4.8-5.1), of 16 41 us against 63,
# of 64 28 against 37 (load 1.5; python bench/sink_commit.py --per N). Past a few dozen
# writes the hop is a small share and a commit on the loop (some 0.7 ms at 16) would hold the
# daemon's ops, while in a thread its SQLite steps run on the second core: under load
# (bench/fetch.py --quick, 64 connections) batches are large and stay in the thread.
INLINE_ROWS = 16


class Gate(Protocol):
    """A connection whose replies wait for commits; ``broken`` once one of them failed,
    ``unstored`` the IDs of its writes a full disk kept out (answered storage_full)."""

    broken: bool
    unstored: set[str]


class GroupCommit:
    """Stages writes for ``store`` and commits them in groups; run ``serve`` (retention
    sweeps) for its lifetime."""

    def __init__(self, store: SinkStore) -> None:
        self.store = store
        self._staged: dict[str, bytes] = {}  # ID -> content hash, staged or being committed
        self._batch: list[Row] = []
        self._progress = trio.Event()
        self._staged_count = 0
        self._settled_count = 0  # staged writes whose commit ended, committed or failed
        self._busy = False  # a commit or sweep holds the writer (in a worker thread)
        self.gates: set[Gate] = set()
        self.commits = 0
        self.failed_commits = 0
        self.storage_full = not store.ready  # the last commit (or the open) found it full

    def stored_hashes(self, ids: list[str]) -> dict[str, bytes]:
        """The content hashes stored under ``ids`` (absent: not stored), in one query per
        ``LOOKUP_IDS``: a chunk's writes are looked up together, then staged with ``stored``
        set to this, before the loop next yields (what is being committed is in ``_staged``,
        which ``stage`` consults first)."""
        return self.store.stored_hashes(ids)

    def stage(
        self,
        source: str,
        type_: str,
        path: str,
        data: str,
        write_id: str,
        stored: dict[str, bytes] | None = None,
    ) -> bool:
        """Queue a write; False when this exact write is already stored or staged (M-2).
        ``stored``: the result of ``stored_hashes`` for this write's ID, taken since the loop
        last yielded; None to look the ID up here.

        Raises OpError: invalid_field for a bad PATH, too_large for DATA no retention could
        keep, id_conflict when ``write_id`` is stored with other content (M-5)."""
        check_path(path)
        raw = data.encode("utf-8")
        limit = self.store.retention.max_bytes
        if len(raw) > limit:
            raise OpError(ErrorCode.TOO_LARGE, f"DATA of {len(raw)} bytes; retention {limit}")
        digest = content_hash(source, type_, path, data)
        known = self._staged.get(write_id)
        if known is None:
            known = self.store.stored_hash(write_id) if stored is None else stored.get(write_id)
        if known is not None:
            if known != digest:
                raise OpError(ErrorCode.ID_CONFLICT, "ID already stored with other content")
            return False
        self._staged[write_id] = digest
        self._batch.append(Row(write_id, source, type_, path, data, digest, len(raw), time.time()))
        self._staged_count += 1
        return True

    async def wait_committed(self) -> None:
        """Return once every write staged before this call has been committed (or failed)."""
        await self.wait_settled(self._staged_count)

    async def wait_settled(self, upto: int) -> None:
        """Return once the first ``upto`` writes staged have been committed (or failed); at
        once, without a checkpoint, when they already are. The first waiter commits everything
        staged so far itself (a large batch in a worker thread); others wait for it."""
        while self._settled_count < upto:
            if self._busy:
                await self._progress.wait()
                continue
            # One pass of the scheduler lets the writes other connections stage in this tick
            # join the commit (shielded: a staged write is never left uncommitted by a cancel).
            await trio.lowlevel.cancel_shielded_checkpoint()
            if not self._busy and self._settled_count < upto:
                await self._commit_staged()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Sweep retention every ``SWEEP_INTERVAL_S`` (an idle store still ages out) until
        cancelled."""
        task_status.started()
        while True:
            await trio.sleep(SWEEP_INTERVAL_S)
            await self._sweep()

    async def _sweep(self) -> None:
        # A long-idle store may delete many rows at once. Commits wait.
        if self._busy:
            return  # a commit is under way: it applies retention too
        self._busy = True
        try:
            # Not abandoned on cancel: a sweep under way finishes before the store closes.
            change = await trio.to_thread.run_sync(self.store.sweep, time.time())
        except StorageFull:
            log.warning("memory store: disk full, retention sweep skipped")
        except sqlite3.Error:
            log.exception("memory store retention sweep failed")
        else:
            self.store.applied(change)
        finally:
            self._busy = False
            self._wake()

    async def _commit_staged(self) -> None:
        batch, self._batch = self._batch, []
        upto = self._staged_count
        self._busy = True
        try:
            # Not abandoned on cancel: the commit finishes and is accounted before this
            # returns, so a write is never left half-way between staged and settled.
            if len(batch) <= INLINE_ROWS:
                change = self.store.commit(batch, time.time())
            else:
                change = await trio.to_thread.run_sync(self.store.commit, batch, time.time())
        except StorageFull:
            # A condition, not a fault: each write is answered storage_full:memory, which its
            # writer retries (the outbox keeps it pending), and the connections stay open.
            if not self.storage_full:
                log.error("memory store: disk full, writes refused until space returns")
            self.storage_full = True
            self.failed_commits += 1
            # Every connection: one that was told "duplicate" for a write staged here by
            # another must not keep that answer either.
            for gate in self.gates:
                gate.unstored.update(row.id for row in batch)
        except sqlite3.Error:
            log.exception("memory store commit of %d writes failed", len(batch))
            self.failed_commits += 1
            for gate in self.gates:
                gate.broken = True
        else:
            self.store.applied(change)
            self.commits += 1
            self.storage_full = False
        finally:
            for row in batch:
                self._staged.pop(row.id, None)
            self._settled_count = upto
            self._busy = False
            self._wake()

    def _wake(self) -> None:
        self._progress.set()
        self._progress = trio.Event()
