"""Group commit of outbox writes: writes of one scheduler tick share one SQLite transaction.

With ``outbox.synchronous: normal`` (no fsync) a WAL commit takes tens of microseconds, less
than the round trip to a worker thread, so the first writer to resume after one scheduler pass
commits the writes gathered so far on the event loop. With ``full`` a commit can take
milliseconds: ``serve`` commits in a worker thread and the writers wait for it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import trio

from csp_web.core.api.errors import OpError, StorageFull
from csp_web.core.api.records import MemoryWrite
from csp_web.memory.outbox_room import OutboxRoom, write_size
from csp_web.memory.outbox_store import OutboxStore
from protocol import ErrorCode

log = logging.getLogger(__name__)
T = TypeVar("T")


class _Commit:
    """Writes that will share one transaction; ``done`` is set once it ran (or failed)."""

    __slots__ = ("done", "error", "finished", "scheduled", "unattended", "writes")

    def __init__(self) -> None:
        self.writes: list[MemoryWrite] = []
        self.finished = False
        self.scheduled = False  # a system task will commit it (add_nowait)
        self.unattended = 0  # writes no caller waits for (add_nowait, add_now)
        self.error: Exception | None = None
        self.done = trio.Event()


class GroupCommit:
    """Gathers writes into shared commits to ``store``; counts them in ``room``."""

    def __init__(self, store: OutboxStore, room: OutboxRoom, *, inline: bool) -> None:
        self._store = store
        self._room = room
        self._inline = inline
        self._db_lock = trio.Lock()
        self._open: _Commit | None = None  # the commit new writes join
        self._batch_ready = trio.Event()
        self._new_rows = trio.Event()

    async def db(self, fn: Callable[..., T], *args: object) -> T:
        """Run a store call: on the event loop, or (fsync) in a thread, one at a time."""
        if self._inline:  # every store call runs on the event loop: no lock needed
            return fn(*args)
        async with self._db_lock:
            return await trio.to_thread.run_sync(fn, *args)

    async def db_nowait(self, fn: Callable[..., T], *args: object) -> T:
        """Run a store call that never waits for an fsync (delivery's read, or its settle at
        ``synchronous=NORMAL``: outbox_store.py) on the event loop, no thread hop; with the
        committer in a thread (fsync), once the commit in progress is done, so that one write
        transaction runs at a time."""
        if self._inline:
            return fn(*args)
        async with self._db_lock:
            return fn(*args)

    def note_new_rows(self) -> None:
        """Wake delivery: rows were committed or a batch was settled."""
        self._new_rows.set()

    async def wait_new_rows(self) -> None:
        await self._new_rows.wait()
        self._new_rows = trio.Event()

    async def persist(self, write: MemoryWrite, size: int, owner: str | None) -> None:
        """Return once ``write`` is committed. Raises StorageFull("outbox") when the disk was
        full, OpError(outbox_full) when the commit failed otherwise."""
        commit = self._enqueue(write, size, owner)
        if self._inline:
            await self._commit_after_a_pass(commit)
        else:
            self._batch_ready.set()
            await commit.done.wait()
        if isinstance(commit.error, StorageFull):
            raise StorageFull("outbox")
        if commit.error is not None:
            raise OpError(ErrorCode.OUTBOX_FULL, f"not persisted: {commit.error}")

    def add_nowait(self, write: MemoryWrite, size: int, owner: str | None) -> None:
        """Join the commit being gathered, committed after one scheduler pass or by ``serve``."""
        commit = self._enqueue(write, size, owner)
        commit.unattended += 1
        if not self._inline:
            self._batch_ready.set()
        elif not commit.scheduled:
            commit.scheduled = True
            trio.lowlevel.spawn_system_task(
                self._commit_after_a_pass, commit, name="outbox.commit_soon"
            )

    def add_now(self, write: MemoryWrite) -> None:
        """Join the commit being gathered and commit it now on the event loop (``normal``)
        or hand it to ``serve`` (``full``); nothing waits for it (a summary of folded records,
        past any limit: it takes far less room than the records it stands for)."""
        commit = self._enqueue(write, write_size(write), None)
        commit.unattended += 1
        if self._inline:
            self._commit(commit)
        else:
            self._batch_ready.set()

    async def _commit_after_a_pass(self, commit: _Commit) -> None:
        """One pass of the scheduler lets the other writers of this tick join ``commit``, then
        the first to resume commits it; shielded, so a counted write is never abandoned."""
        await trio.lowlevel.cancel_shielded_checkpoint()
        if not commit.finished:
            self._commit(commit)

    def _enqueue(self, write: MemoryWrite, size: int, owner: str | None) -> _Commit:
        """Count ``write`` as pending and add it to the commit being gathered."""
        self._room.add(write, size, owner)
        commit = self._open
        if commit is None:
            commit = self._open = _Commit()
        commit.writes.append(write)
        return commit

    def _commit(self, commit: _Commit) -> None:
        """Commit ``commit`` on the event loop (``synchronous: normal``)."""
        if self._open is commit:
            self._open = None
        try:
            self._store.insert(commit.writes)
        except Exception as exc:
            self._failed(commit, exc)
        else:
            self._room.set_storage_full(False)
        self._finish(commit)

    def _finish(self, commit: _Commit) -> None:
        commit.finished = True
        commit.done.set()
        self._new_rows.set()

    def _failed(self, commit: _Commit, error: Exception) -> None:
        """``commit`` was not stored: its writers get the error, its writes stop counting.
        A full disk is a condition (logged once, until a commit succeeds), not a bug."""
        if isinstance(error, StorageFull):
            if not self._room.storage_full:
                log.error("outbox: disk full, audited ops get storage_full until space returns")
            self._room.set_storage_full(True)
            if commit.unattended:  # summaries nobody waits for: counted, not dropped unseen
                self._room.count_folded({"unstored": commit.unattended})
        else:
            log.error("outbox commit failed", exc_info=error)
        self._forget(commit, error)

    def _forget(self, commit: _Commit, error: Exception) -> None:
        commit.error = error
        self._room.remove(commit.writes)
        # Room was freed and delivery may be behind no more: no settle will say so for writes
        # never stored, so wake the ops waiting for room or for a turn (SPEC O-5) now.
        self._room.grant(0)
        self._room.wake()

    async def serve(self) -> None:
        """Commit queued writes in a worker thread until cancelled (``synchronous: full``)."""
        if self._inline:
            await trio.sleep_forever()
        while True:
            await self._batch_ready.wait()
            self._batch_ready = trio.Event()
            commit, self._open = self._open, None
            if commit is None:
                continue
            try:
                await self.db(self._store.insert, commit.writes)
            except Exception as exc:
                self._failed(commit, exc)
            else:
                self._room.set_storage_full(False)
            self._finish(commit)

    def commit_rest(self) -> None:
        """At close: commit writes not yet committed (blocking; nothing serves commits)."""
        commit, self._open = self._open, None
        if commit is not None and not commit.finished:  # the committer is gone
            try:
                self._store.insert(commit.writes)
            except StorageFull:
                log.error("outbox: disk full at exit, %d writes not stored", len(commit.writes))
            commit.finished = True
            commit.done.set()
