"""The full-disk seam without a tmpfs (any user): SQLite's own page limit makes a real
SQLITE_FULL, so the outbox's audit path is exercised where CI cannot mount one."""

from __future__ import annotations

import errno
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Literal

import pytest

from csp_web.config import Config
from csp_web.core.api.context import Peer
from csp_web.core.api.errors import StorageFull
from csp_web.core.api.storage import is_storage_full, storage_seam
from protocol import Reply, Status, Task
from tests.harness import open_harness, outbox_of


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_or_quota_becomes_storage_full_naming_the_store(code: int) -> None:
    with pytest.raises(StorageFull) as raised, storage_seam("media"):
        raise OSError(code, "no room")
    assert raised.value.wire_text == "storage_full:media"


def test_other_storage_errors_pass_the_seam_unchanged(tmp_path: Path) -> None:
    with pytest.raises(PermissionError), storage_seam("state"):
        raise PermissionError(errno.EACCES, "no")
    db = sqlite3.connect(tmp_path / "x.db")
    with pytest.raises(sqlite3.OperationalError, match="no such table"), storage_seam("cache"):
        db.execute("SELECT * FROM absent")
    db.close()


def test_sqlite_full_is_storage_full(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "x.db", isolation_level=None)
    db.execute("CREATE TABLE t (x)")
    db.execute(f"PRAGMA max_page_count={db.execute('PRAGMA page_count').fetchone()[0]}")
    with pytest.raises(sqlite3.OperationalError) as raised:
        db.execute("INSERT INTO t VALUES (?)", ("x" * 10_000,))
    assert is_storage_full(raised.value)
    db.close()


def _echo(task_id: str) -> Task:
    return Task("echo", "TEST", "ECHO", "hi", (("ID", task_id),))


def _error(reply: Reply) -> tuple[Status, str | None]:
    return reply.status, reply.get("ERROR")


@pytest.mark.parametrize("synchronous", ["normal", "full"])
async def test_an_op_whose_audit_finds_the_outbox_full_answers_storage_full_not_a_crash(
    config: Config, synchronous: Literal["normal", "full"]
) -> None:
    """O-6, issue 21: the audit write's SQLITE_FULL escaped the dispatcher and ended the
    daemon. Now the op whose record could not be kept answers storage_full:outbox (not
    acknowledged), IN:SYS ops keep working, and once there is room ops are OK again."""
    config = replace(config, outbox=replace(config.outbox, synchronous=synchronous))
    async with open_harness(config) as harness:
        dispatcher = harness.dispatcher
        db = outbox_of(dispatcher)._store._db
        assert _error(await dispatcher.run(_echo("ok-1"), Peer("t"))) == (Status.OK, None)
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        db.execute(f"PRAGMA max_page_count={pages}")
        replies = [await dispatcher.run(_echo(f"full-{n}"), Peer("t")) for n in range(50)]
        outcomes = {_error(r) for r in replies}  # OK while the last page has room
        assert outcomes <= {(Status.OK, None), (Status.FAIL, "storage_full:outbox")}
        assert (Status.FAIL, "storage_full:outbox") in outcomes
        ping = await dispatcher.run(Task("ping", "SYS", "PONG"), Peer("t"))
        assert ping.status is Status.OK
        db.execute(f"PRAGMA max_page_count={pages * 1000}")
        # Space is back: an IN:SYS frame's summary alone finds it (no audited op needed).
        assert (await dispatcher.run(Task("ping", "SYS", "PONG"), Peer("t"))).status is Status.OK
        assert not outbox_of(dispatcher).room.storage_full
        assert _error(await dispatcher.run(_echo("ok-2"), Peer("t"))) == (Status.OK, None)
