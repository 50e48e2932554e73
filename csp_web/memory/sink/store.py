"""The reference Memory Specialist's SQLite store: one row per write, ID and DATA in one commit.

Blocking. A store has two connections: ``commit`` and ``sweep`` use the writer (one call at a
time, from a worker thread), every other method the reader, on the event loop's thread. WAL
lets the reader run beside a commit and see only what is committed. Each row keeps a hash of
the write's content, so a repeated ID is told apart: the same content is a duplicate (SPEC
M-2), other content a conflict (M-5). Retention deletes the oldest rows by age and by total
bytes inside the commit that pushed past a limit, a bounded number per commit.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from dataclasses import dataclass

from csp_web.core.errors import OpError
from csp_web.core.storage import storage_seam
from protocol import ErrorCode

STORE_FILE = "memory.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS writes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE, source TEXT NOT NULL, type TEXT NOT NULL, path TEXT NOT NULL,
    hash BLOB NOT NULL, data TEXT NOT NULL, size INTEGER NOT NULL, stored_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS writes_path ON writes (path, seq);
CREATE INDEX IF NOT EXISTS writes_stored_at ON writes (stored_at);
"""

# Rows retention may delete in one commit: a long-idle store catches up over a few commits
# instead of one transaction that holds the writer for seconds.
RETENTION_ROWS_PER_COMMIT = 10_000
# IDs looked up in one query (SQLite allows 32,766 parameters; a chunk holds about a thousand).
LOOKUP_IDS = 500


@dataclass(frozen=True)
class Row:
    """One write as stored; ``size`` is DATA's length in UTF-8 bytes."""

    id: str
    source: str
    type: str
    path: str
    data: str
    hash: bytes
    size: int
    stored_at: float


@dataclass(frozen=True)
class Retention:
    max_bytes: int
    max_age_s: float


@dataclass(frozen=True)
class Committed:
    """What one commit changed: rows and bytes added, rows and bytes retention removed."""

    added: int
    added_bytes: int
    removed: int
    removed_bytes: int


def content_hash(source: str, type_: str, path: str, data: str) -> bytes:
    """The digest that decides whether two writes with one ID are the same write."""
    digest = hashlib.sha256()
    for part in (source, type_, path):
        digest.update(part.encode("utf-8") + b"\0")
    digest.update(data.encode("utf-8"))
    return digest.digest()


def check_path(logical: str) -> str:
    """``logical`` if it is a relative memory path; raises OpError(invalid_field)."""
    parts = logical.split("/")  # not PurePosixPath: "a//b" and "a/b" must not be two keys
    if any(p in ("..", ".", "") for p in parts):
        raise OpError(ErrorCode.INVALID_FIELD, "PATH must be relative without '..'")
    if any(part.startswith(".") for part in parts):
        raise OpError(ErrorCode.INVALID_FIELD, "PATH parts may not start with '.'")
    return logical


