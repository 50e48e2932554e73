"""The embedded ledger of BUDGET_IDs: one SQLite file in the state dir (``budgets.sqlite3``).

One row per BUDGET_ID: its owner, when it was last used, and a limit and a spent amount per
dimension (a NULL limit: not limited). A charge is one ``UPDATE ... RETURNING`` whose WHERE
clause holds the check, so check-and-charge is atomic without a transaction of its own (a
charge of what is left, ``take_up_to``, reads then writes in one ``BEGIN IMMEDIATE``); a task
opening its budget reads one row (its owner and idle time in the WHERE clause). Idle ids are
deleted when an id is made (the count bound is judged then) or found idle.

Calls run on the trio thread: each statement takes microseconds (WAL, ``synchronous=NORMAL``:
a commit writes the log without fsync, so a killed daemon keeps every charge and only a power
loss may lose the last ones), where a worker thread's hop costs more than the statement
(bench/budget.py measures a task's ledger cost). The file opens on first use, so a daemon
whose frames name no BUDGET_ID never makes it.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable

from csp_web.config import BudgetsConfig
from csp_web.core.api.errors import Busy, FieldError, OpError
from csp_web.core.api.storage import storage_seam
from protocol import DIMENSIONS, ErrorCode
from protocol._budget import Budget

LEDGER_FILE = "budgets.sqlite3"

_COLUMNS = ", ".join(f"lim_{d} INTEGER, used_{d} INTEGER NOT NULL DEFAULT 0" for d in DIMENSIONS)
_SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS budgets (id TEXT PRIMARY KEY, uid INTEGER, touched REAL NOT NULL,"
    f" {_COLUMNS})",
    "CREATE INDEX IF NOT EXISTS budgets_touched ON budgets (touched)",
    "CREATE INDEX IF NOT EXISTS budgets_uid ON budgets (uid)",
)
_LEFT = ", ".join(f"lim_{d} - used_{d}" for d in DIMENSIONS)
_HELD = f"SELECT touched, {_LEFT} FROM budgets WHERE id = ? AND uid IS ? AND touched > ?"
# One statement per dimension and kind, made once: the column names come from DIMENSIONS.
# A non-strict charge (a refund, or ``take_up_to``'s) is clamped to 0..limit: what is left
# never goes below 0, whatever a caller charges.
_CHARGE = {
    (d, strict): f"UPDATE budgets SET used_{d} = max(0, min(used_{d} + ?1, lim_{d})),"
    f" touched = ?2 WHERE id = ?3"
    f" AND lim_{d} IS NOT NULL{f' AND used_{d} + ?1 <= lim_{d}' if strict else ''}"
    f" RETURNING lim_{d} - used_{d}"
    for d in DIMENSIONS
    for strict in (True, False)
}

_LEFT_OF = {d: f"SELECT lim_{d} - used_{d} FROM budgets WHERE id = ?" for d in DIMENSIONS}


class LocalLedger:
    """BUDGET_IDs in ``<state_dir>/budgets.sqlite3`` (``Ledger``); closed by its owner."""

    instant = True  # no call awaits anything: an instant op's budget may live here

    def __init__(
        self,
        state_dir: str,
        settings: BudgetsConfig,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = os.path.join(state_dir, LEDGER_FILE)
        self._settings = settings  # its bounds and TTL hold for the daemon's life
        self._clock = clock  # wall time: a BUDGET_ID's age must survive a restart
        self._db: sqlite3.Connection | None = None

    async def open(self, budget_id: str, uid: int | None, limits: Budget | None) -> Budget:
        with storage_seam("state"):
            db = self._connected()
            now = self._clock()
            ttl_s = self._settings.idle_ttl_s
            # The common case reads only: held by this uid and not idle past the TTL. Its idle
            # time is written when a charge is (each sets it) or once a 64th of the TTL is
            # gone, so a task that charges nothing costs no write (bench/budget.py).
            found = db.execute(_HELD, (budget_id, uid, now - ttl_s)).fetchone()
            if found is None:
                return self._open_other(db, budget_id, uid, limits, now)
            if found[0] < now - ttl_s / 64:
                db.execute("UPDATE budgets SET touched = ? WHERE id = ?", (now, budget_id))
            return {
                d: left for d, left in zip(DIMENSIONS, found[1:], strict=True) if left is not None
            }

    def _open_other(
        self,
        db: sqlite3.Connection,
        budget_id: str,
        uid: int | None,
        limits: Budget | None,
        now: float,
    ) -> Budget:
        """``open`` of an id this uid does not hold: another uid's, or none (made now)."""
        self._expire(db, now)  # an idle one is forgotten, this id's too
        owner = db.execute("SELECT uid FROM budgets WHERE id = ?", (budget_id,)).fetchone()
        if owner is not None:
            raise OpError(ErrorCode.PERMISSION_DENIED, f"BUDGET_ID {budget_id} is another uid's")
        if limits is None:
            raise FieldError(ErrorCode.INVALID_FIELD, f"BUDGET_ID {budget_id} not held")
        self._make_room(db, uid)
        self._insert(db, budget_id, uid, limits, now)
        return dict(limits)

    async def charge(
        self, budget_id: str, dimension: str, amount: int, *, strict: bool
    ) -> int | None:
        with storage_seam("state"):
            statement = _CHARGE[dimension, strict]
            row = (
                self._connected().execute(statement, (amount, self._clock(), budget_id)).fetchone()
            )
        return None if row is None else int(row[0])

    async def take_up_to(
        self, budget_id: str, dimension: str, amount: int
    ) -> tuple[int, int] | None:
        with storage_seam("state"):
            db = self._connected()
            db.execute("BEGIN IMMEDIATE")  # another daemon on this state dir waits its turn
            try:
                row = db.execute(_LEFT_OF[dimension], (budget_id,)).fetchone()
                if row is None or row[0] is None:
                    return None
                taken = min(amount, max(0, int(row[0])))
                db.execute(_CHARGE[dimension, False], (taken, self._clock(), budget_id))
                return taken, int(row[0]) - taken
            finally:
                db.execute("COMMIT")

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def _connected(self) -> sqlite3.Connection:
        if self._db is None:
            os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            os.chmod(self.path, 0o600)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            for statement in _SCHEMA:
                db.execute(statement)
            self._db = db
        return self._db

    def _expire(self, db: sqlite3.Connection, now: float) -> None:
        db.execute("DELETE FROM budgets WHERE touched <= ?", (now - self._settings.idle_ttl_s,))

    def _make_room(self, db: sqlite3.Connection, uid: int | None) -> None:
        """Busy when the ledger, or ``uid``'s share of it, is full (idle ones were expired)."""
        settings = self._settings
        (held,) = db.execute("SELECT count(*) FROM budgets").fetchone()
        if held >= settings.max_ids:
            raise Busy(ErrorCode.BUSY, f"{settings.max_ids} BUDGET_IDs held")
        (own,) = db.execute("SELECT count(*) FROM budgets WHERE uid IS ?", (uid,)).fetchone()
        if own >= settings.max_ids_per_uid:
            raise Busy(ErrorCode.BUSY, f"{settings.max_ids_per_uid} BUDGET_IDs held by uid {uid}")

    @staticmethod
    def _insert(
        db: sqlite3.Connection, budget_id: str, uid: int | None, limits: Budget, now: float
    ) -> None:
        names = ", ".join(f"lim_{d}" for d in limits)
        marks = ", ".join("?" for _ in limits)
        db.execute(
            f"INSERT INTO budgets (id, uid, touched, {names}) VALUES (?, ?, ?, {marks})",
            (budget_id, uid, now, *limits.values()),
        )
