"""The hot route: a task whose op can answer it without waiting (``Op.hot``: a fetch whose page
the cache's memory tier holds) is answered in the connection's reader, as an instant IN:SYS op
is (``Dispatcher.try_now``), instead of as a task of its own with admission, a slot and a
deadline scope.

Only a task that the slow route would answer the same way without waiting takes it: one the
op's ``likely`` guess picks (the connection asks ``likely`` before the frame's turn), valid
(fields and TIMEOUT_MS: an invalid one is refused by a task of its own, as ever), under no
budget (its charges and BUDGET_LEFT are the slow route's), while the daemon is not stopping
and the outbox has room for its record now (the slow route would wait for it, SPEC O-1, O-2,
O-5). The op's answer then goes through the dispatcher's own ``_done``: the same log line,
stats, span and audit record, committed before the reply (O-1; storage_full when it could
not be kept, O-6). A task its op declines runs as a task of its own, as before.

Issue 26 goal 1: ``python bench/fetch.py --quick`` figures are in the commit that made this.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from csp_web.core.api.context import OpContext, Peer
from csp_web.core.api.errors import OpError
from csp_web.core.api.fields import Params, parse_timeout_ms, validate
from csp_web.core.api.ops import BoundOp
from csp_web.core.api.replies import fail_reply, ok_reply
from csp_web.core.api.trace import frame_trace
from protocol import Reply, Task

if TYPE_CHECKING:
    from csp_web.core.dispatch.dispatcher import Dispatcher


def likely(dispatcher: Dispatcher, task: Task) -> bool:
    """Whether ``task`` names an op with a hot route whose cheap guess says it answers: the
    connection then gives it a turn without a running place and asks ``try_now``."""
    op = _hot_op(dispatcher, task)
    return op is not None and op.likely_now is not None and op.likely_now(task)


async def answer_hot(dispatcher: Dispatcher, task: Task, peer: Peer) -> Reply | None:
    """The reply to ``task`` from its op's hot route, audited as the slow route audits it,
    or None when the route declines (then ``task`` runs as a task of its own). Never
    raises: an unexpected error is answered ``internal_error``, as a task's would be."""
    op = _hot_op(dispatcher, task)
    if op is None or op.answer_now is None or not _may_start_now(dispatcher, task, peer):
        return None
    params = _valid(dispatcher, task, op)
    if params is None:
        return None
    from csp_web.core.dispatch import dispatcher as module  # the slow route's own helpers

    started = time.monotonic()
    ctx = OpContext(
        dispatcher.services, peer, op.req, task.id or module._make_id(), task.id, frame_trace(task)
    )
    try:
        result = op.answer_now(params, ctx)
    except Exception as exc:  # a bug in the route: answered as the task would answer it
        result = None
        reply = fail_reply(module._as_op_error(exc, task), task.id)
    else:
        if result is None:
            return None
        reply = ok_reply(result, task.id)
    span = dispatcher.tracer.start(task) if dispatcher.tracer is not None else None
    dispatcher.stats.frames += 1
    audit = result.audit if result is not None else None
    return await dispatcher._done(task, op, peer, reply, started, audit, True, span)


def _hot_op(dispatcher: Dispatcher, task: Task) -> BoundOp | None:
    """The op ``task`` names when it has a hot route (never an IN:MEMORY relay's)."""
    if dispatcher.shutting_down or task.domain in ("SYS", "MEMORY"):
        return None
    try:
        op = dispatcher.registry.lookup(task)
    except OpError:
        return None  # refused: answered (and audited) by a task of its own
    return op if op.answer_now is not None else None


def _may_start_now(dispatcher: Dispatcher, task: Task, peer: Peer) -> bool:
    """Whether the slow route would start ``task`` without waiting and charge it nothing:
    no budget opens for it (BUDGET, BUDGET_ID or the uid's default) and, when audited, the
    outbox has room for its record now."""
    config = dispatcher.services.config
    if task.get("BUDGET") is not None or task.get("BUDGET_ID") is not None:
        return False
    if config.budgets.default_for(peer.uid) is not None:
        return False
    return not dispatcher.audit or dispatcher.services.outbox.has_room_now(peer.connection)


def _valid(dispatcher: Dispatcher, task: Task, op: BoundOp) -> Params | None:
    """``task``'s fields as the slow route validates them; None when it would refuse them."""
    config = dispatcher.services.config.tasks
    try:
        params = validate(task, op.spec.fields, op.spec.inline)
        parse_timeout_ms(task, default_ms=config.default_timeout_ms, max_ms=config.max_timeout_ms)
    except OpError:
        return None
    return params
