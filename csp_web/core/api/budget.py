"""One budget per task (SPEC D-3, BUDGET and BUDGET_ID): what a task and the work it starts may
spend, charged where the spending happens.

The dispatcher opens a ``TaskBudget`` for a budgeted frame and makes it the running task's
(``running``, a context variable): trio copies it into every task the op starts (a research
job, a prefetch), so each charge site is one line and needs no context passed down::

    await budget.take("fetches")                 # a count, checked before the fetch starts
    limit = budget.cap("bytes", max_bytes)       # the most a body may now take
    await budget.spend("bytes", len(body))       # a cost known only after, settled

``take`` raises ``BudgetExhausted`` (an OpError: ``budget_exhausted:<dimension>``) and charges
nothing when the amount does not fit; ``spend`` always charges and, past the limit, marks the
budget exhausted without raising, since the work it pays for is done: the dispatcher answers
such a task ``PARTIAL`` with that error (never a silent overrun). Outside a budgeted task every
call does nothing.

Work still running when a cost runs out is cancelled at once (SPEC D-3). Each unit of work
that spends runs in ``work()``, whose cancel scope the budget holds: every request of the HTTP
client (a page of a multi-URL fetch, a research source, a prefetch, a model call). A charge
that finds a dimension's cost past what is left (``spend``, ``require``, a body's ``meter``),
in the task's own budget or in the shared ledger (another task's charges show in what the
ledger answers), cancels every unit, and each one ends raising ``BudgetExhausted``, which the
op keeps as that unit's failure beside the units already done. exec's command is watched
apart: it is killed once its CPU time passes the ``exec_cpu_ms`` left (exec/_runner.py). A
count refused (``take``) cancels nothing: the work already running was paid for within it,
and is what the reply is made of.

A budget without BUDGET_ID is the task's own, held in the ``TaskBudget``; one with a BUDGET_ID
lives in the daemon's ``Ledger`` (SQLite in the state dir, or Redis for a fleet), so tasks on
other connections, later cron runs and other daemons draw from the same amounts.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from typing import Protocol, TypeVar

import trio

from csp_web.core.api.errors import OpError
from protocol import ErrorCode, Task
from protocol._budget import MAX_AMOUNT, Budget, format_budget

T = TypeVar("T")


class BudgetExhausted(OpError):
    """A dimension of the task's budget has not enough left; ``dimension`` names it."""

    def __init__(self, dimension: str) -> None:
        super().__init__(ErrorCode.BUDGET_EXHAUSTED, dimension)
        self.dimension = dimension


class Ledger(Protocol):
    """Where budgets with a BUDGET_ID live; every call is one atomic step of the store.

    ``open`` makes ``budget_id`` for ``uid`` with ``limits`` when it is not held (``limits``
    None: it must be), and returns what is left of each limited dimension; it raises OpError
    ``permission_denied`` when another uid made it and FieldError when it is not held and
    no limits are given. ``charge`` adds ``amount`` to one dimension and returns what is
    left after it; ``strict``: only if it fits, else charges nothing and returns None.
    ``instant``: its calls never wait (reach no checkpoint), so an instant op may use it."""

    instant: bool

    async def open(self, budget_id: str, uid: int | None, limits: Budget | None) -> Budget: ...

    async def charge(
        self, budget_id: str, dimension: str, amount: int, *, strict: bool
    ) -> int | None: ...


