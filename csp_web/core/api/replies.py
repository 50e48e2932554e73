"""What handlers return, and the rendering of outcomes into reply frames (SPEC R-1, R-2)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace

from csp_web.core.api.audit import OpAudit, redact_userinfo, redacted
from csp_web.core.api.budget import TaskBudget
from csp_web.core.api.errors import OpError
from protocol import ErrorCode, Field, Reply, Status


@dataclass(frozen=True)
class Result:
    """A successful (or partial) outcome: the reply's SCOPE, DATA and further fields, and
    what the op adds to its audit record (never part of the reply).

    ``error`` is the ``(code, detail)`` a PARTIAL names as the cause of what is missing
    (SPEC R-2): written as ``ERROR code:detail`` right after DATA, as on a FAIL.
    """

    data: str
    scope: tuple[str, ...] = ()
    fields: tuple[Field, ...] = ()
    status: Status = Status.OK
    error: tuple[ErrorCode, str] | None = None
    audit: OpAudit | None = None


def format_scope(items: Iterable[str]) -> str:
    """``[a.com,b.org]``, the seeds' list spelling (SPEC V-5)."""
    return "[" + ",".join(items) + "]"


def cite(url: str, title: str | None) -> Field:
    """A ``CITE <url> "<title>"`` line naming a source the reply used (SPEC R-4)."""
    return ("CITE", f"{url} {json.dumps(title or '', ensure_ascii=False)}")


def _head(task_id: str | None) -> list[Field]:
    return [("ID", task_id)] if task_id is not None else []


def ok_reply(result: Result, task_id: str | None) -> Reply:
    fields = _head(task_id)
    fields += [("SCOPE", format_scope(result.scope)), ("DATA", result.data)]
    if result.error is not None:
        code, detail = result.error
        fields.append(("ERROR", f"{code}:{detail}"))
    fields += result.fields
    return Reply(result.status, tuple(fields))


def fail_reply(error: OpError, task_id: str | None) -> Reply:
    """The FAIL frame of ``error``. What it echoes of the request (the URL or ENDPOINT it
    refused, the COMMAND) has any URL's userinfo written ``***@`` (``redact_userinfo``; a
    field that is one URL, ``audit.URL_FIELDS``, by its structure, ``redact_url``, as a password
    holding a space is refused ``url_rejected:whitespace``): a refused URL's password goes
    back out in no reply, nor in the audit, which keeps ERROR.
    An OK's URLs are the gate's canonical spelling, which has no userinfo."""
    fields = _head(task_id)
    fields += [
        ("SCOPE", format_scope(error.scope)),
        ("DATA", error.data),
        ("ERROR", redact_userinfo(error.wire_text)),
        *((name, redacted(name, value)) for name, value in error.fields),
    ]
    return Reply(Status.FAIL, tuple(fields))


def with_id(reply: Reply, task_id: str | None) -> Reply:
    """``reply`` (any status) under ``task_id`` instead of its own ID (none: no ID line)."""
    fields = tuple(field for field in reply.fields if field[0] != "ID")
    if task_id is not None:
        fields = (("ID", task_id), *fields)
    return Reply(reply.status, fields)


def budgeted(reply: Reply, task_budget: TaskBudget) -> Reply:
    """``reply`` of a budgeted task: ``BUDGET_LEFT`` last (unless the op gave one, for the
    work it reports on: a research job's), and, when the budget ran out, ``PARTIAL`` with
    ``ERROR budget_exhausted:<dimension>`` in place of any other error but ``cancelled`` and
    ``shutting_down``, whatever the op made of it (SPEC D-3, R-2): what it did so far stays
    in DATA and the fields."""
    fields = list(reply.fields)
    status = reply.status
    if task_budget.exhausted is not None and not _ended_by_the_daemon(reply):
        status = Status.PARTIAL
        error = ("ERROR", f"{ErrorCode.BUDGET_EXHAUSTED}:{task_budget.exhausted}")
        fields = [field for field in fields if field[0] != "ERROR"]
        at = next((i + 1 for i, field in enumerate(fields) if field[0] == "DATA"), len(fields))
        fields.insert(at, error)
    if not any(name == "BUDGET_LEFT" for name, _ in fields):
        fields.append(("BUDGET_LEFT", task_budget.reply_text))
    return Reply(status, tuple(fields))


def _ended_by_the_daemon(reply: Reply) -> bool:
    """Whether ``reply`` says a cancel or a shutdown ended the task: what ended it, not the
    budget, is what the agent must be told."""
    code = (reply.get("ERROR") or "").partition(":")[0]
    return code in (ErrorCode.CANCELLED, ErrorCode.SHUTTING_DOWN)


def with_budget(result: Result, task_budget: TaskBudget | None) -> Result:
    """``result`` reporting on work that ran under ``task_budget`` (a research job's): its
    ``BUDGET_LEFT``, and ``PARTIAL`` with ``budget_exhausted:<dimension>`` when it ran out."""
    if task_budget is None:
        return result
    fields = (*result.fields, ("BUDGET_LEFT", task_budget.reply_text))
    if task_budget.exhausted is None:
        return replace(result, fields=fields)
    error = (ErrorCode.BUDGET_EXHAUSTED, task_budget.exhausted)
    return replace(result, fields=fields, status=Status.PARTIAL, error=error)
