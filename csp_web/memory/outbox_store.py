"""The outbox's SQLite tables. Blocking: called one call at a time, from the event loop
(``synchronous: normal``) or a worker thread (``full``)."""

from __future__ import annotations

import os
import sqlite3

from csp_web.core.records import MemoryWrite

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


class OutboxStore:
    """Pending writes in insertion order, in a WAL-mode database private to the daemon."""

    def __init__(self, path: str, synchronous: str) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o700, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        os.chmod(path, 0o600)  # writes may hold command output: owner only
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={'FULL' if synchronous == 'full' else 'NORMAL'}")
        self._db.executescript(_SCHEMA)

    def totals(self) -> tuple[int, int]:
        """(number of pending writes, their data+path characters)."""
        row = self._db.execute(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(data) + LENGTH(path)), 0) FROM pending"
        ).fetchone()
        return int(row[0]), int(row[1])

    def insert(self, writes: list[MemoryWrite]) -> None:
        """Append ``writes`` in one transaction: durable when this returns."""
        with self._db:
            self._db.execute("BEGIN")
            self._db.executemany(
                "INSERT INTO pending (id, source, type, path, data) VALUES (?, ?, ?, ?, ?)",
                [(w.id, w.source, w.type, w.path, w.data) for w in writes],
            )

    def oldest(self, limit: int) -> list[tuple[int, MemoryWrite]]:
        """The first ``limit`` pending writes, oldest first, with their sequence numbers."""
        return self.after(0, limit)

    def after(self, seq: int, limit: int) -> list[tuple[int, MemoryWrite]]:
        """Up to ``limit`` pending writes queued after sequence number ``seq``, in order."""
        rows = self._db.execute(
            "SELECT seq, id, source, type, path, data FROM pending WHERE seq > ? "
            "ORDER BY seq LIMIT ?",
            (seq, limit),
        ).fetchall()
        return [
            (seq, MemoryWrite(src, typ, path, data, wid)) for seq, wid, src, typ, path, data in rows
        ]

    def settle(self, acked: list[int], rejected: list[tuple[int, str]]) -> None:
        """Drop acknowledged writes and move rejected ones aside, in one transaction."""
        with self._db:
            self._db.execute("BEGIN")
            self._db.executemany(
                "INSERT INTO rejected SELECT seq, id, source, type, path, data, ? FROM pending "
                "WHERE seq = ?",
                [(error, seq) for seq, error in rejected],
            )
            self._db.executemany(
                "DELETE FROM pending WHERE seq = ?",
                [(seq,) for seq in acked + [seq for seq, _ in rejected]],
            )

    def close(self) -> None:
        self._db.close()
