"""Group commit for the reference Memory Specialist: many writes, one transaction, replies after.

A write is *staged* as its frame is handled: checked (path, size, a repeated ID) and queued in
arrival order, so the connection loop reads on without waiting for the disk. One committer task
commits everything staged so far in one transaction (as the outbox does, and databases batch
fsyncs), then the next batch. Replies leave through ``CommittedReplies``, a stream whose
``send_all`` first waits until every write staged before it is committed: an ``OK`` is never
sent for a write that is not on disk. When a commit fails, each connection open at that moment
is closed with its replies unsent, so the writer sends the writes again (their IDs make that
harmless, SPEC M-2).
"""

from __future__ import annotations

import logging
import sqlite3
import time

import trio

from protocol import ErrorCode

from .errors import OpError
from .sink_store import Row, SinkStore, check_path, content_hash

log = logging.getLogger("csp_web.memory_sink")

# Retention also runs when no write arrives, so an idle store still ages out.
SWEEP_INTERVAL_S = 60.0


class GroupCommit:
    """Stages writes for ``store`` and commits them in groups; run ``serve`` for its lifetime."""

    def __init__(self, store: SinkStore) -> None:
        self.store = store
        self._staged: dict[str, bytes] = {}  # ID -> content hash, staged or being committed
        self._batch: list[Row] = []
        self._batch_ready = trio.Event()
        self._progress = trio.Event()
        self._staged_count = 0
        self._settled_count = 0  # staged writes whose commit ended, committed or failed
        self.gates: set[CommittedReplies] = set()
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
        self._batch_ready.set()
        return True

    async def wait_committed(self) -> None:
        """Return once every write staged before this call has been committed (or failed)."""
        target = self._staged_count
        while self._settled_count < target:
            await self._progress.wait()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Commit staged writes in groups, and sweep retention, until cancelled."""
        task_status.started()
        while True:
            with trio.move_on_after(SWEEP_INTERVAL_S):
                await self._batch_ready.wait()
            batch, self._batch = self._batch, []
            self._batch_ready = trio.Event()
            await self._commit(batch, self._staged_count)

    async def _commit(self, batch: list[Row], upto: int) -> None:
        try:
            # Not abandoned on cancel: a commit under way finishes before the store closes.
            change = await trio.to_thread.run_sync(self.store.commit, batch, time.time())
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
            self._progress.set()
            self._progress = trio.Event()


class CommittedReplies(trio.abc.Stream):
    """``stream`` whose replies wait for the commit of the writes staged before them."""

    def __init__(self, stream: trio.abc.Stream, commits: GroupCommit) -> None:
        self._stream = stream
        self._commits = commits
        self.broken = False
        commits.gates.add(self)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._commits.wait_committed()
        if self.broken:
            raise trio.BrokenResourceError("a commit failed: replies withheld, writes resent")
        await self._stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self._stream.receive_some(max_bytes)

    async def aclose(self) -> None:
        self._commits.gates.discard(self)
        await self._stream.aclose()
