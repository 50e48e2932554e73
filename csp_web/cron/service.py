"""The cron service: the job table the ``cron`` op edits, and the scheduler that runs it.

    async with open_cron(config) as cron:          # loads <state_dir>/cron.json
        ...                                         # the daemon starts cron.serve(port)

Each run submits the job's task through the daemon's ``TaskPort`` (csp_web.core.api.ports) as
peer ``cron`` (so IN:MEMORY tasks take the Memory Specialist relay), with the run key
``<job>@<scheduled time>`` as its ID. Runs
are at most once: the key is persisted before the task is sent. After each run the outcome
joins the job's history and a ``cron_run`` record goes to memory through the outbox.
A job without a task is a reminder: each run only writes a ``cron_due`` record (the job, its
run key, the scheduled time and the description) to memory through the outbox; the run is OK
once the record is in the outbox.

Missed occurrences: on start every occurrence since a job's cursor was missed; while running,
an occurrence more than ``LATE_GRACE_S`` late (the host slept, the clock stepped) was missed.
Policy ``skip`` runs none of them, ``run_once`` runs the latest one once.

Time: due-ness is decided on the injected wall clock (``now_wall``); sleeps are on trio's clock,
for the wall-clock distance to the next run, re-measured at every wake (at least once a
minute), so a stepped clock or a resumed suspend is noticed and a test's MockClock drives it.
A job never overlaps itself: an occurrence due while its previous run is still going is
recorded as a FAIL and not run.
"""

from __future__ import annotations

import datetime
import logging
from contextlib import nullcontext

import trio

from csp_web.core.api.errors import OpError
from csp_web.core.api.ports import TaskPort
from csp_web.infra.redis_link import RedisUnavailable
from protocol import ErrorCode, Task

from .claims import RunClaims, SharedCronStore, Watched
from .config import CronConfig
from .jobs import RUNNING, Job, Outcome
from .runs import RunHandle, RunResult, WallClock, clip, remember, remind
from .schedule import iso, run_key
from .store import CronStore
from .table import SCOPE, JobTable

log = logging.getLogger(__name__)

MAX_CONCURRENT_RUNS = 5  # the tool seed: "Max concurrent: 5"
# crond looks once a minute, so a run up to a minute late is on time, not missed.
LATE_GRACE_S = 60.0
# Wake at least this often to notice a wall-clock step or a resumed suspend (trio's clock is
# monotonic and stops while the host sleeps).
MAX_SLEEP_S = 60.0
_TICK = datetime.timedelta(microseconds=1)


