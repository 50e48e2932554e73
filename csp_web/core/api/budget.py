"""One budget per task (SPEC D-3, BUDGET and BUDGET_ID): what a task and the work it starts may
spend, charged where the spending happens.

The dispatcher opens a ``TaskBudget`` for a budgeted frame and makes it the running task's
(``running``, a context variable): trio copies it into every task the op starts (a research
job, a prefetch), so each charge site is one line and needs no context passed down::

    await budget.take("fetches")                 # a count, checked before the fetch starts
    limit = await budget.reserve("bytes", most)  # the most a body may take, taken now
    await budget.settle("bytes", limit, len(body))  # the rest given back once it is known

``take`` raises ``BudgetExhausted`` (an OpError: ``budget_exhausted:<dimension>``) and charges
nothing when the amount does not fit; ``reserve`` takes the amount or what is left when less
(BudgetExhausted when none is), so tasks drawing on one BUDGET_ID at once never each spend
the same amount; ``spend`` (and a ``settle`` past its reserve) charges what fits and, past the
limit, marks the budget exhausted without raising, since the work it pays for is done: the
dispatcher answers such a task ``PARTIAL`` with that error. What is left never goes below 0.
Outside a budgeted task every call does nothing.

Work still running when a cost runs out is cancelled at once (SPEC D-3). Each unit of work
that spends runs in ``work()``, whose cancel scope the budget holds: every request of the HTTP
client (a page of a multi-URL fetch, a research source, a prefetch, a model call). A charge
that finds a dimension's cost past what is left (``spend``, ``require``, a reserve that finds
nothing, a body past its reserve), in the task's own budget or in the shared ledger (another
task's charges show in what the ledger answers), cancels every unit that does not hold a
reserve of all it will spend (a body whose whole declared length is reserved:
``reserve_whole``), and each one ends raising ``BudgetExhausted``, which the op keeps as that
unit's failure beside the units already done. A paid unit finishes and is kept: what it spends
is already taken, so letting it finish overspends nothing, and cancelling it would make what a
task keeps depend on which of its bodies' headers came first. exec's command is watched apart:
it is killed once its CPU time passes the ``exec_cpu_ms`` left (exec/_runner.py). A
count refused (``take``) cancels nothing: the work already running was paid for within it,
and is what the reply is made of.

A budget without BUDGET_ID is the task's own, held in the ``TaskBudget``; one with a BUDGET_ID
lives in the daemon's ``Ledger`` (SQLite in the state dir, or Redis for a fleet), so tasks on
other connections, later cron runs and other daemons draw from the same amounts.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from typing import Protocol, TypeVar

import trio

from csp_web.core.api import peer_json
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
    A refund is a negative non-strict ``charge``; ``take_up_to`` is how everything else is
    charged, so what is left never goes below 0.
    ``instant``: its calls never wait (reach no checkpoint), so an instant op may use it."""

    instant: bool

    async def open(self, budget_id: str, uid: int | None, limits: Budget | None) -> Budget: ...

    async def charge(
        self, budget_id: str, dimension: str, amount: int, *, strict: bool
    ) -> int | None: ...

    async def take_up_to(
        self, budget_id: str, dimension: str, amount: int
    ) -> tuple[int, int] | None:
        """Charge ``amount`` of ``dimension``, or what is left of it when less (never below
        0 left): ``(taken, left after)``; None when ``budget_id`` is not held (any more)."""
        ...


