"""A cron job without TASK (the tool seed's own example) is a reminder: each run writes a
``cron_due`` record to the Memory Specialist, in the real daemon with the real sink."""

from __future__ import annotations

import json
import os

import pytest
import trio
import trio.testing

from csp_web.client.trio_client import open_client
from csp_web.config import Config
from csp_web.cron import open_cron, store_path
from protocol import Reply, Status, Task
from tests.conftest import Daemon, Sink, sink_records, sink_text
from tests.harness import outbox_of
from tests.tool.cron_support import (
    TrioWall,
    cron_config,
    open_rig,
    settle,
    start_cron_daemon,
    without_linger,
)

# The seed's example, field for field (ACTION add of "list|add|remove|enable|disable").
SEED_ADD = (
    ("ACTION", "add"),
    ("JOB_ID", "memory-daily-sweep"),
    ("SCHEDULE", "0 3 * * *"),
    ("TASK_DESCRIPTION", "Memory maintenance"),
)


def _cron(*fields: tuple[str, str]) -> Task:
    return Task("cron", "TOOL", "CRON_RESULT", None, fields)


async def test_the_seeds_add_without_task_is_accepted_as_a_reminder(
    config: Config, mock_clock: trio.testing.MockClock
) -> None:
    config = cron_config(config)
    async with open_rig(config, TrioWall()) as rig:
        added = await rig.call(*SEED_ADD)
        listed = await rig.call(("ACTION", "list"))
    assert added == Reply(
        Status.OK,
        (
            ("SCOPE", "[cron]"),
            ("DATA", "jobs:1,active:1,disabled:0"),
            ("JOB_ADDED", "memory-daily-sweep"),
            ("NEXT_RUN", "2026-01-10T03:00:00Z"),
        ),
    )
    job = json.loads(listed.get("JOB") or "")
    assert (job["task"], job["description"]) == (None, "Memory maintenance")
    with open(store_path(config), encoding="utf-8") as file:
        (stored,) = json.load(file)["jobs"]
    assert stored["task"] is None


async def test_a_reminder_survives_a_restart(
    config: Config, mock_clock: trio.testing.MockClock
) -> None:
    config = cron_config(config)
    async with open_rig(config, TrioWall()) as rig:
        await rig.call(*SEED_ADD)
    async with open_rig(config, TrioWall()) as rig:
        listed = await rig.call(("ACTION", "list"))
    assert json.loads(listed.get("JOB") or "")["id"] == "memory-daily-sweep"


async def test_each_run_of_a_reminder_is_a_cron_due_record_in_memory(
    config: Config, sink: Sink, sock_dir: str, mock_clock: trio.testing.MockClock
) -> None:
    config = without_linger(config)
    socket_path = os.path.join(sock_dir, "csp.sock")
    async with open_cron(config, now_wall=TrioWall()) as cron, trio.open_nursery() as nursery:
        dispatcher = await start_cron_daemon(nursery, config, cron, socket_path)
        async with open_client(socket_path) as client:
            assert (await client.call(_cron(*SEED_ADD))).status is Status.OK
            ran = await client.call(_cron(("ACTION", "run"), ("JOB_ID", "memory-daily-sweep")))
        manual_key = "memory-daily-sweep@2026-01-10T00:00:30.000000Z"
        assert ran.get("RUN_KEY") == manual_key
        assert ran.get("RUN_STATUS") == "OK"
        await settle(lambda: len(sink_records(sink.directory, "cron-due")) == 1)
        await settle(lambda: outbox_of(dispatcher).room.depth == 0)
        mock_clock.jump(3 * 3600)  # 03:00:30 UTC: the daily 03:00 has come
        await settle(lambda: len(sink_records(sink.directory, "cron-due")) == 2)
        records = sorted(sink_records(sink.directory, "cron-due"), key=lambda r: str(r["key"]))
        assert records == [
            {
                "job": "memory-daily-sweep",
                "key": key,
                "at": at,
                "description": "Memory maintenance",
            }
            for key, at in (
                (manual_key, "2026-01-10T00:00:30Z"),
                ("memory-daily-sweep@2026-01-10T03:00:00Z", "2026-01-10T03:00:00Z"),
            )
        ]
        assert sink_records(sink.directory, "cron-runs") == []  # the cron_due is the record
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("field", "detail"),
    [(("TYPE", "cron_due"), "TYPE"), (("PATH", "cron-due/2026-01-10/x.json"), "PATH")],
)
async def test_a_client_cannot_forge_a_cron_due_record(
    daemon: Daemon, sink: Sink, field: tuple[str, str], detail: str
) -> None:
    """M-4 covers the reminders' record type and folder too."""
    fields = {"ID": "f-1", "FROM": "client", "TYPE": "document", "PATH": "n.md", "DATA": "x"}
    fields[field[0]] = field[1]
    task = Task("write", "MEMORY", "ACK", None, tuple(fields.items()))
    async with open_client(daemon.socket_path) as client:
        reply = await client.call(task, timeout_s=20)
    assert reply.status is Status.FAIL
    assert (reply.get("ERROR") or "").startswith(f"invalid_field:{detail}")
    # Not relayed; the daemon's own audit record of the refusal may be stored by now.
    assert "f-1" not in sink.store.ids
    assert sink_text(sink.directory, fields["PATH"]) is None
