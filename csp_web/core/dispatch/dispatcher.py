"""Running one task: look up, validate, admit, run under its deadline, audit, reply.

This is the one place that turns any exception into a reply frame (STYLE: errors as data):
OpError becomes its FAIL reply, anything else ``internal_error`` plus a logged traceback.
"""

from __future__ import annotations

import enum
import itertools
import logging
import math
import secrets
import time
from collections.abc import Awaitable, Mapping
from json.encoder import encode_basestring_ascii
from typing import Any

import trio

from csp_web.config import BudgetsConfig, SlotLimits
from csp_web.core.api.audit import OpAudit
from csp_web.core.api.budget import Ledger, TaskBudget, enter, leave, running
from csp_web.core.api.context import OpContext, Peer, Services, fit_write
from csp_web.core.api.deadlines import CUT_DETAIL, GracePeriod, task_deadline
from csp_web.core.api.errors import OpError, StorageFull
from csp_web.core.api.fields import Params, check_frame_fields, parse_timeout_ms, validate
from csp_web.core.api.ops import BoundOp, Registry
from csp_web.core.api.ports import allowed_uids
from csp_web.core.api.records import MemoryWrite, json_record, make_write
from csp_web.core.api.replies import budgeted, fail_reply, ok_reply
from csp_web.core.api.trace import TaskSpan, TaskTracer, frame_trace
from csp_web.core.dispatch.admission import Slots
from csp_web.core.dispatch.budgets import open_budget, reserve_wall, settle
from csp_web.core.dispatch.cancels import Cancels, Ticket
from csp_web.core.dispatch.hot import answer_hot
from csp_web.core.dispatch.hot import likely as hot_likely
from csp_web.core.dispatch.stats import Stats
from csp_web.core.dispatch.sys_audits import SysAudits
from protocol import ErrorCode, Reply, Status, Task

log = logging.getLogger(__name__)
# (REQ, OUT) pairs whose instant op is remembered: the sys ops' few, and room for strays
# (an unknown name is remembered as None), cleared when full as protocol's header table.
_MAX_INSTANT_HEADERS = 256


class Now(enum.Enum):
    """How the reader may answer a frame itself (``Dispatcher.answers_now``)."""

    INSTANT = "instant"  # an IN:SYS op that neither sleeps nor does I/O (Op.instant)
    HOT = "hot"  # an op's hot route guesses it answers (a cache hit held in memory, C-7)
    BUSY = "busy"  # its specialist's pool is full: refused at once (C-3)