class CronService(JobTable):
    """The job table and its scheduler; made by ``open_cron``, served by ``serve_cron``."""

    def __init__(
        self,
        config: CronConfig,
        store: CronStore | SharedCronStore,
        jobs: list[Job],
        *,
        now_wall: WallClock,
        claims: RunClaims | None = None,
    ) -> None:
        super().__init__(config, store, jobs, now_wall=now_wall)
        self._claims = claims  # the fleet's run claims (redis.url): one daemon per run key
        self._paused = False  # claims unavailable: nothing fires until Redis answers again
        self._limiter = trio.CapacityLimiter(MAX_CONCURRENT_RUNS)
        self._nursery: trio.Nursery | None = None

    async def run_now(self, job_id: str, *, owner_uid: int | None) -> RunHandle:
        """Run ``owner_uid``'s job at once, out of schedule, and wait for its reply.

        The run belongs to the scheduler: if the caller is cancelled it still completes and
        is recorded. Raises OpError: unknown_job, cron_error (already running, store failed),
        not_available (the scheduler is not running; Redis unavailable), busy (with
        ``redis.url``: a manual run of the job goes on at another daemon).
        """
        job = self.owned(job_id, owner_uid)
        if self._nursery is None:
            raise OpError(ErrorCode.NOT_AVAILABLE, "the cron scheduler is not running", scope=SCOPE)
        if job.id in self._running:
            raise OpError(ErrorCode.CRON_ERROR, f"job {job.id} is already running", scope=SCOPE)
        at = self._now()
        key = run_key(job.id, at, precise=True)
        while key in job.done:  # two manual runs within one clock tick
            at += _TICK
            key = run_key(job.id, at, precise=True)
        if self._claims is not None:
            await self._claim_manual(job.id, key, at)
        handle = self._claim(job, key, at)
        assert handle is not None
        try:
            await self._commit(lambda: self._unclaim(job, handle, at))
        except OpError:
            if self._claims is not None:
                await self._claims.release_manual(job.id)
            raise
        self._spawn(job, handle, at, manual=True)
        await handle.done.wait()
        return handle

    async def _claim_manual(self, job_id: str, key: str, at: datetime.datetime) -> None:
        """Claim the job's fleet-wide manual slot, then its run key; raises OpError busy (a
        manual run of it goes on at another daemon) or not_available (Redis)."""
        assert self._claims is not None
        try:
            if not await self._claims.claim_manual(job_id):
                detail = f"job {job_id} is being run by hand on another daemon"
                raise OpError(ErrorCode.BUSY, detail, scope=SCOPE)
            try:
                await self._claims.claim(job_id, key, at)
            except RedisUnavailable:
                await self._claims.release_manual(job_id)
                raise
        except RedisUnavailable:
            detail = "run claims unavailable (redis)"
            raise OpError(ErrorCode.NOT_AVAILABLE, detail, scope=SCOPE) from None

    # --- the scheduler ----------------------------------------------------------------------

    async def serve(
        self,
        port: TaskPort,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run due jobs until cancelled; catches up missed runs first (policy per job).

        Runs in flight are cancelled with it; their history says RUNNING until the next
        load turns that into an interrupted FAIL.
        """
        if self._nursery is not None:
            raise RuntimeError("the cron scheduler is already serving")
        try:
            async with trio.open_nursery() as nursery:
                self._port, self._nursery = port, nursery
                self._changed = trio.Event()
                await self._run_due(grace_s=0.0)  # on start every due occurrence was missed
                task_status.started()
                while True:
                    with trio.move_on_after(self._seconds_to_next()):
                        await self._changed.wait()
                    self._changed = trio.Event()
                    await self._run_due(grace_s=LATE_GRACE_S)
        finally:
            self._port = self._nursery = None

    def _seconds_to_next(self) -> float:
        if self._paused and self._claims is not None:
            return self._claims.retry_s
        times = [job.next_at for job in self._jobs.values() if job.next_at is not None]
        if not times or (self._port is not None and not self._port.accepting):
            return MAX_SLEEP_S
        seconds = (min(times) - self._now()).total_seconds()
        return min(max(seconds, 0.0), MAX_SLEEP_S)

    async def _run_due(self, *, grace_s: float) -> None:
        """Claim every due occurrence (run, or pass over as missed), persist, then start."""
        assert self._port is not None
        if not self._port.accepting:
            return  # left for the next start, where the missed policy decides
        if self._claims is not None and not await self._shared_turn():
            return  # paused: due runs wait for Redis (never run twice), cursors stay put
        now = self._now()
        due = [job for job in self.jobs() if job.next_at is not None and job.next_at <= now]
        runs: list[tuple[Job, RunHandle, datetime.datetime]] = []
        for job in due:
            assert job.next_at is not None
            latest = max(job.schedule.latest_at_or_before(now) or job.next_at, job.next_at)
            cursor, job.cursor = job.cursor, latest
            job.reschedule()
            key = run_key(job.id, latest)
            on_time = (now - latest).total_seconds() <= grace_s
            if key in job.done:
                continue
            if on_time or job.missed == "run_once":
                if self._claims is not None:
                    try:
                        if not await self._claims.claim(job.id, key, latest):
                            continue  # another daemon runs it
                    except RedisUnavailable:
                        job.cursor = cursor  # not fired here nor anywhere: due again later
                        job.reschedule()
                        self._pause()
                        break
                handle = self._claim(job, key, latest)
                if handle is not None:
                    runs.append((job, handle, latest))
            else:
                log.info("cron job %s: missed runs up to %s skipped", job.id, iso(latest))
        if not due:
            return
        try:
            await self._store.save(self._snapshot)
        except OSError as exc:  # at most once: a run whose key is not on disk does not start
            log.error("cron store write failed, %d runs not started: %s", len(runs), exc)
            for job, handle, at in runs:
                self._unclaim(job, handle, at)
            return
        for job, handle, at in runs:
            self._spawn(job, handle, at)

    def _claim(self, job: Job, key: str, at: datetime.datetime) -> RunHandle | None:
        """Mark ``key`` done and reserve the job's run slot; None if the job is running.

        The slot is taken before the key is persisted, so no other run of the job can start
        while this one waits for its write (a job never overlaps itself).
        """
        job.done.append(key)
        if job.id in self._running:
            error = "cron_error:previous run still running"
            job.record(Outcome(key, iso(at), "FAIL", error), self.config.history)
            return None
        job.record(Outcome(key, iso(at), RUNNING), self.config.history)
        handle = self._running[job.id] = RunHandle(key, trio.Event())
        return handle

    def _unclaim(self, job: Job, handle: RunHandle, at: datetime.datetime) -> None:
        """The run's key could not be persisted: it does not start (runs are at most once)."""
        error = "cron_error:store write failed"
        job.record(Outcome(handle.key, iso(at), "FAIL", error), self.config.history)
        self._release(job.id, handle)

    def _spawn(
        self, job: Job, handle: RunHandle, at: datetime.datetime, *, manual: bool = False
    ) -> None:
        assert self._nursery is not None
        self._nursery.start_soon(self._run_claimed, job, handle, at, manual)

    async def _run_claimed(
        self, job: Job, handle: RunHandle, at: datetime.datetime, manual: bool
    ) -> None:
        if self._claims is None:
            await self._run(job, handle, at)
            return
        # Renewed while it runs, then marked done; a manual run also holds its job's slot.
        manual_slot = self._claims.hold_manual(job.id) if manual else nullcontext()
        async with self._claims.hold(handle.key), manual_slot:
            await self._run(job, handle, at)

    # --- the fleet (redis.url) ----------------------------------------------------------------

    async def _shared_turn(self) -> bool:
        """Whether this wake may fire runs: Redis answers; peers' table changes adopted and
        runs orphaned by a dead daemon taken over first."""
        assert self._claims is not None
        if not self._claims.available():
            self._pause()
            return False
        try:
            if isinstance(self._store, SharedCronStore) and self._store.changed_elsewhere:
                self.adopt(await self._store.load_async())
            orphans = await self._claims.orphans()
        except RedisUnavailable:
            self._pause()
            return False
        if self._paused:
            log.info("cron firing again: run claims available")
            self._paused = False
        for orphan in orphans:
            await self._take_over(orphan)
        return True

    def _pause(self) -> None:
        if not self._paused:
            log.warning("cron paused: run claims unavailable (redis); nothing fires twice")
            self._paused = True
            assert self._claims is not None  # only the fleet's claims pause
            self._claims.paused()

    async def _take_over(self, orphan: Watched) -> None:
        """A run whose daemon died mid-way: the job's missed policy decides, as on a start."""
        job = self._jobs.get(orphan.job_id)
        if job is None or orphan.key in job.done:
            return
        if job.missed != "run_once" or job.id in self._running:
            job.done.append(orphan.key)
            error = "cron_error:its daemon stopped mid-run (missed: skip)"
            job.record(Outcome(orphan.key, iso(orphan.at), "FAIL", error), self.config.history)
            await self._save_quietly()
            assert self._claims is not None
            async with self._claims.hold(orphan.key):
                pass  # marked done: no other daemon takes it over again
            return
        log.info("cron run %s: taken over from a daemon that stopped", orphan.key)
        handle = self._claim(job, orphan.key, orphan.at)
        if handle is not None:
            await self._save_quietly()
            self._spawn(job, handle, orphan.at)

    def _release(self, job_id: str, handle: RunHandle) -> None:
        if self._running.get(job_id) is handle:
            del self._running[job_id]
        handle.done.set()

    async def _run(self, job: Job, handle: RunHandle, at: datetime.datetime) -> None:
        assert self._port is not None
        port = self._port
        try:
            task = job.task
            if task is None:
                result = await remind(port, job, handle.key, at)
                self._finish(job, handle, result, at)
                await self._save_quietly()
                return
            task = Task(
                task.req, task.domain, task.out, task.inline, (("ID", handle.key), *task.fields)
            )
            async with self._limiter:
                started = trio.current_time()
                # Under its author's uid; refused there if that uid lost its access.
                result = RunResult.of(await port.submit(task, uid=job.owner_uid))
                elapsed = trio.current_time() - started
            outcome = self._finish(job, handle, result, at)
            await self._save_quietly()
            await remember(port, job, outcome, result, elapsed)
        except Exception:  # a bug in bookkeeping must not take the scheduler (and daemon) down
            log.exception("cron run %s: recording its outcome failed", handle.key)
        finally:
            self._release(job.id, handle)

    def _finish(
        self, job: Job, handle: RunHandle, result: RunResult, at: datetime.datetime
    ) -> Outcome:
        handle.result = result
        outcome = Outcome(handle.key, iso(at), str(result.status), clip(result.error))
        job.record(outcome, self.config.history)
        return outcome
