"""The cron job table as the ``cron`` op edits it: add, remove, enable, disable, list, and
the store it is persisted to (the job file, or the fleet's Redis hash with ``redis.url``).

Jobs are kept per uid: the op sees, counts and changes only the jobs whose ``owner_uid`` is
its peer's uid; another uid's job answers as a missing one (``unknown_job``). The stdin peer
(the orchestrator that started the daemon) has the daemon's own uid, so it shares that uid's
jobs with socket peers of the same uid, as it shares its board. A job stored without an
owner (by a peer with no uid, or before jobs had owners) is the daemon's own uid's to see
and change: it runs as no uid, and nobody else could manage it. Job IDs
are one namespace for the whole table (the store, the run keys and the fleet's claims are by
id), so an add of an id another uid holds is refused as a duplicate is, naming no owner.

Every change is persisted before it is answered; a failed write is undone and reported as
``cron_error``. The scheduler (``service.CronService``) extends the table with running it.
"""

from __future__ import annotations

import datetime
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

import trio

from csp_web.core.api.errors import OpError, StorageFull
from csp_web.core.api.ports import TaskPort
from csp_web.core.api.storage import is_storage_full
from protocol import ErrorCode, Task

from .claims import SharedCronStore
from .config import CronConfig
from .jobs import Job, Missed
from .runs import RunHandle, WallClock
from .schedule import UTC, Schedule
from .store import CronStore

log = logging.getLogger(__name__)

SCOPE = ("cron",)


@dataclass(frozen=True)
class NewJob:
    """What ``ACTION add`` asks for, already validated field by field."""

    id: str
    schedule: Schedule
    task: Task | None  # None: a reminder
    description: str
    missed: Missed
    owner_uid: int | None = None


