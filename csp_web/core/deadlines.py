"""How long an op's own work may run inside its task's deadline.

The dispatcher cancels a task at its TIMEOUT_MS with ``timeout_exceeded``. An op that does
network or process work stops a little earlier, so its own FAIL, naming the real cause
(``fetch_failed:timeout``, ``mcp_unavailable``, the exec ``COMMAND`` that ran too long), goes
out instead. That reserve is internal: a ``timeout_exceeded`` reply names the budget the caller
set (``budget_ms``), never the shortened time the work was given.
"""

from __future__ import annotations

import math
from contextvars import ContextVar, Token
from types import TracebackType

import trio

_budget_ms: ContextVar[int | None] = ContextVar("csp_web_task_budget_ms", default=None)
_task: ContextVar[task_deadline | None] = ContextVar("csp_web_task_deadline", default=None)

# Kept back from the task's deadline: a fifth of what is left, at most a quarter second.
RESERVE_FRACTION = 0.2
MAX_RESERVE_S = 0.25


CUT_DETAIL = "grace period over, work cancelled"  # shutting_down's detail for work it cut


class GracePeriod:
    """The deadline a shutdown sets for work still running (SPEC R-1): every task deadline
    opened with it ends at that deadline at the latest, however long its own budget. ``cut``
    counts the tasks it ended (the dispatcher answers them ``shutting_down``)."""

    def __init__(self) -> None:
        self.deadline = math.inf
        self.cut = 0
        self._scopes: set[trio.CancelScope] = set()

    def cut_at(self, deadline: float) -> None:
        """End every task's work (running or yet to start) at ``deadline``."""
        self.deadline = deadline
        for scope in self._scopes:
            scope.deadline = min(scope.deadline, deadline)

    @property
    def over(self) -> bool:
        return trio.current_time() >= self.deadline


class task_deadline:
    """A cancel scope that ends the running task ``timeout_ms`` from now, or at trio time
    ``at`` when the budget started earlier (the caller's budget, its TIMEOUT_MS or the
    default), which ``budget_ms`` reports to the work inside it; with ``grace``, at the
    grace period's end too. One scope per task: a class, not a generator, as it runs once
    per frame."""

    __slots__ = ("_grace", "_scope", "_task_token", "_timeout_ms", "_token")

    def __init__(
        self, timeout_ms: int, *, at: float | None = None, grace: GracePeriod | None = None
    ) -> None:
        deadline = trio.current_time() + timeout_ms / 1000 if at is None else at
        if grace is not None:
            deadline = min(deadline, grace.deadline)
        self._scope = trio.CancelScope(deadline=deadline)
        self._grace = grace
        self._timeout_ms = timeout_ms
        self._token: Token[int | None] | None = None
        self._task_token: Token[task_deadline | None] | None = None

    @property
    def cut_by_grace(self) -> bool:
        """Whether the grace period's end, not the task's own budget, ends this scope."""
        grace = self._grace
        return grace is not None and grace.deadline <= self._scope.deadline

    def __enter__(self) -> trio.CancelScope:
        self._token = _budget_ms.set(self._timeout_ms)
        self._task_token = _task.set(self)
        scope = self._scope.__enter__()
        if self._grace is not None:
            self._grace._scopes.add(scope)
        return scope

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        try:
            if self._grace is not None:
                self._grace._scopes.discard(self._scope)
            return self._scope.__exit__(kind, value, traceback)
        finally:
            if self._token is not None:
                _budget_ms.reset(self._token)
            if self._task_token is not None:
                _task.reset(self._task_token)


def budget_ms() -> int | None:
    """The running task's budget in ms as the caller set it; None outside a task."""
    return _budget_ms.get()


def cut_by_shutdown() -> bool:
    """Whether a shutdown's grace period, not the running task's own budget, is what ends its
    work. Work that stopped at ``work_deadline`` to report its own timeout checks this first:
    if so the stop was the shutdown's, and the task must be answered ``shutting_down`` (by the
    dispatcher, when the grace period's cut arrives), not time out."""
    task = _task.get()
    return task is not None and task.cut_by_grace


def work_deadline() -> float:
    """The trio time by which the running task's own work should end: the enclosing deadline
    (the dispatcher's cancel scope) minus the reserve; ``math.inf`` when there is none."""
    now = trio.current_time()
    left = trio.current_effective_deadline() - now
    if math.isinf(left):
        return math.inf
    return now + left - min(MAX_RESERVE_S, max(left, 0.0) * RESERVE_FRACTION)


def work_seconds(*, default_s: float) -> float:
    """Seconds from now to ``work_deadline()``, or ``default_s`` when no deadline is set."""
    deadline = work_deadline()
    return default_s if math.isinf(deadline) else max(deadline - trio.current_time(), 0.0)
