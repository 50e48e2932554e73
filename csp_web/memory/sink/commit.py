"""Group commit for the reference Memory Specialist: many writes, one transaction, replies after.

A write is *staged* as its frame is handled: checked (path, size, a repeated ID) and queued in
arrival order, so the connection loop reads on without waiting for the disk. One commit at a
time takes everything staged so far in one transaction (as the outbox does, and databases batch
fsyncs), then the next batch. The connection that first waits for a commit runs it, on the
event loop (WAL without an fsync per commit: no hop to a committer task or a thread); only
retention sweeps of an idle store run in a worker thread, and commits wait for them. A
connection sends the replies of what it staged only after ``wait_settled`` returned for them
and its gate is not ``broken``: an ``OK`` is never sent for a write that is not on disk. When
a commit fails, each connection open at that moment (each gate) is marked broken and closed
with its replies unsent, so the writer sends the writes again (their IDs make that harmless,
SPEC M-2).
"""

from __future__ import annotations

import logging
import sqlite3
import time
from typing import Protocol

import trio

from csp_web.core.errors import OpError
from csp_web.memory.sink.store import Row, SinkStore, check_path, content_hash
from protocol import ErrorCode

log = logging.getLogger("csp_web.memory_sink")

# Retention also runs when no write arrives, so an idle store still ages out.
SWEEP_INTERVAL_S = 60.0


class Gate(Protocol):
    """A connection whose replies wait for commits; ``broken`` once one of them failed."""

    broken: bool


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
        self._sweeping = False
        self.gates: set[Gate] = set()
        self.commits = 0
        self.failed_commits = 0

    def stage(self, source: str, type_: str, path: str, data: str, write_id: str) -> bool:
        """Queue a write; False when this exact write is already stored or staged (M-2).

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
            known = self.store.stored_hash(write_id)
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
        staged so far itself, on the event loop: no hop to another task or thread."""
        while self._settled_count < upto:
            if self._sweeping:
                await self._progress.wait()
            else:
                self._commit_staged()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Sweep retention every ``SWEEP_INTERVAL_S`` (an idle store still ages out) until
        cancelled."""
        task_status.started()
        while True:
            await trio.sleep(SWEEP_INTERVAL_S)
            await self._sweep()

    async def _sweep(self) -> None:
        # In a worker thread: a long-idle store may delete many rows at once. Commits wait.
        self._sweeping = True
        try:
            # Not abandoned on cancel: a sweep under way finishes before the store closes.
            change = await trio.to_thread.run_sync(self.store.sweep, time.time())
        except sqlite3.Error:
            log.exception("memory store retention sweep failed")
        else:
            self.store.applied(change)
        finally:
            self._sweeping = False
            self._wake()

    def _commit_staged(self) -> None:
        # On the loop: WAL without an fsync per commit takes about a millisecond for a group
        # of writes, less than a round trip to a worker thread on a busy daemon.
        batch, self._batch = self._batch, []
        upto = self._staged_count
        try:
            change = self.store.commit(batch, time.time())
        except sqlite3.Error:
            log.exception("memory store commit of %d writes failed", len(batch))
            self.failed_commits += 1
            for gate in self.gates:
                gate.broken = True
        else:
            self.store.applied(change)
            self.commits += 1
        finally:
            for row in batch:
                self._staged.pop(row.id, None)
            self._settled_count = upto
            self._wake()

    def _wake(self) -> None:
        self._progress.set()
        self._progress = trio.Event()
