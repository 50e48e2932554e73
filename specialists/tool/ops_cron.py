"""The ``cron`` op (IN:TOOL, OUT:CRON_RESULT): list, add, remove, enable, disable or run jobs.

    TASK REQ:cron IN:TOOL OUT:CRON_RESULT
    ACTION add
    JOB_ID memory-daily-sweep
    SCHEDULE "0 3 * * *"
    TZ Europe/Paris
    TASK_DESCRIPTION "Memory maintenance"
    TASK "TASK REQ:write IN:MEMORY OUT:ACK\\nFROM sys\\nTYPE document\\nPATH sweep.md\\nDATA x"

    STATUS OK
    SCOPE [cron]
    DATA jobs:1,active:1,disabled:0
    JOB_ADDED memory-daily-sweep
    NEXT_RUN 2026-01-10T02:00:00Z

Every reply carries the seed's ``DATA jobs:N,active:N,disabled:N`` as it stands after the
action. ``list`` adds one ``JOB <json>`` line per job; ``run`` adds ``JOB_RUN``, ``RUN_KEY``,
``RUN_STATUS`` and, when the job's task failed, ``RUN_ERROR`` (the cron op itself is OK: it
ran the job). TOOL opens the service (``ToolServices.cron``) and runs its scheduler.

Jobs are the caller's uid's (``csp_web.cron.table``): ``list`` shows and counts only its
jobs, and another uid's job is ``unknown_job`` to every per-job action. The stdin peer has
the daemon's own uid, whose jobs also include any stored without an owner.

Without ``TASK`` (the seed's own example) the job is a reminder: each run writes a
``cron_due`` record (job, run key, scheduled time, description) to the Memory Specialist.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import replace

from csp_web.core.api import budget
from csp_web.core.api.context import OpContext
from csp_web.core.api.errors import OpError
from csp_web.core.api.fields import Example, FieldSpec, Params, ReplyField
from csp_web.core.api.ops import Effects, Op
from csp_web.core.api.replies import Result
from csp_web.cron import (
    MISSED_POLICIES,
    CronService,
    Job,
    JobTaskError,
    NewJob,
    ScheduleError,
    iso,
    open_cron,
    parse_job_task,
    parse_schedule,
    serve_cron,
)
from protocol import ErrorCode, Field

from .services import ToolServices

__all__ = ["OPS", "open_cron", "serve_cron"]

SCOPE = ("cron",)
JOB_ID = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
ACTIONS = ("list", "add", "remove", "enable", "disable", "run")
ADD_ONLY = ("SCHEDULE", "TZ", "TASK_DESCRIPTION", "TASK", "MISSED")


def cron_service(tool: ToolServices) -> CronService:
    service = tool.cron
    if service is None:
        raise OpError(ErrorCode.NOT_AVAILABLE, "cron is not configured", scope=SCOPE)
    return service


def _invalid(detail: str) -> OpError:
    return OpError(ErrorCode.INVALID_FIELD, detail, scope=SCOPE)


def _job_id(params: Params, *, required: bool) -> str | None:
    job_id = params.opt_text("JOB_ID")
    if job_id is None:
        if required:
            raise OpError(ErrorCode.MISSING_FIELD, "JOB_ID", scope=SCOPE)
        return None
    if not JOB_ID.fullmatch(job_id):
        raise _invalid("JOB_ID must match [a-z0-9][a-z0-9._-]{0,63}")
    return job_id


def _check_applies(params: Params, action: str) -> None:
    if action == "add":
        return
    for name in ADD_ONLY:
        if name in params:
            raise _invalid(f"{name} applies only to ACTION add")


def _counts(service: CronService, uid: int | None) -> str:
    jobs, active, disabled = service.counts(uid)
    return f"jobs:{jobs},active:{active},disabled:{disabled}"


def _result(service: CronService, uid: int | None, *fields: Field) -> Result:
    return Result(_counts(service, uid), SCOPE, tuple(fields))


def _next_run(job: Job) -> tuple[Field, ...]:
    return (("NEXT_RUN", iso(job.next_at)),) if job.next_at else ()


def _new_job(params: Params, service: CronService) -> NewJob:
    job_id = _job_id(params, required=True)
    assert job_id is not None
    if "SCHEDULE" not in params:
        raise OpError(ErrorCode.MISSING_FIELD, "SCHEDULE", scope=SCOPE)
    try:
        schedule = parse_schedule(params.text("SCHEDULE"), params.opt_text("TZ"))
        task = parse_job_task(params.text("TASK")) if "TASK" in params else None
    except (ScheduleError, JobTaskError) as exc:
        raise _invalid(str(exc)) from None
    missed = params.opt_text("MISSED") or service.config.default_missed
    assert missed in MISSED_POLICIES
    description = params.opt_text("TASK_DESCRIPTION") or ""
    return NewJob(job_id, schedule, task, description, missed)


async def _list(service: CronService, params: Params, uid: int | None) -> Result:
    job_id = _job_id(params, required=False)
    jobs = [service.owned(job_id, uid)] if job_id else service.jobs_of(uid)
    lines = [("JOB", _job_json(job, service)) for job in jobs]
    return _result(service, uid, *lines)


def _job_json(job: Job, service: CronService) -> str:
    described = job.describe()
    described["running"] = service.is_running(job.id)
    return json.dumps(described, ensure_ascii=False, separators=(",", ":"))


async def _remove(service: CronService, params: Params, uid: int | None) -> Result:
    job = await service.remove(_required_id(params), owner_uid=uid)
    return _result(service, uid, ("JOB_REMOVED", job.id))


async def _enable(service: CronService, params: Params, uid: int | None) -> Result:
    job = await service.set_enabled(_required_id(params), True, owner_uid=uid)
    return _result(service, uid, ("JOB_ENABLED", job.id), *_next_run(job))


async def _disable(service: CronService, params: Params, uid: int | None) -> Result:
    job = await service.set_enabled(_required_id(params), False, owner_uid=uid)
    return _result(service, uid, ("JOB_DISABLED", job.id))


async def _run(service: CronService, params: Params, uid: int | None) -> Result:
    job_id = _required_id(params)
    handle = await service.run_now(job_id, owner_uid=uid)
    if handle.result is None:
        raise OpError(ErrorCode.CRON_ERROR, f"run {handle.key} was interrupted", scope=SCOPE)
    fields: list[Field] = [
        ("JOB_RUN", job_id),
        ("RUN_KEY", handle.key),
        ("RUN_STATUS", str(handle.result.status)),
    ]
    error = handle.result.error
    if error is not None:
        fields.append(("RUN_ERROR", error))
    return _result(service, uid, *fields)


def _required_id(params: Params) -> str:
    job_id = _job_id(params, required=True)
    assert job_id is not None
    return job_id


# Each gets the caller's uid: it sees and changes only that uid's jobs.
_HANDLERS: dict[str, Callable[[CronService, Params, int | None], Awaitable[Result]]] = {
    "list": _list,
    "remove": _remove,
    "enable": _enable,
    "disable": _disable,
    "run": _run,
}


async def cron(params: Params, ctx: OpContext, tool: ToolServices) -> Result:
    service = cron_service(tool)
    action = params.text("ACTION")
    _check_applies(params, action)
    if action == "add":  # the job will run under its author's uid, and draw on its budget
        new = _new_job(params, service)
        task = new.task and await budget.inherited(new.task)
        job = await service.add(replace(new, owner_uid=ctx.peer.uid, task=task))
        return _result(service, ctx.peer.uid, ("JOB_ADDED", job.id), *_next_run(job))
    return await _HANDLERS[action](service, params, ctx.peer.uid)


CRON_REPLIES = (
    ReplyField("JOB", "list: one per job", "the job as JSON", repeat=True),
    ReplyField("JOB_ADDED", "add", "the job's id"),
    ReplyField("JOB_REMOVED", "remove", "the job's id"),
    ReplyField("JOB_ENABLED", "enable", "the job's id"),
    ReplyField("JOB_DISABLED", "disable", "the job's id"),
    ReplyField("NEXT_RUN", "add, enable: when it has a next run", "its time (ISO 8601, UTC)"),
    ReplyField("JOB_RUN", "run", "the job's id"),
    ReplyField("RUN_KEY", "run", "the run's key"),
    ReplyField("RUN_STATUS", "run", "the status of the task it ran"),
    ReplyField("RUN_ERROR", "run, when the task failed", "its ERROR"),
)
CRON_EXAMPLE = Example(
    (
        "TASK REQ:cron IN:TOOL OUT:CRON_RESULT\n"
        "ID 1\n"
        "ACTION add\n"
        "JOB_ID tides\n"
        'SCHEDULE "0 6 * * *"\n'
        'TASK_DESCRIPTION "check the tide tables"\n'
    ),
    (
        "STATUS OK\n"
        "ID 1\n"
        "SCOPE [cron]\n"
        "DATA jobs:1,active:1,disabled:0\n"
        "JOB_ADDED tides\n"
        "NEXT_RUN 2026-01-01T00:00:00Z\n"
    ),
)


OPS: list[Op[ToolServices]] = [
    Op(
        "cron",
        "TOOL",
        "CRON_RESULT",
        "tool",
        cron,
        (
            FieldSpec("ACTION", "choice", required=True, choices=ACTIONS),
            FieldSpec("JOB_ID", max_chars=64, doc="[a-z0-9][a-z0-9._-]{0,63}"),
            # Five cron fields fit in far less; the cap stops a megabyte of commas.
            FieldSpec("SCHEDULE", max_chars=128, doc='5-field cron, e.g. "0 3 * * *"'),
            FieldSpec("TZ", max_chars=64, doc="IANA zone of SCHEDULE (default UTC)"),
            FieldSpec("TASK_DESCRIPTION", max_chars=500),  # the seed's 500-char summaries
            # A whole CSP/1 task frame; 16 KiB keeps 100 jobs' file under 2 MB.
            FieldSpec(
                "TASK",
                max_chars=16 * 1024,
                doc="the CSP/1 task frame the job runs; without it, a reminder (cron_due)",
            ),
            FieldSpec("MISSED", "choice", choices=MISSED_POLICIES, doc="default from config"),
        ),
        inline="ACTION",
        replies=CRON_REPLIES,
        example=CRON_EXAMPLE,
        doc="manage cron jobs that run CSP/1 tasks; list, add, remove, enable, disable, run",
        # Remove deletes a job; run runs any task, which may reach the web.
        effects=Effects(),
    )
]