class JobTable:
    """The jobs by id, their store, and the wall clock; ``_changed`` wakes the scheduler."""

    def __init__(
        self,
        config: CronConfig,
        store: CronStore | SharedCronStore,
        jobs: list[Job],
        *,
        now_wall: WallClock,
    ) -> None:
        self.config = config
        self._store = store
        self._jobs = {job.id: job for job in jobs}
        self._now_wall = now_wall
        self._running: dict[str, RunHandle] = {}
        self._changed = trio.Event()
        if isinstance(store, SharedCronStore):  # a peer's change wakes the scheduler
            store.on_change = lambda: self._changed.set()
        self._port: TaskPort | None = None

    # --- the table, as the op sees it -------------------------------------------------------

    def jobs(self) -> list[Job]:
        """Every job, by id."""
        return sorted(self._jobs.values(), key=lambda job: job.id)

    def job(self, job_id: str) -> Job:
        """The job ``job_id``, whoever owns it (the scheduler's view); raises
        OpError(unknown_job)."""
        job = self._jobs.get(job_id)
        if job is None:
            raise OpError(ErrorCode.UNKNOWN_JOB, job_id, scope=SCOPE)
        return job

    def jobs_of(self, owner_uid: int | None) -> list[Job]:
        """``owner_uid``'s jobs, by id."""
        return [job for job in self.jobs() if _belongs(job, owner_uid)]

    def owned(self, job_id: str, owner_uid: int | None) -> Job:
        """``owner_uid``'s job ``job_id``; raises OpError(unknown_job) for one that is
        missing or another uid's, alike (another uid's job is not there for this one)."""
        job = self._jobs.get(job_id)
        if job is None or not _belongs(job, owner_uid):
            raise OpError(ErrorCode.UNKNOWN_JOB, job_id, scope=SCOPE)
        return job

    def counts(self, owner_uid: int | None) -> tuple[int, int, int]:
        """``owner_uid``'s (jobs, enabled, disabled), the seed's ``DATA jobs:5,active:3,
        disabled:2``."""
        jobs = self.jobs_of(owner_uid)
        active = sum(job.enabled for job in jobs)
        return len(jobs), active, len(jobs) - active

    def is_running(self, job_id: str) -> bool:
        return job_id in self._running

    async def add(self, new: NewJob) -> Job:
        """Add and persist a job; raises OpError(cron_error) for a duplicate or a full table.

        An id is taken whoever holds it; the refusal reads the same either way and names no
        owner (ids are one namespace: the store, run keys and claims are by id)."""
        if new.id in self._jobs:
            raise OpError(ErrorCode.CRON_ERROR, f"job {new.id} exists", scope=SCOPE)
        if len(self._jobs) >= self.config.max_jobs:
            raise OpError(ErrorCode.CRON_ERROR, f"{self.config.max_jobs} jobs max", scope=SCOPE)
        self._check_task(new.task)
        job = Job(
            new.id,
            new.schedule,
            new.task,
            new.description,
            new.missed,
            self._now(),
            owner_uid=new.owner_uid,
        )
        job.reschedule()
        self._jobs[job.id] = job
        await self._commit(lambda: self._jobs.pop(job.id, None))
        return job

    async def remove(self, job_id: str, *, owner_uid: int | None) -> Job:
        """Remove ``owner_uid``'s job (a run in flight finishes); raises OpError(unknown_job,
        cron_error)."""
        job = self.owned(job_id, owner_uid)
        del self._jobs[job_id]
        await self._commit(lambda: self._jobs.setdefault(job_id, job))
        return job

    async def set_enabled(self, job_id: str, enabled: bool, *, owner_uid: int | None) -> Job:
        """Enable or disable ``owner_uid``'s job; raises OpError(unknown_job, cron_error).
        Occurrences while it was disabled are not caught up."""
        job = self.owned(job_id, owner_uid)
        if job.enabled == enabled:
            return job
        cursor = job.cursor
        job.enabled = enabled
        if enabled:
            job.cursor = max(job.cursor, self._now())
        job.reschedule()

        def undo() -> None:
            job.enabled, job.cursor = not enabled, cursor
            job.reschedule()

        await self._commit(undo)
        return job

    def adopt(self, documents: list[dict[str, object]]) -> None:
        """Take the job table another daemon saved; a job running here keeps its state."""
        jobs = {}
        for document in documents:
            try:
                job = Job.from_json(dict(document), self.config.history)
            except (KeyError, TypeError, ValueError) as exc:
                log.error("cron job %r from the shared store ignored: %s", document.get("id"), exc)
                continue
            jobs[job.id] = self._jobs[job.id] if job.id in self._running else job
        self._jobs = jobs
        self._changed.set()

    # --- persistence and time ---------------------------------------------------------------

    def _check_task(self, task: Task | None) -> None:
        port = self._port
        if task is None or port is None:
            return
        try:
            port.check(task)
        except OpError as exc:
            detail = f"TASK: {exc.code}:{exc.detail}"
            raise OpError(ErrorCode.INVALID_FIELD, detail, scope=SCOPE) from None

    def _snapshot(self) -> list[dict[str, object]]:
        return [job.to_json() for job in self.jobs()]

    async def _commit(self, undo: Callable[[], object]) -> None:
        """Persist the table and wake the scheduler; on a failed write, undo and raise."""
        try:
            await self._store.save(self._snapshot)
        except OSError as exc:
            undo()
            if is_storage_full(exc):  # SPEC O-6: the job file's disk is full
                raise StorageFull("state") from exc
            detail = f"cannot save jobs: {exc.strerror or type(exc).__name__}"
            raise OpError(ErrorCode.CRON_ERROR, detail, scope=SCOPE) from exc
        finally:
            self._changed.set()

    async def _save_quietly(self) -> None:
        try:
            await self._store.save(self._snapshot)
        except OSError as exc:
            log.error("cron store write failed: %s", exc)

    def _now(self) -> datetime.datetime:
        return self._now_wall().astimezone(UTC)


def _belongs(job: Job, uid: int | None) -> bool:
    """Whether ``uid`` owns ``job``: its owner's, or an ownerless job's (the daemon's uid)."""
    if job.owner_uid is None:
        return uid is None or uid == os.getuid()
    return job.owner_uid == uid
