"""A task's budget at its start and end (SPEC D-3): opened from BUDGET, BUDGET_ID or the
uid's default before the op runs, and settled into its reply once it has one."""

from __future__ import annotations

import logging

import trio

from csp_web.config import BudgetsConfig
from csp_web.core.api.budget import Ledger, TaskBudget
from csp_web.core.api.errors import OpError
from csp_web.core.api.replies import budgeted
from protocol import ErrorCode, Reply, Task, parse_budget

log = logging.getLogger(__name__)


async def open_budget(
    task: Task, uid: int | None, settings: BudgetsConfig, ledger: Ledger | None
) -> TaskBudget | None:
    """The budget ``task`` (already validated) runs under: its BUDGET_ID's in ``ledger``
    (made with its BUDGET when not held), else its BUDGET, else ``uid``'s default; None for
    none. Raises what ``Ledger.open`` raises."""
    text = task.get("BUDGET")
    limits = parse_budget(text) if text is not None else None
    budget_id = task.get("BUDGET_ID")
    if budget_id is None:
        limits = limits or settings.default_for(uid)
        return None if limits is None else TaskBudget(limits, ledger=ledger, uid=uid)
    if ledger is None:
        raise OpError(ErrorCode.NOT_AVAILABLE, "this daemon keeps no BUDGET_IDs")
    left = await ledger.open(budget_id, uid, limits)
    return TaskBudget(left, ledger=ledger, budget_id=budget_id, uid=uid)


def wall_deadline_ms(task_budget: TaskBudget, timeout_ms: int) -> tuple[int, bool]:
    """The task's deadline in ms under ``wall_ms`` (the earlier of it and ``timeout_ms``),
    and whether the budget set it; BudgetExhausted when no wall time is left."""
    wall_ms = task_budget.left.get("wall_ms")
    if wall_ms is None or wall_ms >= timeout_ms:
        return timeout_ms, False
    task_budget.require("wall_ms")
    return wall_ms, True


async def settle(task_budget: TaskBudget, reply: Reply, began: float, wall_cut: bool) -> Reply:
    """``reply`` once the task's wall time since ``began`` (trio's clock, as its deadline)
    is charged: with BUDGET_LEFT, PARTIAL when the budget ran out (``replies.budgeted``).
    ``wall_cut``: the deadline ``wall_ms`` set is what ended it, so its ``timeout_exceeded``
    is the wall budget running out."""
    elapsed_s = trio.current_time() - began
    try:
        await task_budget.spend("wall_ms", round(elapsed_s * 1000))
    except OpError as exc:  # the ledger is unreachable: the reply says what was last seen
        log.warning("budget %s: wall time not charged (%s)", task_budget.budget_id, exc.code)
    if wall_cut and (reply.get("ERROR") or "").startswith(f"{ErrorCode.TIMEOUT_EXCEEDED}:"):
        task_budget.exhausted = task_budget.exhausted or "wall_ms"
    return budgeted(reply, task_budget)
