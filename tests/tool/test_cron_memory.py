"""A cron job whose task is IN:MEMORY, in the real daemon, reaching the real Memory Specialist.

The daemon starts the scheduler as one of the TOOL specialist's background tasks; the job's
write goes through the relay with its run key as ID, and the run's ``cron_run`` record through
the outbox. The clock is trio's MockClock, stopped: time moves only when the test jumps it,
and real socket I/O never makes a timeout fire early.
"""

from __future__ import annotations

import os

import trio
import trio.testing

from csp_web.client.trio_client import open_client
from csp_web.config import Config
from csp_web.cron import open_cron
from protocol import Reply, Status, Task
from tests.conftest import Sink, sink_records, sink_text
from tests.harness import outbox_of
from tests.tool.cron_support import TrioWall, settle, start_cron_daemon, without_linger

SWEEP = (
    "TASK REQ:write IN:MEMORY OUT:ACK\nFROM sys\nTYPE document\nPATH notes/sweep.md\nDATA swept\n"
)
SCHEDULED_KEY = "memory-daily-sweep@2026-01-10T02:00:00Z"


def _cron(*fields: tuple[str, str]) -> Task:
    return Task("cron", "TOOL", "CRON_RESULT", None, fields)


def _stored(sink: Sink, *parts: str) -> str:
    text = sink_text(sink.directory, "/".join(parts))
    assert text is not None, parts
    return text


def _cron_runs(sink: Sink) -> list[dict[str, object]]:
    records = sink_records(sink.directory, "cron-runs")
    return sorted(records, key=lambda record: str(record["key"]))


async def test_an_in_memory_job_is_stored_by_the_memory_specialist_with_its_run_key(
    config: Config, sink: Sink, sock_dir: str, mock_clock: trio.testing.MockClock
) -> None:
    config = without_linger(config)
    socket_path = os.path.join(sock_dir, "csp.sock")
    async with open_cron(config, now_wall=TrioWall()) as cron, trio.open_nursery() as nursery:
        dispatcher = await start_cron_daemon(nursery, config, cron, socket_path)
        async with open_client(socket_path) as client:
            added = await client.call(
                _cron(
                    ("ACTION", "add"),
                    ("JOB_ID", "memory-daily-sweep"),
                    ("SCHEDULE", "0 3 * * *"),
                    ("TZ", "Europe/Paris"),
                    ("TASK_DESCRIPTION", "Memory maintenance"),
                    ("TASK", SWEEP),
                )
            )
            assert added.get("JOB_ADDED") == "memory-daily-sweep", added
            ran = await client.call(_cron(("ACTION", "run"), ("JOB_ID", "memory-daily-sweep")))
        assert ran == Reply(
            Status.OK,
            (
                ("ID", ran.id or ""),  # the client's own correlation ID
                ("SCOPE", "[cron]"),
                ("DATA", "jobs:1,active:1,disabled:0"),
                ("JOB_RUN", "memory-daily-sweep"),
                ("RUN_KEY", "memory-daily-sweep@2026-01-10T00:00:30.000000Z"),
                ("RUN_STATUS", "OK"),
            ),
        )
        assert "memory-daily-sweep@2026-01-10T00:00:30.000000Z" in sink.store.ids
        assert _stored(sink, "notes", "sweep.md") == "swept\n"

        # A jump fires every pending deadline: let the outbox deliver first, so no ack wait
        # of its is cut short by the jump.
        await settle(lambda: outbox_of(dispatcher).room.depth == 0)
        mock_clock.jump(2 * 3600)  # 02:00:30 UTC: 03:00 in Paris has come
        await settle(lambda: SCHEDULED_KEY in sink.store.ids)
        assert _stored(sink, "notes", "sweep.md") == "swept\nswept\n"
        await settle(lambda: len(_cron_runs(sink)) == 2)
        records = _cron_runs(sink)
        assert [r["status"] for r in records] == ["OK", "OK"]
        assert records[1]["key"] == SCHEDULED_KEY
        nursery.cancel_scope.cancel()


async def test_an_in_memory_job_a_run_would_refuse_is_refused_at_add(
    config: Config, sink: Sink, sock_dir: str, mock_clock: trio.testing.MockClock
) -> None:
    """A relayed IN:MEMORY task is checked at add as each run checks it before the relay
    (its TIMEOUT_MS and the fields every frame may carry; review: it was not checked)."""
    socket_path = os.path.join(sock_dir, "csp.sock")
    async with open_cron(config, now_wall=TrioWall()) as cron, trio.open_nursery() as nursery:
        await start_cron_daemon(nursery, config, cron, socket_path)
        async with open_client(socket_path) as client:
            errors: list[str | None] = []
            for extra in ("TIMEOUT_MS 0\n", "TIMEOUT_MS 5\nTIMEOUT_MS 6\n", "BUDGET x\n", ""):
                added = await client.call(
                    _cron(
                        ("ACTION", "add"),
                        ("JOB_ID", f"sweep{len(errors)}"),
                        ("SCHEDULE", "0 3 * * *"),
                        ("TASK", SWEEP + extra),
                    )
                )
                errors.append(added.get("ERROR"))
        assert errors[:2] == [
            "invalid_field:TASK: invalid_field:TIMEOUT_MS below 1",
            "invalid_field:TASK: duplicate_field:TIMEOUT_MS",
        ]
        assert (errors[2] or "").startswith("invalid_field:TASK: invalid_field:BUDGET "), errors
        assert errors[3] is None  # the valid task is added
        nursery.cancel_scope.cancel()
