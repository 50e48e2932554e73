"""The hot route: a task whose op can answer it without waiting (``Op.hot``: a fetch whose page
the cache's memory tier holds) is answered in the connection's reader, as an instant IN:SYS op
is (``Dispatcher.try_now``), instead of as a task of its own with admission, a slot and a
deadline scope.

Only a task that the slow route would answer the same way without waiting takes it: one the
op's ``likely`` guess picks (the connection asks ``likely`` before the frame's turn), valid
(fields and TIMEOUT_MS: an invalid one is refused by a task of its own, as ever), under no
budget (its charges and BUDGET_LEFT are the slow route's), while the daemon is not stopping
and the outbox has room for its record now (the slow route would wait for it, SPEC O-1, O-2,
O-5) and commits it inline (``outbox.synchronous: normal``: under ``full`` each hit would
hold the reader for its own fsync, where the slow route's tasks share one group commit). The
op's answer then goes through the dispatcher's own ``_done``: the same log line, stats, span
and audit record, committed before the reply (O-1; storage_full when it could not be kept,
O-6). A task its op declines, or whose route fails (a bug: logged), runs as a task of its
own, as before; so does one cancelled while it waited for its turn (the connection's ticket,
SPEC C-6). Its span covers the op's answer; a declined frame's is dropped, never ended (the
tracer exports only ended spans), as its task opens its own.

Issue 26 goal 1 (``python bench/fetch.py --quick``, A/B, load 3.9-5.9): a cache hit's daemon
CPU fell from 4.67-5.78x a ping's to 3.36-3.62x, its round trip p50 from 2.58-2.95x a ping's
to 1.83-2.36x (fetch_now.py).
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

import trio

from csp_web.core.api.audit import OpAudit
from csp_web.core.api.context import OpContext, Peer, Services
from csp_web.core.api.errors import OpError
from csp_web.core.api.fields import Params
from csp_web.core.api.ops import BoundOp, Registry
from csp_web.core.api.replies import ok_reply
from csp_web.core.api.trace import TaskSpan, TaskTracer, frame_trace
from csp_web.core.dispatch.stats import Stats
from protocol import Reply, Task

log = logging.getLogger(__name__)


class Dispatching(Protocol):
    """What the hot route reads of the dispatcher (``Dispatcher`` is one), and its ``_done``:
    the one place a reply is logged, counted, audited and its span ended."""

    registry: Registry
    services: Services
    stats: Stats
    tracer: TaskTracer | None
    audit: bool
    shutting_down: bool

    def now_op(self, task: Task) -> BoundOp | None: ...

    def checked(self, task: Task, op: BoundOp) -> Params: ...

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
    ) -> Reply: ...


def likely(dispatcher: Dispatching, task: Task, peer: Peer) -> bool:
    """Whether ``task`` of ``peer`` names an op with a hot route whose cheap guess says it
    answers, and may start now: the connection then gives it a turn without a running place
    and asks ``try_now`` (a guess that proves wrong costs the frame a second turn). Never
    raises: it runs in the connection's reader, where an error would end the connection, so
    a bug in a guess is logged and the frame runs as a task."""
    try:
        op = _hot_op(dispatcher, task)
        if op is None or op.likely_now is None or not _may_start_now(dispatcher, task, peer):
            return False
        return op.likely_now(task)
    except Exception:
        log.exception("hot route's guess failed for %s: run as a task", task.req)
        return False


async def answer_hot(dispatcher: Dispatching, task: Task, peer: Peer, task_id: str) -> Reply | None:
    """The reply to ``task`` (its op's context named ``task_id``) from its op's hot route,
    audited as the slow route audits it, or None when the route declines or fails (then
    ``task`` runs as a task of its own, which answers it as ever). Never raises."""
    op = _hot_op(dispatcher, task)
    if op is None or op.answer_now is None or not _may_start_now(dispatcher, task, peer):
        return None
    params = _valid(dispatcher, task, op)
    if params is None:
        return None
    started = time.monotonic()
    span = dispatcher.tracer.start(task) if dispatcher.tracer is not None else None
    trace = span.context if span is not None else frame_trace(task)
    ctx = OpContext(dispatcher.services, peer, op.req, task_id, task.id, trace)
    try:
        result = op.answer_now(params, ctx)
    except Exception:  # a bug in the route: the task route answers the frame as ever
        log.exception("hot route of %s failed: run as a task", op.req)
        return None  # its span dropped unended, as on a decline
    if result is None:
        return None  # its span is dropped unended: the task's own span stands for it
    dispatcher.stats.frames += 1
    # Its one wait, the record's commit (O-1, inline: ``_may_start_now``), is shielded as an
    # IN:SYS summary's is: a shutdown that stops the reader then never takes a reply whose
    # record was kept.
    reply = ok_reply(result, task.id)
    with trio.CancelScope(shield=True):
        reply = await dispatcher._done(task, op, peer, reply, started, result.audit, True, span)
    return reply


def _hot_op(dispatcher: Dispatching, task: Task) -> BoundOp | None:
    """The op ``task`` names when it has a hot route (never an IN:SYS or IN:MEMORY op's)."""
    op = dispatcher.now_op(task) if task.domain not in ("SYS", "MEMORY") else None
    return op if op is not None and op.answer_now is not None else None


def _may_start_now(dispatcher: Dispatching, task: Task, peer: Peer) -> bool:
    """Whether the slow route would start ``task`` without waiting and charge it nothing:
    no budget opens for it (BUDGET, BUDGET_ID or the uid's default) and, when audited, the
    outbox has room for its record now and commits it inline (``synchronous: normal``)."""
    config = dispatcher.services.config
    if task.get("BUDGET") is not None or task.get("BUDGET_ID") is not None:
        return False
    if config.budgets.default_for(peer.uid) is not None:
        return False
    if not dispatcher.audit:
        return True
    inline = config.outbox.synchronous == "normal"
    return inline and dispatcher.services.outbox.has_room_now(peer.connection)


def _valid(dispatcher: Dispatching, task: Task, op: BoundOp) -> Params | None:
    """``task``'s fields as every route checks them; None when it would refuse them."""
    try:
        return dispatcher.checked(task, op)
    except OpError:
        return None
