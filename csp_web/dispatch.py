"""Running one task: look up, validate, admit, run under its deadline, audit, reply.

This is the one place that turns any exception into a reply frame (STYLE: errors as data):
OpError becomes its FAIL reply, anything else ``internal_error`` plus a logged traceback.
"""

from __future__ import annotations

import itertools
import logging
import secrets
import time
from typing import Any

from protocol import ErrorCode, Reply, Status, Task

from .admission import Slots
from .config import SpecialistLimits
from .context import OpContext, Peer, Services
from .deadlines import task_deadline
from .errors import OpError
from .fields import check_id, parse_timeout_ms, validate
from .memory import json_record
from .registry import Op, Registry
from .relay import MemoryRelay
from .replies import fail_reply, ok_reply
from .stats import Stats

log = logging.getLogger("csp_web.dispatch")


class Dispatcher:
    """Runs tasks against ``registry``; IN:MEMORY tasks go to ``relay`` when one is given."""

    def __init__(
        self,
        registry: Registry,
        services: Services,
        stats: Stats,
        *,
        relay: MemoryRelay | None = None,
        audit: bool = True,
    ) -> None:
        self.registry = registry
        self.services = services
        self.stats = stats
        self.relay = relay
        self.audit = audit and services.config.audit.enabled
        self.shutting_down = False
        self._slots: dict[str, Slots] = {}

    def slots(self, specialist: str) -> Slots:
        """The admission pool of ``specialist``, made on first use from configuration."""
        if specialist not in self._slots:
            limits = self.services.config.tasks.specialists.get(specialist, SpecialistLimits())
            self._slots[specialist] = Slots(
                specialist, max_running=limits.max_running, max_queued=limits.max_queued
            )
        return self._slots[specialist]

    async def run(self, task: Task, peer: Peer) -> Reply:
        """The reply to ``task``; never raises except for cancellation."""
        started = time.monotonic()
        self.stats.frames += 1
        self.stats.in_flight += 1
        op: Op | None = None
        audit: dict[str, Any] = {}
        try:
            op = self._lookup(task)
            reply = await self._run(task, op, peer, audit)
        except Exception as exc:
            reply = fail_reply(_as_op_error(exc, task), task.id)
        finally:
            self.stats.in_flight -= 1
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
            self.stats.record(op.req, duration_ms, code)
        elif code is not None:
            self.stats.reject(code)
        await self._audit(task, op, peer, reply, duration_ms, audit)
        return reply

    def _lookup(self, task: Task) -> Op | None:
        if self.shutting_down:
            raise OpError(ErrorCode.SHUTTING_DOWN, "daemon is stopping")
        if task.domain == "MEMORY" and self.relay is not None:
            return None
        return self.registry.lookup(task)

    async def _run(self, task: Task, op: Op | None, peer: Peer, audit: dict[str, Any]) -> Reply:
        config = self.services.config.tasks
        if op is None:
            check_id(task)  # the Memory Specialist validates the rest of a relayed frame
        params = validate(task, op.fields, op.inline) if op else None
        timeout_ms = parse_timeout_ms(
            task, default_ms=config.default_timeout_ms, max_ms=config.max_timeout_ms
        )
        audited = self.audit and (op is None or op.specialist != "sys")
        if audited and self.services.outbox.full:
            raise OpError(ErrorCode.OUTBOX_FULL, "memory writes are backing up")
        with task_deadline(timeout_ms) as scope:
            async with self.slots(op.specialist if op else "memory").admit():
                if op is None:
                    assert self.relay is not None
                    return await self.relay.forward(task)
                assert params is not None
                ctx = OpContext(self.services, peer, op.req, task.id or _make_id(), task.id, audit)
                return ok_reply(await op.handler(params, ctx), task.id)
        assert scope.cancelled_caught
        raise OpError(ErrorCode.TIMEOUT_EXCEEDED, f"{timeout_ms}ms")

    async def _audit(
        self,
        task: Task,
        op: Op | None,
        peer: Peer,
        reply: Reply,
        duration_ms: float,
        extra: dict[str, Any],
    ) -> None:
        if not self.audit or (
            op is not None and op.specialist == "sys" and not self.services.config.audit.sys_ops
        ):
            return
        record = json_record(
            time=time.time(),
            op=task.req,
            domain=task.domain,
            uid=peer.uid,
            pid=peer.pid,
            connection=peer.connection,
            id=task.id,
            outcome=str(reply.status),
            error=reply.get("ERROR"),
            duration_ms=round(duration_ms, 3),
            **extra,
        )
        ctx = OpContext(self.services, peer, task.req, task.id or "")
        # Only an op that was admitted (and not an IN:SYS one) may use the outbox's reserve.
        admitted = _error_code(reply) not in (ErrorCode.OUTBOX_FULL, ErrorCode.BUSY)
        reserve = admitted and (op is None or op.specialist != "sys")
        try:
            await ctx.remember("sys", "audit", "audit", record, use_reserve=reserve)
        except OpError as exc:
            log.error("audit record lost for %s: %s", task.req, exc)


_task_ids = itertools.count(1)


def _make_id() -> str:
    # A counter, not os.urandom: this runs once per frame and a syscall per frame shows up.
    return f"t-{next(_task_ids)}"


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