class TaskBudget:
    """A task's view of its budget: the dimensions it limits and what was last seen left of
    each, its ledger entry when it has a BUDGET_ID, and the dimension it ran out of, if any."""

    __slots__ = ("_cut", "_drawn", "_units", "budget_id", "exhausted", "ledger", "left", "uid")

    def __init__(
        self,
        left: Budget,
        *,
        ledger: Ledger | None = None,
        budget_id: str | None = None,
        uid: int | None = None,
    ) -> None:
        self.left = dict(left)
        self.ledger = ledger  # where a BUDGET_ID lives (or would, once ``shared_id`` makes one)
        self.budget_id = budget_id
        self.uid = uid  # the task's uid: a BUDGET_ID made from this budget is its
        self.exhausted: str | None = None
        self._units: set[trio.CancelScope] = set()  # the work running under it (``work``)
        self._cut: str | None = None  # the cost that ran out and cancelled that work
        self._drawn: dict[str, int] = {}  # received by bodies still being read (``meter``)

    async def take(self, dimension: str, amount: int = 1) -> None:
        """Charge ``amount`` of ``dimension`` if it fits, else raise BudgetExhausted and
        charge nothing (a count checked before the work starts)."""
        if dimension not in self.left:
            return
        left = await self._charge(dimension, amount, strict=True)
        if left is None:
            self.exhausted = self.exhausted or dimension
            raise BudgetExhausted(dimension)

    async def spend(self, dimension: str, amount: int) -> None:
        """Charge ``amount`` of ``dimension`` whatever is left (a cost known only once the
        work is done); past the limit the budget is marked exhausted."""
        if dimension not in self.left or amount <= 0:
            return
        left = await self._charge(dimension, amount, strict=False)
        if left is not None and left < 0:
            self.run_out(dimension, spare=_unit.get())  # the work paid for is done: kept

    def cap(self, dimension: str, amount: int) -> int:
        """``amount``, or what was last seen left of ``dimension`` when that is less
        (never below 0): a bound to give work whose cost is settled after it."""
        left = self.left.get(dimension)
        return amount if left is None else max(0, min(amount, left))

    def require(self, dimension: str) -> None:
        """Raise BudgetExhausted when nothing was last seen left of ``dimension``: work
        whose cost is settled after it does not start on an empty budget."""
        if self.left.get(dimension, 1) <= 0:
            self.run_out(dimension)
            raise BudgetExhausted(dimension)

    def run_out(self, dimension: str, spare: trio.CancelScope | None = None) -> None:
        """Mark the budget exhausted by ``dimension`` (the first to run out names it) and
        cancel the work still running under it, but ``spare``: what it would spend is past
        the budget."""
        self.exhausted = self.exhausted or dimension
        self._cut = self._cut or dimension
        for scope in self._units:
            if scope is not spare:
                scope.cancel()

    @contextmanager
    def work(self) -> Iterator[None]:
        """A unit of work that exhaustion cancels: raises BudgetExhausted when that is how
        it ended (at once when the budget had already run out)."""
        scope = trio.CancelScope()
        self._units.add(scope)
        if self._cut is not None:
            scope.cancel()
        token = _unit.set(scope)
        try:
            with scope:
                yield
        finally:
            _unit.reset(token)
            self._units.discard(scope)
        if scope.cancelled_caught and self._cut is not None:
            raise BudgetExhausted(self._cut)

    @contextmanager
    def meter(self, dimension: str) -> Iterator[Meter]:
        """A ``Meter`` of work that spends ``dimension`` as it goes (a body being read),
        whose drawing is given back on exit, for ``spend`` to settle."""
        meter = Meter(self if dimension in self.left else None, dimension)
        try:
            yield meter
        finally:
            meter.release()

    @property
    def reply_text(self) -> str:
        """``BUDGET_LEFT``'s value: what was last seen left (SPEC D-3)."""
        return format_budget(self.left)

    async def shared_id(self) -> str:
        """The BUDGET_ID of this budget, made now in the ledger (with what is left, for the
        task's uid) when it has none: work sent later (a cron job's runs, after a restart
        too) draws from it. OpError(not_available) without a ledger."""
        if self.budget_id is None:
            if self.ledger is None:
                raise OpError(ErrorCode.NOT_AVAILABLE, "no budget ledger to share the budget in")
            budget_id = f"task.{secrets.token_hex(12)}"
            self.left = await self.ledger.open(budget_id, self.uid, dict(self.left))
            self.budget_id = budget_id
        return self.budget_id

    async def _charge(self, dimension: str, amount: int, *, strict: bool) -> int | None:
        if self.budget_id is None or self.ledger is None:
            left = self.left[dimension] - amount
            if strict and left < 0:
                return None
        else:
            charged = await self.ledger.charge(self.budget_id, dimension, amount, strict=strict)
            if charged is None:
                return None
            left = charged
        self.left[dimension] = left
        return left


class Meter:
    """What one piece of work has spent so far of a dimension (``TaskBudget.meter``)."""

    __slots__ = ("budget", "dimension", "drawn")

    def __init__(self, task_budget: TaskBudget | None, dimension: str) -> None:
        self.budget, self.dimension, self.drawn = task_budget, dimension, 0

    def draw(self, total: int) -> None:
        """Record ``total`` spent so far; once that, with what the task's other work is
        drawing, passes what was last seen left, the budget runs out (cancelling its other
        work) and BudgetExhausted is raised for this one to stop."""
        if self.budget is None:
            return
        drawn, left = self.budget._drawn, self.budget.left[self.dimension]
        drawn[self.dimension] = drawn.get(self.dimension, 0) + total - self.drawn
        self.drawn = total
        if drawn[self.dimension] > left:
            self.budget.run_out(self.dimension)
            raise BudgetExhausted(self.dimension)

    def release(self) -> None:
        """Give back what this work drew, its cost now settled or abandoned."""
        if self.budget is not None and self.drawn:
            self.budget._drawn[self.dimension] -= self.drawn


