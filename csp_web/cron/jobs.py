"""A cron job: its schedule, the CSP/1 task it runs, its cursor, run keys and outcomes.

``cursor`` is the scheduled time of the last occurrence the job ran or passed over (or the time
it was added or enabled); the next run is the first occurrence after it. ``done`` keeps the
keys of the latest runs, persisted before each run starts, so a run is at most once even when
the daemon dies in the middle of it.
"""

from __future__ import annotations

import datetime
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

from protocol import CLOSED, Connection, ProtocolError, Task, serialize

from .schedule import Schedule, ScheduleError, iso, parse_iso, parse_schedule

Missed = Literal["skip", "run_once"]
MISSED_POLICIES: tuple[Missed, ...] = ("skip", "run_once")
RUNNING = "RUNNING"  # the status of a run in flight; a load turns it into INTERRUPTED
INTERRUPTED = "cron_error:interrupted by a daemon stop"
DONE_KEYS_KEPT = 64  # far more than occurrences that can be due at once; keys are ~90 bytes
MAX_ERROR_CHARS = 300  # an ERROR line kept in history; detail is for humans, not a log


class JobTaskError(ValueError):
    """A TASK value that is not exactly one runnable CSP/1 task frame."""


def parse_job_task(text: str) -> Task:
    """The one TASK frame in ``text``; raises JobTaskError.

    The frame may not carry ``ID`` (each run is sent with its run key as ID, the Memory
    Specialist's idempotency key) nor be a cron task itself (a job that edits jobs).
    """
    codec = Connection()
    try:
        if text:
            codec.receive_data(text.encode("utf-8"))
        codec.receive_data(b"")  # EOF ends a frame without its blank line (SPEC F-6)
        first, rest = codec.next_event(), codec.next_event()
    except (ProtocolError, UnicodeEncodeError) as exc:
        raise JobTaskError(f"TASK is not a CSP/1 frame: {exc}") from None
    if not isinstance(first, Task) or rest is not CLOSED:
        raise JobTaskError("TASK must hold exactly one TASK frame")
    if first.get_all("ID"):
        raise JobTaskError("TASK may not carry ID: each run is sent with its run key as ID")
    if first.req == "cron":
        raise JobTaskError("TASK may not be a cron task")
    return first


def task_summary(task: Task | None) -> str | None:
    """``REQ:x IN:Y OUT:Z`` of a job's task; None for a reminder."""
    return None if task is None else f"REQ:{task.req} IN:{task.domain} OUT:{task.out}"


@dataclass(frozen=True)
class Outcome:
    """How one run ended: its key, scheduled (or manual) time, reply status and ERROR."""

    key: str
    at: str
    status: str
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "at": self.at, "status": self.status, "error": self.error}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Outcome:
        status, error = str(data["status"]), data.get("error")
        if status == RUNNING:
            status, error = "FAIL", INTERRUPTED
        return cls(str(data["key"]), str(data["at"]), status, error)


@dataclass
class Job:
    """One job; the service owns it and persists it after every change."""

    id: str
    schedule: Schedule
    task: Task | None  # None: a reminder, whose runs are cron_due records in memory
    description: str
    missed: Missed
    cursor: datetime.datetime
    enabled: bool = True
    owner_uid: int | None = None  # who added it: runs carry this uid, and stop if it is revoked
    done: deque[str] = field(default_factory=lambda: deque(maxlen=DONE_KEYS_KEPT))
    history: deque[Outcome] = field(default_factory=deque)
    next_at: datetime.datetime | None = None

    def reschedule(self) -> None:
        """Recompute ``next_at`` from the cursor (None while disabled)."""
        self.next_at = self.schedule.next_after(self.cursor) if self.enabled else None

    def record(self, outcome: Outcome, keep: int) -> None:
        """Add or replace (by key) the outcome of a run, keeping the latest ``keep``."""
        for index, old in enumerate(self.history):
            if old.key == outcome.key:
                self.history[index] = outcome
                return
        self.history.append(outcome)
        while len(self.history) > keep:
            self.history.popleft()

    def describe(self) -> dict[str, Any]:
        """The JSON object of this job's ``JOB`` line."""
        return {
            "id": self.id,
            "schedule": self.schedule.expr,
            "tz": self.schedule.tz,
            "enabled": self.enabled,
            "description": self.description,
            "task": task_summary(self.task),
            "next_run": iso(self.next_at) if self.next_at else None,
            "missed": self.missed,
            "owner_uid": self.owner_uid,
            "history": [outcome.to_json() for outcome in self.history],
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "schedule": self.schedule.expr,
            "tz": self.schedule.tz,
            "task": None if self.task is None else serialize(self.task).decode("utf-8"),
            "description": self.description,
            "missed": self.missed,
            "enabled": self.enabled,
            "owner_uid": self.owner_uid,
            "cursor": iso(self.cursor),
            "done": list(self.done),
            "history": [outcome.to_json() for outcome in self.history],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], keep: int) -> Job:
        """A job read back from the store; raises ValueError, KeyError or TypeError."""
        missed = data["missed"]
        if missed not in MISSED_POLICIES:
            raise ValueError(f"missed policy {missed!r}")
        try:
            schedule = parse_schedule(str(data["schedule"]), str(data["tz"]))
            task = None if data["task"] is None else parse_job_task(str(data["task"]))
        except (ScheduleError, JobTaskError) as exc:
            raise ValueError(str(exc)) from None
        job = cls(
            id=str(data["id"]),
            schedule=schedule,
            task=task,
            description=str(data["description"]),
            missed=missed,
            cursor=parse_iso(str(data["cursor"])),
            enabled=bool(data["enabled"]),
            owner_uid=_optional_int(data.get("owner_uid")),
        )
        job.done.extend(str(key) for key in data["done"])
        for item in data["history"]:
            job.record(Outcome.from_json(item), keep)
        job.reschedule()
        return job


def _optional_int(value: object) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError("owner_uid must be an integer")
    return value