class Dispatcher:
    """Runs tasks against ``registry``; IN:MEMORY tasks go to the memory path's relay when it
    has one. Without a memory path (``services.memory`` None) nothing is audited."""

    def __init__(
        self,
        registry: Registry,
        services: Services,
        stats: Stats,
        *,
        pools: Mapping[str, SlotLimits],
        cancels: Cancels,
        audit: bool = True,
        tracer: TaskTracer | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        self.registry = registry
        self.ledger = ledger  # where BUDGET_IDs live (SPEC D-3); None: frames may not name one
        self.tracer = tracer  # a span per task (otel.enabled); None: nothing traced
        self.cancels = cancels  # the tickets REQ:cancel (a sys op over the same) cancels
        self.services = services
        self.stats = stats
        memory = services.memory
        self.relay = memory.relay if memory is not None else None
        self.audit = audit and memory is not None and services.config.audit.enabled
        self.shutting_down = False
        self.sys_audits = SysAudits(memory.outbox) if memory is not None else None
        # Every pool is built here, at composition: a task never meets a pool with no limits.
        self.pools = {
            name: Slots(name, max_running=limits.max_running, max_queued=limits.max_queued)
            for name, limits in pools.items()
        }
        # The instant IN:SYS op of each (REQ, OUT) asked about (None: not one). The registry
        # is fixed for the dispatcher's life; a ping's lookup was two per frame.
        self._instant: dict[tuple[str, str], BoundOp | None] = {}

    def connection_closed(self, peer: Peer) -> None:
        """``peer``'s connection has closed: write its open IN:SYS audit summary (O-4)."""
        if self.sys_audits is not None:
            self.sys_audits.close(peer.connection)

    def flush_audits(self) -> None:
        """Write every open IN:SYS audit summary (at exit, before the outbox's last flush)."""
        if self.sys_audits is not None:
            self.sys_audits.flush_all()

    def slots(self, specialist: str) -> Slots:
        """The admission pool of ``specialist`` (KeyError: none was composed)."""
        return self.pools[specialist]

    async def run(
        self,
        task: Task,
        peer: Peer,
        *,
        grace: GracePeriod | None = None,
        ticket: Ticket | None = None,
    ) -> Reply:
        """The reply to ``task``; never raises except for cancellation. With ``grace`` (a
        connection's task) the work ends at the grace period's end too, answered
        ``shutting_down`` (SPEC R-1). ``ticket`` (a connection's task, ``Cancels.open``): a
        cancel ends the work, answered ``cancelled`` (SPEC C-6); it is closed once the work
        ends. With a tracer the task has a span, ended even when the task is cancelled."""
        if self.tracer is None:
            return await self._answer(task, peer, grace, ticket, None)
        span = self.tracer.start(task)
        try:
            return await self._answer(task, peer, grace, ticket, span)
        finally:
            span.end(None)  # cancelled, unanswered (once answered, this does nothing)

    async def _answer(
        self,
        task: Task,
        peer: Peer,
        grace: GracePeriod | None,
        ticket: Ticket | None,
        span: TaskSpan | None,
    ) -> Reply:
        started = time.monotonic()
        self.stats.frames += 1
        self.stats.in_flight += 1
        op: BoundOp | None = None
        stage = _Stage(span)
        try:
            op = self._lookup(task)
            reply = await self._run(task, op, peer, stage, grace, ticket)
        except Exception as exc:
            reply = fail_reply(_as_op_error(exc, task), task.id)
        finally:
            self.stats.in_flight -= 1
            if ticket is not None:
                ticket.close()
        if stage.budget is not None:
            reply = await settle(stage.budget, reply, stage.began, stage.wall_ms, stage.timeout_ms)
        return await self._done(task, op, peer, reply, started, stage.audit, stage.admitted, span)

    async def try_now(self, task: Task, peer: Peer, route: Now | None = None) -> Reply | None:
        """The reply to ``task`` when it can be given without waiting, else None (then it
        runs as a task of its own, ``run``). Without waiting: an IN:SYS op that neither
        sleeps nor does I/O (``Op.instant``), with a free sys slot, not paced now (O-3); an
        op's hot answer (``Op.hot``, hot.py: a cache hit held in memory); or the ``busy``
        refusal of a valid task whose specialist's pool is full (C-3, ``refuses``). It
        reaches no checkpoint, so neither a deadline nor the grace period can end it; its
        one wait is its audit's commit (a summary's when it fills one, O-4), shielded there,
        so a shutdown that stops the reader never takes its reply.

        Its steps are plain calls, not coroutines, but for the op itself and the rare
        budget and summary commit: a coroutine per step (stage, budget, done, audit) was
        half the calls of a pipelined ping (bench/daemon.py --quick, issue 26).

        ``route`` is what ``answers_now`` said of ``task`` when the reader asked it: a frame
        it named ``BUSY`` is not offered to the hot route again (its guess, a URL's
        canonical form and a cache lookup, then a second validation, made a refused fetch
        cost 125-135 us of daemon CPU against 90-100 before the hot route, 75-120 with this
        skip: bench/overload.py --quick, load 1.1-1.6, a noisy figure in 5 us steps)."""
        op = self._instant_kind(task)
        if op is None:  # a hot answer (a cache hit: hot.py), else busy, else a task
            if route is not Now.BUSY:
                reply = await answer_hot(self, task, peer, task.id or _make_id())
                if reply is not None:
                    return reply
            return await self._refuse_now(task, peer)
        if self._must_pace(peer):
            return None
        slots = self.pools["sys"]
        if not slots.take_now():
            return None
        span = self.tracer.start(task) if self.tracer is not None else None
        started = time.monotonic()
        stats = self.stats
        stats.frames += 1
        stats.in_flight += 1
        task_budget: TaskBudget | None = None
        try:
            params = self.checked(task, op)
            budgets = self.services.config.budgets
            if _may_have_budget(task, budgets):  # for its BUDGET_LEFT alone
                task_budget = await open_budget(task, peer.uid, budgets, self.ledger)
            ctx = OpContext(self.services, peer, op.req, task.id or _make_id(), task.id)
            reply = ok_reply(await op.run(params, ctx), task.id)
        except Exception as exc:
            reply = fail_reply(_as_op_error(exc, task), task.id)
        finally:
            stats.in_flight -= 1
            slots.release()
        if task_budget is not None:  # the local ledger and a task's own budget never wait
            reply = await settle(task_budget, reply, trio.current_time(), None, 0)
        return await self._done(task, op, peer, reply, started, None, False, span)

    async def _done(
        self,
        task: Task,
        op: BoundOp | None,
        peer: Peer,
        reply: Reply,
        started: float,
        audit: OpAudit | None,
        admitted: bool,
        span: TaskSpan | None,
    ) -> Reply:
        """Log, count and audit ``reply``, the outcome of ``task`` started at ``started``;
        ``storage_full`` instead when an admitted op's record could not be kept (O-6). The
        task's span, if traced, ends with the reply given."""
        duration_ms = (time.monotonic() - started) * 1000
        code = _error_code(reply)
        if log.isEnabledFor(logging.INFO):
            log.info(
                "op done",
                extra={
                    "conn": peer.connection,
                    "op": task.req,
                    "domain": task.domain,
                    "id": task.id,
                    "duration_ms": round(duration_ms, 3),
                    "outcome": str(reply.status),
                    "error": code,
                },
            )
        if op is not None:
            self.stats.record(op.req, duration_ms, code, reply.status)
        elif code is not None:
            self.stats.reject(code)
        if self.audit and self._summarised(op, reply, admitted):
            filled = self._summarise(task, op, peer, reply, duration_ms)
            if filled is not None:
                await filled  # a summary is folded when there is no room: never refused
        elif self.audit:
            try:
                await self._audit(task, op, peer, reply, duration_ms, audit, admitted)
            except StorageFull as exc:  # its record could not be kept: not acknowledged (O-6)
                reply = fail_reply(exc, task.id)
        if span is not None:
            span.end(reply)
        return reply

    def refuses(self, task: Task) -> bool:
        """Whether ``task`` would be refused ``busy`` now: it names an op of the registry
        whose specialist's pool is full. The connection then answers it in its reader
        (``try_now``) rather than as a task of its own: a refusal as a task cost 560 us of
        daemon CPU, 4.9 pipelined pings (bench/overload.py --quick, load 10, issue 26)."""
        return self._full_pool_op(task) is not None

    def _full_pool_op(self, task: Task) -> BoundOp | None:
        op = self.now_op(task)
        return op if op is not None and self.pools[op.spec.specialist].full else None

    def now_op(self, task: Task) -> BoundOp | None:
        """The op ``task`` names when the reader may answer it (``try_now``'s one lookup,
        for each of its routes): None while the daemon stops, for an IN:MEMORY frame the
        relay takes, or a frame the registry refuses (a task of its own answers that)."""
        if self.shutting_down or (task.domain == "MEMORY" and self.relay is not None):
            return None
        try:
            return self.registry.lookup(task)
        except OpError:
            return None

    def checked(self, task: Task, op: BoundOp) -> Params:
        """``task``'s fields for ``op`` as every route checks them (``_fields``); raises
        OpError."""
        params, _timeout_ms = self._fields(task, op)
        assert params is not None  # an op's frame is validated into its params
        return params

    def check(self, task: Task) -> None:
        """Raise OpError unless ``task`` names an op and passes every check of its fields
        a run makes before it starts (``_fields``): what a task stored to run later (a
        cron job's) is checked with when it is stored. Whether the daemon is stopping and
        what its budget's ledger holds are a run's to judge, not checked here."""
        relayed = task.domain == "MEMORY" and self.relay is not None
        self._fields(task, None if relayed else self.registry.lookup(task))

    def _fields(self, task: Task, op: BoundOp | None) -> tuple[Params | None, int]:
        """``task``'s params for ``op`` and its deadline in ms, as every route checks them:
        the op's fields, the fields every frame may carry, and TIMEOUT_MS against
        ``tasks.max_timeout_ms``; raises OpError. ``op`` None: a relayed IN:MEMORY frame,
        of which only the fields every frame may carry are checked here (the Memory
        Specialist validates the rest; params None)."""
        if op is None:
            check_frame_fields(task)
            params = None
        else:
            params = validate(task, op.spec.fields, op.spec.inline)
        config = self.services.config.tasks
        max_ms = config.max_timeout_ms
        return params, parse_timeout_ms(task, default_ms=config.default_timeout_ms, max_ms=max_ms)

    async def _refuse_now(self, task: Task, peer: Peer) -> Reply | None:
        """``busy`` for a valid ``task`` whose pool is full (as ``run`` would answer it once
        its fields are checked), else None. Its audit joins the connection's summary (O-4)."""
        op = self._full_pool_op(task)
        if op is None:
            return None
        if self._ledger_waits(task):
            return None  # its budget's BUDGET_LEFT needs a round trip: a task of its own
        task_budget: TaskBudget | None = None
        try:
            self.checked(task, op)
            budgets = self.services.config.budgets
            if _may_have_budget(task, budgets):
                task_budget = await open_budget(task, peer.uid, budgets, self.ledger)
        except OpError:
            return None  # answered by a task of its own, as any invalid frame
        span = self.tracer.start(task) if self.tracer is not None else None
        self.stats.frames += 1
        reply = fail_reply(self.pools[op.spec.specialist].busy(), task.id)
        if task_budget is not None:  # with its BUDGET_LEFT, as the slow path's busy
            reply = budgeted(reply, task_budget)
        return await self._done(task, op, peer, reply, time.monotonic(), None, False, span)

    def answers_now(self, task: Task, peer: Peer) -> Now | None:
        """The route by which ``try_now`` may answer ``task`` of ``peer``, else None (a task
        of its own): an op that never waits (``Op.instant``, IN:SYS), whatever the pools'
        state; one whose hot route's cheap guess says it answers (``hot.likely``, even on a
        full pool: C-7); or one ``refuses``. A connection then gives it a turn without a
        running place (L-10) and asks ``try_now`` for its reply."""
        if self._instant_kind(task) is not None:
            return Now.INSTANT
        if hot_likely(self, task, peer):
            return Now.HOT
        return Now.BUSY if self.refuses(task) else None

    def _instant_kind(self, task: Task) -> BoundOp | None:
        if task.domain != "SYS" or self.shutting_down:
            return None
        header = (task.req, task.out)
        try:
            op = self._instant[header]
        except KeyError:
            op = self._instant_op(task)
            if len(self._instant) >= _MAX_INSTANT_HEADERS:
                self._instant.clear()  # a peer inventing names must not grow the table
            self._instant[header] = op
        if op is None or self._ledger_waits(task):
            return None  # its ledger may wait (Redis): a task of its own
        return op

    def _instant_op(self, task: Task) -> BoundOp | None:
        """The instant IN:SYS op ``task``'s header names, else None."""
        op = self.now_op(task)
        if op is None:
            return None  # refused: answered (and audited) by a task of its own
        return op if op.spec.instant and op.spec.specialist == "sys" else None

    def _ledger_waits(self, task: Task) -> bool:
        """Whether opening ``task``'s budget may wait (a BUDGET_ID on Redis)."""
        return (
            task.get("BUDGET_ID") is not None
            and self.ledger is not None
            and not self.ledger.instant
        )

    def _lookup(self, task: Task) -> BoundOp | None:
        if self.shutting_down:
            raise OpError(ErrorCode.SHUTTING_DOWN, "daemon is stopping")
        if task.domain == "MEMORY" and self.relay is not None:
            return None
        return self.registry.lookup(task)

    async def _run(
        self,
        task: Task,
        op: BoundOp | None,
        peer: Peer,
        stage: _Stage,
        grace: GracePeriod | None,
        ticket: Ticket | None,
    ) -> Reply:
        spec = op.spec if op is not None else None
        params, timeout_ms = self._fields(task, op)
        stage.budget = await open_budget(task, peer.uid, self.services.config.budgets, self.ledger)
        # A sys op (ping, cancel, stats) is never refused nor charged by a budget: an agent
        # whose budget ran out can still cancel its work and see what is left.
        if stage.budget is not None and (spec is None or spec.specialist != "sys"):
            stage.timeout_ms = timeout_ms
            timeout_ms = stage.wall_ms = await reserve_wall(stage.budget, timeout_ms)
        if ticket is not None and ticket.cancelled:  # cancelled while it waited to start
            raise OpError(ErrorCode.CANCELLED, ticket.reason or "")
        audited = self.audit and (spec is None or spec.specialist != "sys")
        deadline = trio.current_time() + timeout_ms / 1000
        paced = op is not None and not audited and self._must_pace(peer)
        outcome: Reply | Exception | None = None  # None: its scope cancelled the work
        # One cancel scope per task (the task's deadline, the grace period's end and a
        # cancel); a paced IN:SYS op gets its deadline once pacing is over: paced past it,
        # it still runs.
        scope = task_deadline(timeout_ms, at=math.inf if paced else deadline, grace=grace)
        try:
            with scope as cancel_scope:
                if ticket is not None:
                    ticket.bind(cancel_scope)
                if paced:  # IN:SYS ops are never refused for room, but paced while it drains
                    with trio.move_on_at(deadline):
                        await self.services.outbox.room.wait_paced(peer.connection)
                    cancel_scope.deadline = min(cancel_scope.deadline, deadline)
                outcome = await self._admitted(task, op, params, peer, stage, audited)
        except Exception as exc:  # judged below (also a group the scope left its cancel out of)
            outcome = exc
        if ticket is not None:
            ticket.close()  # the work has ended: a later cancel does not count it
        return self._outcome(outcome, scope.cancel_called, stage, grace, ticket, timeout_ms)

    async def _admitted(
        self,
        task: Task,
        op: BoundOp | None,
        params: Params | None,
        peer: Peer,
        stage: _Stage,
        audited: bool,
    ) -> Reply:
        """The work of ``_run`` inside the task's scope: room (O-1, O-2), a slot, the op;
        the op's audit, however it ended, is kept on ``stage`` for its one record."""
        if audited:  # back-pressure (SPEC O-1, O-2): wait for room within the deadline
            stage.waiting_for_room = True
            await self.services.outbox.wait_room(peer.connection)
            stage.waiting_for_room = False
        spec = op.spec if op is not None else None
        async with self.slots(spec.specialist if spec is not None else "memory").admit():
            stage.admitted = True
            if op is None:
                assert self.relay is not None
                return await self.relay.forward(task)
            assert params is not None
            trace = stage.span.context if stage.span is not None else frame_trace(task)
            ctx = OpContext(self.services, peer, op.req, task.id or _make_id(), task.id, trace)
            token = enter(stage.budget)  # the op's work, and what it starts, is charged to it
            try:
                result = await op.run(params, ctx)
            except OpError as exc:
                stage.audit = exc.audit
                raise
            finally:
                stage.budget = running()  # its own, or one the op adopted (a session's)
                leave(token)
            stage.audit = result.audit
            return ok_reply(result, task.id)

    @staticmethod
    def _outcome(
        outcome: Reply | Exception | None,
        cancel_called: bool,
        stage: _Stage,
        grace: GracePeriod | None,
        ticket: Ticket | None,
        timeout_ms: int,
    ) -> Reply:
        """The reply of work that ended with ``outcome``, its scope's cancel called or not
        (its deadline, the grace period's end or a cancel). A cancelled task
        answers ``cancelled`` whatever its work did (SPEC C-6: the cancel counted it); work
        the grace period cut answers ``shutting_down`` (C-5), whatever failure the op made
        of its cancellation; else the op's own outcome, or the deadline's refusal."""
        if ticket is not None and ticket.cancelled:
            raise OpError(ErrorCode.CANCELLED, ticket.reason or "")
        failed = not isinstance(outcome, Reply) or outcome.status is Status.FAIL
        if cancel_called and grace is not None and grace.over and failed:
            grace.cut += 1
            raise OpError(ErrorCode.SHUTTING_DOWN, CUT_DETAIL)
        if isinstance(outcome, Exception):
            raise outcome
        if outcome is not None:
            return outcome
        if stage.waiting_for_room:
            raise OpError(ErrorCode.OUTBOX_FULL, f"no room for its log within {timeout_ms}ms")
        raise OpError(ErrorCode.TIMEOUT_EXCEEDED, f"{timeout_ms}ms")

    def _must_pace(self, peer: Peer) -> bool:
        """Whether an IN:SYS op of ``peer`` must wait for the outbox to drain (O-3)."""
        if not (self.audit and self.services.config.audit.sys_ops):
            return False
        outbox = self.services.outbox
        return outbox.room.full or outbox.room.peer_full(peer.connection)

    def _summarised(self, op: BoundOp | None, reply: Reply, admitted: bool) -> bool:
        """Whether the audit of a frame answered ``reply`` joins its connection's summary
        (SPEC O-4) rather than a record of its own: an IN:SYS op's, and a ``busy``
        refusal's (nothing ran). A record of its own, committed, delivered and stored, made
        most of a refusal's 575 us of daemon CPU; 145 us so and answered in the reader
        (bench/overload.py, load 10)."""
        if op is not None and op.spec.specialist == "sys":
            return True
        busy = _error_code(reply) == ErrorCode.BUSY
        return not admitted and self.sys_audits is not None and busy

    def _summarise(
        self, task: Task, op: BoundOp | None, peer: Peer, reply: Reply, duration_ms: float
    ) -> Awaitable[None] | None:
        """Count a ``_summarised`` frame in its connection's summary (an IN:SYS op's only
        with ``audit.sys_ops``); the write to await when that filled it, else None."""
        config = self.services.config.audit
        sys_audits = self.sys_audits
        sys_op = op is not None and op.spec.specialist == "sys"
        if sys_audits is None or (sys_op and not config.sys_ops):
            return None
        filled = sys_audits.add(task, peer, reply, duration_ms, config)
        return None if filled is None else sys_audits.write(filled)

    async def _audit(
        self,
        task: Task,
        op: BoundOp | None,
        peer: Peer,
        reply: Reply,
        duration_ms: float,
        extra: OpAudit | None,
        admitted: bool,
    ) -> None:
        """Write the task's one audit record (not ``_summarised``), with what its op added
        (``extra``), folded when there is no room; raises StorageFull when an admitted op's
        record could not be stored (SPEC O-6)."""
        error = reply.get("ERROR")
        max_bytes = self.services.config.outbox.max_write_bytes
        record = audit_record(task, peer, reply, round(duration_ms, 3), extra, max_bytes)
        write = make_write("sys", "audit", "audit", record, suffix=".json")
        outbox = self.services.outbox
        key = f"{task.domain}/{task.req}" + (f":{error.partition(':')[0]}" if error else "")
        if admitted:  # only an admitted op may use the reserve (SPEC O-1)
            try:
                await outbox.put(write, owner=peer.connection)
                return
            except StorageFull:  # counted, and the op answers storage_full (SPEC O-6)
                key = f"{task.domain}/{task.req}:storage_full"
                await outbox.put_or_fold(write, key, owner=peer.connection)
                raise
            except OpError:
                pass  # past the reserve too: folded below rather than lost
        await outbox.put_or_fold(write, key, owner=peer.connection)


class DispatchPort:
    """The ``TaskPort`` background tasks get: tasks submitted as peer ``cron``, checked
    against the running socket rule, and memory writes into the outbox."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self._dispatcher = dispatcher

    @property
    def accepting(self) -> bool:
        return not self._dispatcher.shutting_down

    def check(self, task: Task) -> None:
        self._dispatcher.check(task)  # one path: what a run checks (``Dispatcher._fields``)

    async def submit(self, task: Task, *, uid: int | None) -> Reply:
        dispatcher = self._dispatcher
        # The socket's own rule, over the running (reloaded) settings: one source of truth.
        if uid is not None and uid not in allowed_uids(dispatcher.services.config.socket):
            error = OpError(
                ErrorCode.PERMISSION_DENIED, f"uid {uid} may no longer run", scope=("cron",)
            )
            return fail_reply(error, task.id)
        return await dispatcher.run(task, Peer("cron", uid))

    async def remember(self, write: MemoryWrite) -> None:
        await self._dispatcher.services.outbox.put(write)


def audit_record(
    task: Task,
    peer: Peer,
    reply: Reply,
    duration_ms: float,
    extra: OpAudit | None,
    max_bytes: int | None = None,
) -> str:
    """The audit record's JSON, exactly as ``json_record`` writes it: the common fields and
    those the op's audit adds (a common field wins over an op's field of the same name). The
    common record alone is formatted directly, as it is built once per frame. Past
    ``max_bytes`` (SPEC O-2) the op's text fields keep their heads and tails."""
    fields: dict[str, Any] = {
        "time": time.time(),
        "op": task.req,
        "domain": task.domain,
        "uid": peer.uid,
        "pid": peer.pid,
        "connection": peer.connection,
        "id": task.id,
        "outcome": str(reply.status),
        "error": reply.get("ERROR"),
        "duration_ms": duration_ms,
    }
    if extra is not None:
        text = json_record(**{**extra.record_fields(), **fields})
        if max_bytes is None or len(text) <= max_bytes:  # ASCII JSON: characters are bytes
            return text
        return json_record(**{**_clipped(extra.record_fields(), max_bytes), **fields})
    return (
        f'{{"connection":{_text(peer.connection)},"domain":{_text(task.domain)},'
        f'"duration_ms":{duration_ms!r},"error":{_text(fields["error"])},'
        f'"id":{_text(task.id)},"op":{_text(task.req)},"outcome":{_text(fields["outcome"])},'
        f'"pid":{_number(peer.pid)},"time":{fields["time"]!r},"uid":{_number(peer.uid)}}}'
    )