class SinkStore:
    """The writes under ``directory`` (``memory.sqlite3``); made once, closed by its owner."""

    def __init__(self, directory: str, retention: Retention) -> None:
        self.directory = os.path.abspath(directory)
        self.retention = retention
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        path = os.path.join(self.directory, STORE_FILE)
        # Opened and closed in worker threads: the rule above, not sqlite3's check, keeps
        # each connection to one user at a time.
        self._writer = _connect(path)
        self._writer.executescript(_SCHEMA)
        os.chmod(path, 0o600)  # writes hold command output and audit trails: owner only
        self._reader = _connect(path)
        self.count, self.bytes = self.totals()
        self.writes = 0  # rows this store added since it was opened

    def totals(self) -> tuple[int, int]:
        """(rows stored, their DATA bytes), as committed."""
        row = self._reader.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM writes").fetchone()
        return int(row[0]), int(row[1])

    def stored_hash(self, write_id: str) -> bytes | None:
        """The content hash stored under ``write_id``, or None when it is not stored."""
        row = self._reader.execute("SELECT hash FROM writes WHERE id = ?", (write_id,)).fetchone()
        return None if row is None else bytes(row[0])

    def stored_hashes(self, ids: list[str]) -> dict[str, bytes]:
        """The content hashes stored under those of ``ids`` that are stored: one query per
        ``LOOKUP_IDS`` IDs, not one per write."""
        found: dict[str, bytes] = {}
        for first in range(0, len(ids), LOOKUP_IDS):
            part = ids[first : first + LOOKUP_IDS]
            marks = ",".join("?" * len(part))
            query = f"SELECT id, hash FROM writes WHERE id IN ({marks})"
            found.update((str(i), bytes(h)) for i, h in self._reader.execute(query, part))
        return found

    def read(self, logical: str, max_bytes: int) -> str | None:
        """The writes at ``logical`` joined in the order stored, each ending in a newline;
        None when none is. Raises OpError(too_large) past ``max_bytes``."""
        size = self._reader.execute(
            "SELECT COALESCE(SUM(size), 0), COUNT(*) FROM writes WHERE path = ?", (logical,)
        ).fetchone()
        if size[1] == 0:
            return None
        if size[0] + size[1] > max_bytes:
            raise OpError(ErrorCode.TOO_LARGE, f"{size[0]} bytes at PATH; limit {max_bytes}")
        rows = self._reader.execute(
            "SELECT data FROM writes WHERE path = ? ORDER BY seq", (logical,)
        ).fetchall()
        return "".join(d if d.endswith("\n") else d + "\n" for (d,) in rows)

    @property
    def ids(self) -> set[str]:
        """Every stored ID (for tests and tools: it reads the whole table)."""
        return {str(i) for (i,) in self._reader.execute("SELECT id FROM writes")}

    def commit(self, rows: list[Row], now: float) -> Committed:
        """Insert ``rows`` and apply retention in one transaction: durable when this returns
        (kill -9 safe; WAL with synchronous NORMAL). An ID and its DATA land together or not
        at all. Raises StorageFull("memory") when the disk is full, sqlite3.Error otherwise,
        leaving nothing of the batch behind."""
        with storage_seam("memory"), self._writer:
            self._writer.execute("BEGIN IMMEDIATE")
            self._writer.executemany(
                "INSERT INTO writes (id, source, type, path, hash, data, size, stored_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (r.id, r.source, r.type, r.path, r.hash, r.data, r.size, r.stored_at)
                    for r in rows
                ],
            )
            added_bytes = sum(r.size for r in rows)
            removed, removed_bytes = self._retain(self.bytes + added_bytes, now)
        return Committed(len(rows), added_bytes, removed, removed_bytes)

    def sweep(self, now: float) -> Committed:
        """Apply retention alone (an idle store still ages out)."""
        return self.commit([], now)

    def applied(self, change: Committed) -> None:
        """Account a commit's change; the caller calls it on the loop once ``commit`` returned."""
        self.writes += change.added
        self.count += change.added - change.removed
        self.bytes += change.added_bytes - change.removed_bytes

    def _retain(self, total_bytes: int, now: float) -> tuple[int, int]:
        budget = RETENTION_ROWS_PER_COMMIT
        old = self._writer.execute(
            "DELETE FROM writes WHERE seq IN (SELECT seq FROM writes WHERE stored_at < ? "
            "ORDER BY stored_at LIMIT ?) RETURNING size",
            (now - self.retention.max_age_s, budget),
        ).fetchall()
        removed, removed_bytes = len(old), sum(s for (s,) in old)
        excess = total_bytes - removed_bytes - self.retention.max_bytes
        if excess <= 0 or removed >= budget:
            return removed, removed_bytes
        oldest = self._writer.execute(
            "SELECT seq, size FROM writes ORDER BY seq LIMIT ?", (budget - removed,)
        ).fetchall()
        last, freed = None, 0
        for seq, size in oldest:
            if freed >= excess:
                break
            last, freed = seq, freed + size
        if last is not None:
            gone = self._writer.execute("DELETE FROM writes WHERE seq <= ?", (last,)).rowcount
            removed, removed_bytes = removed + gone, removed_bytes + freed
        return removed, removed_bytes

    def close(self) -> None:
        self._reader.close()
        self._writer.close()


def _connect(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("PRAGMA busy_timeout=5000")
    return db
