"""How long an op's own work may run inside its task's deadline.

The dispatcher cancels a task at its TIMEOUT_MS with ``timeout_exceeded``. An op that does
network or process work stops a little earlier, so its own FAIL, naming the real cause
(``fetch_failed:timeout``, ``mcp_unavailable``, the exec ``COMMAND`` that ran too long), goes
out instead. That reserve is internal: a ``timeout_exceeded`` reply names the budget the caller
set (``budget_ms``), never the shortened time the work was given.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import trio

_budget_ms: ContextVar[int | None] = ContextVar("csp_web_task_budget_ms", default=None)

# Kept back from the task's deadline: a fifth of what is left, at most a quarter second.
RESERVE_FRACTION = 0.2
MAX_RESERVE_S = 0.25


@contextmanager
def task_deadline(timeout_ms: int, *, at: float | None = None) -> Iterator[trio.CancelScope]:
    """A cancel scope that ends the running task ``timeout_ms`` from now, or at trio time
    ``at`` when the budget started earlier (the caller's budget, its TIMEOUT_MS or the
    default), which ``budget_ms`` reports to the work inside it."""
    token = _budget_ms.set(timeout_ms)
    try:
        deadline = trio.current_time() + timeout_ms / 1000 if at is None else at
        with trio.move_on_at(deadline) as scope:
            yield scope
    finally:
        _budget_ms.reset(token)


def budget_ms() -> int | None:
    """The running task's budget in ms as the caller set it; None outside a task."""
    return _budget_ms.get()


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