class TaskBudget:
    """A task's view of its budget: the dimensions it limits and what was last seen left of
    each, its ledger entry when it has a BUDGET_ID, and the dimension it ran out of, if any."""

    __slots__ = (
        "_cut",
        "_paid",
        "_units",
        "budget_id",
        "exhausted",
        "ledger",
        "left",
        "named",
        "uid",
    )

    def __init__(
        self,
        left: Budget,
        *,
        ledger: Ledger | None = None,
        budget_id: str | None = None,
        uid: int | None = None,
        named: bool = True,
    ) -> None:
        self.left = dict(left)
        self.named = named  # the frame named it (False: its uid's default, the task's alone)
        self.ledger = ledger  # where a BUDGET_ID lives (or would, once ``shared_id`` makes one)
        self.budget_id = budget_id
        self.uid = uid  # the task's uid: a BUDGET_ID made from this budget is its
        self.exhausted: str | None = None
        self._units: set[trio.CancelScope] = set()  # the work running under it (``work``)
        # The units holding all they will spend (``reserve_whole``): a run-out spares them.
        self._paid: set[trio.CancelScope] = set()
        self._cut: str | None = None  # the cost that ran out and cancelled that work

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
        """Charge ``amount`` of ``dimension``, as much of it as is left (a cost known only
        once the work is done); when it did not all fit, or the BUDGET_ID is gone, the
        budget is marked exhausted (what is left never goes below 0)."""
        if dimension not in self.left or amount <= 0:
            return
        if await self._take_up_to(dimension, amount) < amount:
            self.run_out(dimension, spare=_unit.get())  # the work paid for is done: kept

    async def reserve(self, dimension: str, amount: int, *, fallback: bool = False) -> int:
        """Take ``amount`` of ``dimension`` now, or what is left when less, before work
        whose cost is settled after it: the bound to give that work (a body's cap, a
        model's max_tokens, a deadline), ``settle`` it after. Tasks drawing on one
        BUDGET_ID at once each get their own share, never the same bytes twice.
        BudgetExhausted when none is left, the task's other work cancelled (``fallback``: 0,
        the budget not marked exhausted, for a caller that does its work another way);
        ``amount`` when ``dimension`` is not limited."""
        if dimension not in self.left:
            return amount
        taken = await self._take_up_to(dimension, amount) if amount else 0
        if taken <= 0 < amount and not fallback:
            self.run_out(dimension, spare=_unit.get())  # a cost ran out: the rest is cancelled
            raise BudgetExhausted(dimension)
        return taken

    async def settle(self, dimension: str, reserved: int, used: int) -> None:
        """Settle a ``reserve`` of ``reserved`` by what the work ``used``: the rest goes
        back to the budget; past it, the excess is ``spend``'s."""
        if dimension not in self.left:
            return
        if used < reserved:
            await self._refund(dimension, reserved - used)
        elif used > reserved:
            await self.spend(dimension, used - reserved)

    def require(self, dimension: str) -> None:
        """Raise BudgetExhausted when nothing was last seen left of ``dimension``: work
        that reserves its cost only once it knows it (a body, after its headers) does not
        start on an empty budget."""
        if self.left.get(dimension, 1) <= 0:
            self.run_out(dimension)
            raise BudgetExhausted(dimension)

    def run_out(self, dimension: str, spare: trio.CancelScope | None = None) -> None:
        """Mark the budget exhausted by ``dimension`` (the first to run out names it) and
        cancel the work still running under it, but ``spare`` (the unit whose own charge
        ran out: it ends with its own error) and the units paid for (``reserve_whole``):
        what the others would spend is past the budget. Work started after it is cancelled
        at once."""
        self.exhausted = self.exhausted or dimension
        self._cut = self._cut or dimension
        for scope in self._units - self._paid:
            if scope is not spare:
                scope.cancel()

    async def reserve_whole(self, dimension: str, amount: int) -> int:
        """Take all of ``amount`` for the running unit of work, which is then *paid*: a cost
        running out later lets it finish (it is counted paid while the ledger takes it, so
        a run-out meanwhile cannot cut a unit whose reserve is on its way). When less is
        left, what was taken goes back and BudgetExhausted is raised, the task's unpaid
        work cancelled first (nothing of it takes what is given back). ``amount`` when
        ``dimension`` is not limited."""
        if dimension not in self.left:
            return amount
        unit = _unit.get()
        if unit is not None and unit in self._units and not unit.cancel_called:
            self._paid.add(unit)
        # Nothing to take (a HEAD answer's, a 204's body): no ledger step to wait for.
        got = await self._take_up_to(dimension, amount) if amount else 0
        if got < amount:
            if unit is not None:
                self._paid.discard(unit)
            self.run_out(dimension, spare=unit)
            if got:
                await self._refund(dimension, got)
            raise BudgetExhausted(dimension)
        return got

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
            self._paid.discard(scope)
        if scope.cancelled_caught and self._cut is not None:
            raise BudgetExhausted(self._cut)

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
            with trio.CancelScope(shield=True):  # see ``_take_up_to``
                charged = await self.ledger.charge(self.budget_id, dimension, amount, strict=strict)
            if charged is None:
                return None
            left = charged
        self.left[dimension] = left
        return left

    async def _take_up_to(self, dimension: str, amount: int) -> int:
        """What ``take_up_to`` took (0 when the BUDGET_ID is gone)."""
        if self.budget_id is None or self.ledger is None:
            taken = min(amount, max(0, self.left[dimension]))
            self.left[dimension] -= taken
            return taken
        # A ledger step is not abandoned by a cancel (a Redis call's thread is, when
        # cancelled): what it took must be known to be given back. Redis bounds it by
        # call_timeout_s; one timed out after its script ran leaves its take spent (the
        # caller sees not_available, gives nothing back): fail-closed, never an overspend.
        with trio.CancelScope(shield=True):
            charged = await self.ledger.take_up_to(self.budget_id, dimension, amount)
        if charged is None:
            return 0
        taken, self.left[dimension] = charged
        return taken

    async def _refund(self, dimension: str, amount: int) -> None:
        await self._charge(dimension, -amount, strict=False)  # a gone BUDGET_ID: to no one


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


