"""How long an op's own work may run inside its task's deadline.

The dispatcher cancels a task at its TIMEOUT_MS with ``timeout_exceeded``. An op that does
network or process work stops a little earlier, so its own FAIL, naming the real cause
(``fetch_failed:timeout``, ``mcp_unavailable``, the exec ``COMMAND`` that ran too long), goes
out instead. That reserve is internal: a ``timeout_exceeded`` reply names the budget the caller
set (``budget_ms``), never the shortened time the work was given. The grace period of a
shutdown is not such a deadline: work it bounds runs on until the dispatcher cuts it and
answers ``shutting_down`` (SPEC C-5), so no op names a failure of its own for being cut.
"""

from __future__ import annotations

import math
from contextvars import ContextVar, Token
from types import TracebackType

import trio

_budget_ms: ContextVar[int | None] = ContextVar("csp_web_task_budget_ms", default=None)
# The running task's own deadline (its budget's end) and the grace period bounding it.
_own: ContextVar[tuple[float, GracePeriod | None] | None] = ContextVar(
    "csp_web_task_own_deadline", default=None
)

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
        """End every task's work (running or yet to start) at ``deadline``, or earlier if an
        earlier call said so (a second signal's cut stands)."""
        self.deadline = deadline = min(self.deadline, deadline)
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

    __slots__ = ("_grace", "_own", "_own_token", "_scope", "_timeout_ms", "_token")

    def __init__(
        self, timeout_ms: int, *, at: float | None = None, grace: GracePeriod | None = None
    ) -> None:
        deadline = trio.current_time() + timeout_ms / 1000 if at is None else at
        self._scope = trio.CancelScope(deadline=deadline)
        if grace is not None:
            self._scope.deadline = min(deadline, grace.deadline)
        self._grace = grace
        self._timeout_ms = timeout_ms
        self._token: Token[int | None] | None = None
        self._own_token: Token[tuple[float, GracePeriod | None] | None] | None = None
        self._own = deadline

    @property
    def cancel_called(self) -> bool:
        """Whether the scope's cancel was called (its deadline passed, or a cancel)."""
        return self._scope.cancel_called

    def __enter__(self) -> trio.CancelScope:
        self._token = _budget_ms.set(self._timeout_ms)
        self._own_token = _own.set((self._own, self._grace))
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
            if self._own_token is not None:
                _own.reset(self._own_token)


def budget_ms() -> int | None:
    """The running task's budget in ms as the caller set it; None outside a task."""
    return _budget_ms.get()


def work_deadline() -> float:
    """The trio time by which the running task's own work should end: the enclosing deadline
    (the dispatcher's cancel scope) minus the reserve; ``math.inf`` when there is none. When
    the grace period is what ends the task first, the task's own deadline stands instead:
    the cut is the dispatcher's to answer."""
    now = trio.current_time()
    deadline = trio.current_effective_deadline()
    own = _own.get()
    if own is not None and own[1] is not None and deadline >= own[1].deadline:
        deadline = own[0]  # the grace period ends it first (an inner scope would end earlier)
    left = deadline - now
    if math.isinf(left):
        return math.inf
    return now + left - min(MAX_RESERVE_S, max(left, 0.0) * RESERVE_FRACTION)


def work_seconds(*, default_s: float) -> float:
    """Seconds from now to ``work_deadline()``, or ``default_s`` when no deadline is set."""
    deadline = work_deadline()
    return default_s if math.isinf(deadline) else max(deadline - trio.current_time(), 0.0)
