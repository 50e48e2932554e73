"""One run's ends: how it finished (``RunResult``), the handle a manual run waits on, and the
records a run leaves in memory through the outbox (``cron_run``, a reminder's ``cron_due``).

The scheduler (``service``) decides when a run starts and who claims it; these functions only
say what a finished run leaves behind. Neither raises: a lost record is logged, never a
scheduler crash.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from dataclasses import dataclass

import trio

from csp_web.core.api.errors import OpError
from csp_web.core.api.ports import TaskPort
from csp_web.core.api.records import json_record, make_write
from protocol import Reply, Status

from .jobs import MAX_ERROR_CHARS, Job, Outcome, task_summary
from .schedule import UTC, iso

log = logging.getLogger(__name__)

WallClock = Callable[[], datetime.datetime]


def system_now() -> datetime.datetime:
    return datetime.datetime.now(UTC)


@dataclass(frozen=True)
class RunResult:
    """How a run ended: the status, DATA and ERROR of its task's reply, or of the reminder's
    record (cron builds no reply frame of its own)."""

    status: Status
    data: str | None = None
    error: str | None = None

    @classmethod
    def of(cls, reply: Reply) -> RunResult:
        return cls(reply.status, reply.get("DATA"), reply.get("ERROR"))


@dataclass
class RunHandle:
    """A run in flight; ``result`` is set when ``done`` is."""

    key: str
    done: trio.Event
    result: RunResult | None = None


async def remind(port: TaskPort, job: Job, key: str, at: datetime.datetime) -> RunResult:
    """A reminder's run: its ``cron_due`` record, queued for the Memory Specialist."""
    record = json_record(job=job.id, key=key, at=iso(at), description=job.description)
    write = make_write("tool", "cron_due", "cron-due", record, suffix=".json")
    try:
        await port.remember(write)
    except OpError as exc:
        log.error("cron_due record of %s lost: %s", key, exc)
        return RunResult(Status.FAIL, exc.data, exc.wire_text)
    return RunResult(Status.OK, f"cron_due:{write.id}")


async def remember(
    port: TaskPort, job: Job, outcome: Outcome, result: RunResult, seconds: float
) -> None:
    """The ``cron_run`` record of a finished task run, queued for the Memory Specialist."""
    record = json_record(
        job=job.id,
        key=outcome.key,
        at=outcome.at,
        task=task_summary(job.task),
        status=outcome.status,
        error=outcome.error,
        data=clip(result.data),
        duration_ms=round(seconds * 1000, 3),
    )
    write = make_write("tool", "cron_run", "cron-runs", record, suffix=".json")
    try:
        await port.remember(write)
    except OpError as exc:
        log.error("cron_run record of %s lost: %s", outcome.key, exc)


def clip(text: str | None) -> str | None:
    """``text`` cut to what a job's history keeps of an ERROR or DATA line."""
    if text is None or len(text) <= MAX_ERROR_CHARS:
        return text
    return text[: MAX_ERROR_CHARS - 3] + "..."
