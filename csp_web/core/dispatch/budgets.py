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
        if limits is not None:
            return TaskBudget(limits, ledger=ledger, uid=uid)
        default = settings.default_for(uid)
        return None if default is None else TaskBudget(default, ledger=ledger, uid=uid, named=False)
    if ledger is None:
        raise OpError(ErrorCode.NOT_AVAILABLE, "this daemon keeps no BUDGET_IDs")
    left = await ledger.open(budget_id, uid, limits)
    return TaskBudget(left, ledger=ledger, budget_id=budget_id, uid=uid)


async def reserve_wall(task_budget: TaskBudget, timeout_ms: int) -> int:
    """The wall time reserved for the task, its deadline in ms: ``timeout_ms``, or what is
    left of ``wall_ms`` when less (taken now, so tasks on one BUDGET_ID at once share what is
    left, not each spend all of it); BudgetExhausted when none is left."""
    return await task_budget.reserve("wall_ms", timeout_ms)


async def settle(
    task_budget: TaskBudget, reply: Reply, began: float, wall_ms: int | None, timeout_ms: int
) -> Reply:
    """``reply`` once the task's wall time since ``began`` (trio's clock, as its deadline)
    is settled against the ``wall_ms`` reserved for it (None: a sys op, never charged): with
    BUDGET_LEFT, PARTIAL when the budget ran out (``replies.budgeted``). A deadline the
    reserve set (less than ``timeout_ms``) ending it is the wall budget running out."""
    if wall_ms is not None:
        elapsed_ms = round((trio.current_time() - began) * 1000)
        try:
            # A shutdown cancelling the task's answer would leave the reserve taken for good;
            # the settle is one ledger call, which Redis bounds by ``redis.call_timeout_s``.
            with trio.CancelScope(shield=True):
                await task_budget.settle("wall_ms", wall_ms, elapsed_ms)
        except OpError as exc:  # the ledger is unreachable: the reply says what was last seen
            log.warning("budget %s: wall time not charged (%s)", task_budget.budget_id, exc.code)
        timed_out = (reply.get("ERROR") or "").startswith(f"{ErrorCode.TIMEOUT_EXCEEDED}:")
        if wall_ms < timeout_ms and timed_out:
            task_budget.exhausted = task_budget.exhausted or "wall_ms"
    return budgeted(reply, task_budget)
