"""The reference Memory Specialist's SQLite store: one row per write, ID and DATA in one commit.

Blocking. A store has two connections: ``commit`` and ``sweep`` use the writer (one call at a
time, from a worker thread), every other method the reader, on the event loop's thread. WAL
lets the reader run beside a commit and see only what is committed. Each row keeps a hash of
the write's content, so a repeated ID is told apart: the same content is a duplicate (SPEC
M-2), other content a conflict (M-5). Retention deletes the oldest rows by age and by total
bytes inside the commit that pushed past a limit, a bounded number per commit.

``retention.max_bytes`` bounds the database file on disk, not only the DATA it holds: a row
costs its hash, its index entries and page slack besides (about 3x its DATA for audit
records), so retention deletes the oldest rows until the pages they take fit (the empty
store's handful of schema pages, some 28 KiB, come on top), and returns the freed pages to
the file system (``auto_vacuum=INCREMENTAL``, ``incremental_vacuum`` right after the
commit); checkpoints then shrink the file, and ``journal_size_limit`` the WAL.

Opened on a full disk (SPEC O-6), a new database cannot be set up: the store is then empty
and ``commit`` raises StorageFull until ``setup`` succeeds (each commit retries it).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import sqlite3
from dataclasses import dataclass

from csp_web.core.api.errors import OpError, StorageFull
from csp_web.core.api.storage import storage_seam
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
# Rounds of "delete the oldest, measure the pages in use" per commit: each deletes what the
# store's bytes-on-disk per DATA byte says is enough, so one or two normally do.
DISK_ROUNDS = 4
# The WAL is truncated to this after a checkpoint (SQLite's default keeps it at its peak).
WAL_LIMIT_BYTES = 4 * 1024 * 1024
_INCREMENTAL = 2  # PRAGMA auto_vacuum's value for INCREMENTAL

log = logging.getLogger(__name__)


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


def check_path(logical: str, field: str = "PATH") -> str:
    """``logical`` if it is a relative memory path; raises OpError(invalid_field) naming
    ``field``, the request field that held it."""
    parts = logical.split("/")  # not PurePosixPath: "a//b" and "a/b" must not be two keys
    if any(p in ("..", ".", "") for p in parts):
        raise OpError(ErrorCode.INVALID_FIELD, f"{field} must be relative without '..'")
    if any(part.startswith(".") for part in parts):
        raise OpError(ErrorCode.INVALID_FIELD, f"{field} parts may not start with '.'")
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
        os.chmod(path, 0o600)  # writes hold command output and audit trails: owner only
        self._reader = _connect(path)
        self.ready = False
        self._fixed_pages = 0
        with contextlib.suppress(StorageFull):
            self.setup()
        self.count, self.bytes = self.totals()
        self.writes = 0  # rows this store added since it was opened

    def setup(self) -> None:
        """Make the database (once): WAL, pages returned to the file system as rows go, and
        the tables. A store made before auto_vacuum is vacuumed once to turn it on. Raises
        StorageFull("memory")."""
        if self.ready:
            return
        db = self._writer
        with storage_seam("memory"):
            db.execute(f"PRAGMA auto_vacuum={_INCREMENTAL}")  # a new file: before its tables
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"PRAGMA journal_size_limit={WAL_LIMIT_BYTES}")
            db.executescript(_SCHEMA)
        # The empty store's pages (sqlite_master, a root per table and index, the pointer
        # map) are the file's floor: the bound is on the pages rows take beyond them.
        roots = db.execute("SELECT COUNT(*) FROM sqlite_master WHERE rootpage > 0").fetchone()
        self._fixed_pages = int(roots[0]) + 2
        self.ready = True
        if db.execute("PRAGMA auto_vacuum").fetchone()[0] != _INCREMENTAL:
            try:  # a store made before: only a VACUUM turns it on (it needs the file's size free)
                with storage_seam("memory"):
                    db.execute("VACUUM")
            except StorageFull:
                log.warning("memory store: disk full, free pages not returned until a restart")

    def totals(self) -> tuple[int, int]:
        """(rows stored, their DATA bytes), as committed."""
        if not self.ready:
            return 0, 0
        row = self._reader.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM writes").fetchone()
        return int(row[0]), int(row[1])

    def stored_hash(self, write_id: str) -> bytes | None:
        """The content hash stored under ``write_id``, or None when it is not stored."""
        if not self.ready:
            return None
        row = self._reader.execute("SELECT hash FROM writes WHERE id = ?", (write_id,)).fetchone()
        return None if row is None else bytes(row[0])

    def stored_hashes(self, ids: list[str]) -> dict[str, bytes]:
        """The content hashes stored under those of ``ids`` that are stored: one query per
        ``LOOKUP_IDS`` IDs, not one per write."""
        found: dict[str, bytes] = {}
        if not self.ready:
            return found
        for first in range(0, len(ids), LOOKUP_IDS):
            part = ids[first : first + LOOKUP_IDS]
            marks = ",".join("?" * len(part))
            query = f"SELECT id, hash FROM writes WHERE id IN ({marks})"
            found.update((str(i), bytes(h)) for i, h in self._reader.execute(query, part))
        return found

    def read(self, logical: str, max_bytes: int) -> str | None:
        """The writes at ``logical`` joined in the order stored, each ending in a newline;
        None when none is. Raises OpError(too_large) past ``max_bytes``."""
        if not self.ready:
            return None
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

    def paths(self, low: str, high: str | None, limit: int) -> list[str]:
        """Up to ``limit`` distinct stored paths from ``low`` (included) to ``high``
        (excluded; None: no end), in code point order (SQLite compares UTF-8 bytes, which
        order as the code points do). The path index serves it: a page costs its rows."""
        if not self.ready:
            return []
        bounds: tuple[str, ...] = (low,) if high is None else (low, high)
        below = "" if high is None else " AND path < ?"
        rows = self._reader.execute(
            f"SELECT DISTINCT path FROM writes WHERE path >= ?{below} ORDER BY path LIMIT ?",
            (*bounds, limit),
        )
        return [str(path) for (path,) in rows]

    @property
    def ids(self) -> set[str]:
        """Every stored ID (for tests and tools: it reads the whole table)."""
        if not self.ready:
            return set()
        return {str(i) for (i,) in self._reader.execute("SELECT id FROM writes")}

    def commit(self, rows: list[Row], now: float) -> Committed:
        """Insert ``rows`` and apply retention in one transaction: durable when this returns
        (kill -9 safe; WAL with synchronous NORMAL). An ID and its DATA land together or not
        at all. Raises StorageFull("memory") when the disk is full, sqlite3.Error otherwise,
        leaving nothing of the batch behind."""
        self.setup()
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
        if removed:
            # The pages freed leave the file, in a transaction of its own: sqlite3's execute
            # takes one step of this pragma (one page), executescript runs it to the end.
            # The batch is committed: a full disk here only leaves the pages for the next one.
            with contextlib.suppress(StorageFull), storage_seam("memory"):
                self._writer.executescript("PRAGMA incremental_vacuum")
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
        """Delete rows past the age bound, then the oldest while the DATA or the pages in use
        pass ``max_bytes`` (their pages go back to the file system after the commit). (rows,
        DATA bytes) deleted, at most ``RETENTION_ROWS_PER_COMMIT`` rows."""
        budget = RETENTION_ROWS_PER_COMMIT
        old = self._writer.execute(
            "DELETE FROM writes WHERE seq IN (SELECT seq FROM writes WHERE stored_at < ? "
            "ORDER BY stored_at LIMIT ?) RETURNING size",
            (now - self.retention.max_age_s, budget),
        ).fetchall()
        removed, removed_bytes = len(old), sum(s for (s,) in old)
        for _ in range(DISK_ROUNDS):
            left = total_bytes - removed_bytes
            excess = max(left - self.retention.max_bytes, self._excess_on_disk(left))
            if excess <= 0 or removed >= budget:
                break
            gone, freed = self._delete_oldest(excess, budget - removed)
            removed, removed_bytes = removed + gone, removed_bytes + freed
        return removed, removed_bytes

    def _excess_on_disk(self, data_bytes: int) -> int:
        """The DATA bytes to delete so that the pages rows use fit ``max_bytes`` (0: they do),
        by the store's own ratio of pages to DATA."""
        page_size, pages, free = (
            int(self._writer.execute(f"PRAGMA {name}").fetchone()[0])
            for name in ("page_size", "page_count", "freelist_count")
        )
        used = (pages - free - self._fixed_pages) * page_size
        over = used - self.retention.max_bytes
        if over <= 0 or used <= 0:
            return 0
        return max(1, over * max(data_bytes, 1) // used)

    def _delete_oldest(self, data_bytes: int, rows: int) -> tuple[int, int]:
        """Delete the oldest rows holding at least ``data_bytes`` of DATA (at most ``rows``)."""
        oldest = self._writer.execute(
            "SELECT seq, size FROM writes ORDER BY seq LIMIT ?", (rows,)
        ).fetchall()
        last, freed = None, 0
        for seq, size in oldest:
            if freed >= data_bytes:
                break
            last, freed = seq, freed + size
        if last is None:
            return 0, 0
        gone = self._writer.execute("DELETE FROM writes WHERE seq <= ?", (last,)).rowcount
        return int(gone), freed

    def close(self) -> None:
        self._reader.close()
        self._writer.close()


def _connect(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    db.execute("PRAGMA synchronous=NORMAL")  # WAL: set by setup, kept in the file
    db.execute("PRAGMA busy_timeout=5000")
    return db
