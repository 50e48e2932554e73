"""Cron jobs for the Tool specialist: CSP/1 tasks run on five-field schedules.

    async with open_cron(config) as cron:                      # reads <state_dir>/cron.json
        background = serve_cron(cron)     # the daemon runs it with its TaskPort
        job = await cron.add(NewJob(id, parse_schedule("0 3 * * *", "Europe/Paris"), task, ...))

Modules: ``schedule`` (croniter in a zone, UTC times, run keys), ``jobs`` (a job, its task,
outcomes and JSON form), ``store`` (the atomically replaced job file), ``table`` (the jobs the
op edits, persisted), ``service`` (the scheduler that runs them), ``runs`` (what a finished run
leaves: its result and memory records), ``claims`` (the fleet's job hash and run claims,
``redis.url``), ``lifecycle`` (opening and serving it), ``config`` (its settings).
"""

from .config import CronConfig, cron_section
from .jobs import MISSED_POLICIES, Job, JobTaskError, Missed, Outcome, parse_job_task
from .lifecycle import open_cron, serve_cron, store_path
from .runs import RunHandle, RunResult, WallClock, system_now
from .schedule import Schedule, ScheduleError, iso, parse_schedule, run_key
from .service import CronService
from .store import CronStore, CronStoreError
from .table import NewJob

__all__ = [
    "MISSED_POLICIES",
    "CronConfig",
    "CronService",
    "CronStore",
    "CronStoreError",
    "Job",
    "JobTaskError",
    "Missed",
    "NewJob",
    "Outcome",
    "RunHandle",
    "RunResult",
    "Schedule",
    "ScheduleError",
    "WallClock",
    "cron_section",
    "iso",
    "open_cron",
    "parse_job_task",
    "parse_schedule",
    "run_key",
    "serve_cron",
    "store_path",
    "system_now",
]