def _clipped(fields: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    """``fields`` with each text cut to a share of ``max_bytes``: JSON escapes a character
    in at most 12 bytes (a surrogate pair), and half the bound is left for the rest."""
    texts = [name for name, value in fields.items() if isinstance(value, str)]
    share = max_bytes // (2 * 12 * max(1, len(texts)))
    return {k: fit_write(v, share) if k in texts else v for k, v in fields.items()}


def _text(value: str | None) -> str:
    return "null" if value is None else encode_basestring_ascii(value)


def _number(value: int | None) -> str:
    return "null" if value is None else str(value)


class _Stage:
    """How far a task got: whether it waits for outbox room, whether it was admitted, and
    the audit its op gave; its span, when traced; its budget, once opened."""

    __slots__ = (
        "admitted",
        "audit",
        "began",
        "budget",
        "span",
        "timeout_ms",
        "waiting_for_room",
        "wall_ms",
    )

    def __init__(self, span: TaskSpan | None) -> None:
        self.span = span  # the task's span, when traced
        self.waiting_for_room = False
        self.admitted = False
        self.audit: OpAudit | None = None  # what the op returned or raised for its record
        self.budget: TaskBudget | None = None  # the task's budget (SPEC D-3), once opened
        self.began = trio.current_time()  # its wall time (wall_ms) counts from here
        self.wall_ms: int | None = None  # the wall time reserved for it (None: not charged)
        self.timeout_ms = 0  # its TIMEOUT_MS: a reserve of less set its deadline


_task_ids = itertools.count(1)


def _make_id() -> str:
    # A counter, not os.urandom: this runs once per frame and a syscall per frame shows up.
    return f"t-{next(_task_ids)}"


def _may_have_budget(task: Task, budgets: BudgetsConfig) -> bool:
    """Whether ``open_budget`` may find ``task`` a budget: it names one, or some uid has a
    default. Else the fast path makes no coroutine to learn it has none."""
    if budgets.per_uid:
        return True
    return task.get("BUDGET") is not None or task.get("BUDGET_ID") is not None


def _error_code(reply: Reply) -> str | None:
    if reply.status is not Status.FAIL:
        return None
    return (reply.get("ERROR") or "").partition(":")[0]


def _as_op_error(exc: Exception, task: Task) -> OpError:
    """The OpError an exception stands for; unexpected ones are logged with a reference."""
    leaves = list(_leaves(exc))
    for leaf in leaves:
        if isinstance(leaf, OpError):
            return leaf
    ref = secrets.token_hex(4)
    log.error("internal error %s in %s", ref, task.req, exc_info=exc)
    return OpError(ErrorCode.INTERNAL_ERROR, f"ref {ref}")


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]