async def reserve(dimension: str, amount: int, *, fallback: bool = False) -> int:
    """``TaskBudget.reserve`` on the running budget, else ``amount``."""
    current = _running.get()
    if current is None:
        return amount
    return await current.reserve(dimension, amount, fallback=fallback)


def limits(dimension: str) -> bool:
    """Whether the running budget limits ``dimension``."""
    current = _running.get()
    return current is not None and dimension in current.left


async def settle(dimension: str, reserved: int, used: int) -> None:
    """``TaskBudget.settle`` on the running budget, if any."""
    current = _running.get()
    if current is not None:
        await current.settle(dimension, reserved, used)


async def spend(dimension: str, amount: int) -> None:
    """``TaskBudget.spend`` on the running budget, if any."""
    current = _running.get()
    if current is not None:
        await current.spend(dimension, amount)


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


async def reserve_whole(dimension: str, amount: int) -> int:
    """``TaskBudget.reserve_whole`` on the running budget, else ``amount``."""
    current = _running.get()
    if current is None:
        return amount
    return await current.reserve_whole(dimension, amount)


def exhausted(dimension: str) -> BudgetExhausted:
    """BudgetExhausted for ``dimension``, the running budget run out by it (its other work
    cancelled, SPEC D-3): work has reached the cap its ``reserve`` gave it, short of its own."""
    current = _running.get()
    if current is not None:
        current.run_out(dimension, spare=_unit.get())
    return BudgetExhausted(dimension)


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
    unbudgeted, when the budget is the uid's default (each run gets its own default, not
    one shared for the job's life), or when the task names a budget of its own."""
    current = _running.get()
    if current is None or not current.named:
        return task
    if task.get("BUDGET") is not None or task.get("BUDGET_ID") is not None:
        return task
    budget_id = await current.shared_id()
    return dataclasses.replace(task, fields=(*task.fields, ("BUDGET_ID", budget_id)))


async def settle_tokens(reserved: int, body: bytes, fallback: int) -> None:
    """Settle a ``reserve`` of ``llm_tokens`` with the ``usage.total_tokens`` of an
    OpenAI-compatible response ``body``; ``fallback`` when it names none, since a model
    that does not say what it used is charged the most it could have."""
    if _running.get() is not None:
        await settle("llm_tokens", reserved, _total_tokens(body, fallback))


def _total_tokens(body: bytes, fallback: int) -> int:
    try:
        usage = peer_json.loads(body)["usage"]
        total = usage.get("total_tokens")
        if total is None:
            total = usage["prompt_tokens"] + usage["completion_tokens"]
    except (ValueError, KeyError, TypeError, AttributeError):
        return fallback
    if not isinstance(total, int) or isinstance(total, bool) or not 0 <= total <= MAX_AMOUNT:
        return fallback
    return total
