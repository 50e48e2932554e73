"""The outbox's SQLite tables. Blocking: called from the event loop, commits (``insert``)
from a worker thread with ``synchronous: full``.

Three connections to one WAL-mode database, so that delivery never waits for the producers'
fsyncs: ``insert`` commits on the writer connection (``synchronous`` as configured);
``after``/``oldest`` read on a connection of their own (WAL lets a reader beside the writer,
seeing every committed write), at any time; ``settle`` runs on a third at
``synchronous=NORMAL``, one write transaction at a time with ``insert`` (the caller serialises
them). A settle lost to a power failure only delivers its writes again, which their IDs make
harmless (SPEC M-2), so it need not wait for an fsync, nor delivery for a thread. With
``full`` the settler leaves WAL checkpoints (which fsync) to the writer's commits, in the
committer's thread.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3

from csp_web.core.api.errors import StorageFull
from csp_web.core.api.records import MemoryWrite
from csp_web.core.api.storage import storage_seam

_BUSY_TIMEOUT_MS = 5000
# Free space a full outbox must find again before it admits audited ops: a group commit of
# a few hundred audit records is some dozen 4 KiB pages in the WAL.
PROBE_BYTES = 256 * 1024

_SCHEMA = """
CREATE TABLE IF NOT EXISTS pending (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL, source TEXT NOT NULL, type TEXT NOT NULL,
    path TEXT NOT NULL, data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS rejected (
    seq INTEGER PRIMARY KEY, id TEXT NOT NULL, source TEXT NOT NULL, type TEXT NOT NULL,
    path TEXT NOT NULL, data TEXT NOT NULL, error TEXT NOT NULL
);
"""


_INSERT = "INSERT INTO pending (id, source, type, path, data) VALUES (?, ?, ?, ?, ?)"


class OutboxStore:
    """Pending writes in insertion order, in a WAL-mode database private to the daemon.

    Opened on a full disk (SPEC O-6), a new database cannot be set up: the store is then
    empty and ``insert`` raises StorageFull until ``setup`` succeeds (it retries)."""

    def __init__(self, path: str, synchronous: str) -> None:
        self.path = path
        os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o700, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        os.chmod(path, 0o600)  # writes may hold command output: owner only
        self._db.execute(f"PRAGMA synchronous={'FULL' if synchronous == 'full' else 'NORMAL'}")
        self._reader = self._open(path, "PRAGMA query_only=1")
        self._settler = self._open(path, "PRAGMA synchronous=NORMAL")
        if synchronous == "full":  # settles run on the event loop: checkpoints (fsyncs) stay
            self._settler.execute("PRAGMA wal_autocheckpoint=0")  # with the committer's thread
        self.ready = False
        with contextlib.suppress(StorageFull):
            self.setup()

    def setup(self) -> None:
        """Make the database WAL and its tables (once). Raises StorageFull("outbox")."""
        if not self.ready:
            with storage_seam("outbox"):
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.executescript(_SCHEMA)
            self.ready = True

    @staticmethod
    def _open(path: str, pragma: str) -> sqlite3.Connection:
        db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        db.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")  # a safety net: never contended
        db.execute(pragma)
        return db

    def totals(self) -> tuple[int, int]:
        """(number of pending writes, their data+path characters)."""
        if not self.ready:
            return 0, 0
        row = self._db.execute(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(data) + LENGTH(path)), 0) FROM pending"
        ).fetchone()
        return int(row[0]), int(row[1])

    def insert(self, writes: list[MemoryWrite]) -> None:
        """Append ``writes`` in one transaction: durable when this returns. Raises
        StorageFull("outbox") when the disk is full, nothing of ``writes`` kept."""
        self.setup()
        if len(writes) == 1:
            # One op at a time, each commit holds one write: the statement alone is the
            # transaction (autocommit), as durable, and 42-45 us of CPU against 50-54 us with
            # BEGIN, executemany and COMMIT (A/B in one process, 6,000 each, load 3.7-3.8).
            (w,) = writes
            with storage_seam("outbox"):
                self._db.execute(_INSERT, (w.id, w.source, w.type, w.path, w.data))
            return
        with storage_seam("outbox"), self._db:
            self._db.execute("BEGIN")
            self._db.executemany(
                _INSERT, [(w.id, w.source, w.type, w.path, w.data) for w in writes]
            )

    def has_room(self) -> bool:
        """Whether ``PROBE_BYTES`` can be written beside the store now (a full disk's space
        returned): a file is written, synced and removed."""
        probe = f"{self.path}.probe"
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW
            fd = os.open(probe, flags, 0o600)
            try:
                left = memoryview(bytes(PROBE_BYTES))
                while left:  # a nearly full disk takes a short write, then ENOSPC
                    left = left[os.write(fd, left) :]
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError:
            return False
        finally:
            with contextlib.suppress(OSError):
                os.unlink(probe)
        return True

    def oldest(self, limit: int) -> list[tuple[int, MemoryWrite]]:
        """The first ``limit`` pending writes, oldest first, with their sequence numbers."""
        return self.after(0, limit)

    def after(self, seq: int, limit: int) -> list[tuple[int, MemoryWrite]]:
        """Up to ``limit`` pending writes queued after sequence number ``seq``, in order; on
        the reader connection, so it may run while a commit does."""
        if not self.ready:
            return []
        rows = self._reader.execute(
            "SELECT seq, id, source, type, path, data FROM pending WHERE seq > ? "
            "ORDER BY seq LIMIT ?",
            (seq, limit),
        ).fetchall()
        return [
            (seq, MemoryWrite(src, typ, path, data, wid)) for seq, wid, src, typ, path, data in rows
        ]

    def settle(self, acked: list[int], rejected: list[tuple[int, str]]) -> None:
        """Drop acknowledged writes and move rejected ones aside, in one transaction (never at
        the same time as ``insert``)."""
        with self._settler:
            self._settler.execute("BEGIN")
            self._settler.executemany(
                "INSERT INTO rejected SELECT seq, id, source, type, path, data, ? FROM pending "
                "WHERE seq = ?",
                [(error, seq) for seq, error in rejected],
            )
            self._settler.executemany(
                "DELETE FROM pending WHERE seq = ?",
                [(seq,) for seq in acked + [seq for seq, _ in rejected]],
            )

    def close(self) -> None:
        self._reader.close()
        self._settler.close()
        self._db.close()