_running: ContextVar[TaskBudget | None] = ContextVar("csp_web_task_budget", default=None)
# The unit of work (``TaskBudget.work``) the running code is part of: its own charge past
# the budget, for work already done, does not cancel it.
_unit: ContextVar[trio.CancelScope | None] = ContextVar("csp_web_budget_unit", default=None)


def running() -> TaskBudget | None:
    """The running task's budget (inherited by the tasks it started); None: unbudgeted."""
    return _running.get()


def enter(task_budget: TaskBudget | None) -> Token[TaskBudget | None]:
    """Make ``task_budget`` the running one (``leave`` with the token ends it); a browser
    session's later actions enter the budget of the frame that opened it."""
    return _running.set(task_budget)


def leave(token: Token[TaskBudget | None]) -> None:
    _running.reset(token)


async def take(dimension: str, amount: int = 1) -> None:
    """``TaskBudget.take`` on the running budget, if any."""
    current = _running.get()
    if current is not None:
        await current.take(dimension, amount)


async def spend(dimension: str, amount: int) -> None:
    """``TaskBudget.spend`` on the running budget, if any."""
    current = _running.get()
    if current is not None:
        await current.spend(dimension, amount)


def cap(dimension: str, amount: int) -> int:
    """``TaskBudget.cap`` on the running budget, else ``amount``."""
    current = _running.get()
    return amount if current is None else current.cap(dimension, amount)


def left(dimension: str) -> int | None:
    """What was last seen left of ``dimension`` in the running budget; None: not limited."""
    current = _running.get()
    return None if current is None else current.left.get(dimension)


def require(dimension: str) -> None:
    """``TaskBudget.require`` on the running budget, if any."""
    current = _running.get()
    if current is not None:
        current.require(dimension)


@contextmanager
def work() -> Iterator[None]:
    """``TaskBudget.work`` on the running budget; unbudgeted work runs as it is."""
    current = _running.get()
    if current is None:
        yield
    else:
        with current.work():
            yield


@contextmanager
def meter(dimension: str) -> Iterator[Meter]:
    """``TaskBudget.meter`` on the running budget; unbudgeted, a meter that limits nothing."""
    current = _running.get()
    if current is None:
        yield Meter(None, dimension)
    else:
        with current.meter(dimension) as gauge:
            yield gauge


class HoldsBudget(Protocol):
    """Something long-lived that tasks act through (a browser session): the budget its
    work is charged to between tasks."""

    budget: TaskBudget | None


def adopt(holder: HoldsBudget) -> None:
    """Share a budget between the running task and ``holder`` (SPEC D-3: a browser session
    keeps the budget of the frame that opened it): a task with a budget of its own gives it
    to the holder; one without takes the holder's for the rest of the task (its reply then
    carries it, ``running`` being what the dispatcher settles)."""
    current = _running.get()
    if current is not None:
        holder.budget = current
    elif holder.budget is not None:
        _running.set(holder.budget)


def bound(job: Callable[[], Awaitable[T]]) -> Callable[[], Awaitable[T]]:
    """``job`` run later, in another task (a queued prefetch), under the running budget."""
    current = _running.get()
    if current is None:
        return job

    async def run() -> T:
        token = _running.set(current)
        try:
            return await job()
        finally:
            _running.reset(token)

    return run


async def inherited(task: Task) -> Task:
    """``task`` (a cron job's, sent later and after restarts) drawing from the running
    budget through its BUDGET_ID, made now if the budget has none; unchanged when
    unbudgeted or when the task names a budget of its own."""
    current = _running.get()
    if current is None or task.get("BUDGET") is not None or task.get("BUDGET_ID") is not None:
        return task
    budget_id = await current.shared_id()
    return dataclasses.replace(task, fields=(*task.fields, ("BUDGET_ID", budget_id)))


async def spend_tokens(body: bytes, fallback: int) -> None:
    """Charge ``llm_tokens`` with the ``usage.total_tokens`` of an OpenAI-compatible
    response ``body``; ``fallback`` (the request's max_tokens) when it names none, since a
    model that does not say what it used is charged the most it could have."""
    if _running.get() is not None:
        await spend("llm_tokens", _total_tokens(body, fallback))


def _total_tokens(body: bytes, fallback: int) -> int:
    try:
        usage = json.loads(body)["usage"]
        total = usage.get("total_tokens")
        if total is None:
            total = usage["prompt_tokens"] + usage["completion_tokens"]
    except (ValueError, KeyError, TypeError, AttributeError):
        return fallback
    if not isinstance(total, int) or isinstance(total, bool) or not 0 <= total <= MAX_AMOUNT:
        return fallback
    return total
