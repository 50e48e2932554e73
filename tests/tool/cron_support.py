"""The cron test rig (no tests here): a real dispatcher with the cron op, a ``tick`` op that
records each run, the scheduler serving, and a wall clock driven by trio's clock.

Time moves only when a test jumps ``mock_clock``; ``settle`` then waits, bounded in real time
(the mock clock is stopped), for the scheduler's file writes and outbox commits, which run in
threads, to finish.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import trio
import trio.lowlevel

from csp_web.app.memory_path import open_memory_path, outbox_path
from csp_web.config import Config, with_section
from csp_web.core.api.context import OpContext, Peer
from csp_web.core.api.errors import OpError
from csp_web.core.api.fields import FieldSpec, Params
from csp_web.core.api.ops import Op
from csp_web.core.api.records import MemoryWrite
from csp_web.core.api.replies import Result
from csp_web.core.daemon.compose import open_daemon
from csp_web.core.daemon.lifecycle import serve
from csp_web.core.dispatch.dispatcher import Dispatcher, DispatchPort
from csp_web.cron import CronService, open_cron
from csp_web.cron.config import CronConfig
from csp_web.infra.redis_link import RedisLink
from csp_web.memory.outbox import open_outbox
from protocol import ErrorCode, Field, Reply, Status, Task
from specialists.tool.config import ToolConfig
from specialists.tool.ops_cron import OPS
from specialists.tool.services import ToolServices
from tests.harness import build_dispatcher, given, outbox_of

UTC = datetime.UTC
# Winter, so Europe/Paris is UTC+1; 30 s past a whole minute, so occurrences are not "now".
BASE = datetime.datetime(2026, 1, 10, 0, 0, 30, tzinfo=UTC)
TICK = "TASK REQ:tick IN:TEST OUT:TICKED\n"
FAIL_TICK = "TASK REQ:tick IN:TEST OUT:TICKED\nFAIL true\n"


class TrioWall:
    """A wall clock that reads ``base`` when trio's clock read ``t0`` and moves with it."""

    def __init__(self, base: datetime.datetime = BASE) -> None:
        self.base = base
        self.t0 = trio.current_time()

    def __call__(self) -> datetime.datetime:
        return self.base + datetime.timedelta(seconds=trio.current_time() - self.t0)


def at(hh: int, mm: int, ss: int = 0) -> datetime.datetime:
    return BASE.replace(hour=hh, minute=mm, second=ss)


def tick_op(seen: list[str]) -> Op[Any]:
    """``tick``: records the task's ID (the run key); ``FAIL true`` makes it fail."""

    async def tick(params: Params, ctx: OpContext, _: Any) -> Result:
        seen.append(ctx.task_id)
        if params.flag("FAIL"):
            raise OpError(ErrorCode.COMMAND_FAILED, "told to fail", scope=("test",))
        return Result("ticked", ("test",))

    fields = (FieldSpec("FAIL", "bool", default=False), FieldSpec("NOTE"))
    return Op("tick", "TEST", "TICKED", "tool", tick, fields)


def cron_config(config: Config, **cron: Any) -> Config:
    """``config`` with cron settings replaced and no memory socket (writes stay pending)."""
    config = replace(config, memory=replace(config.memory, socket_path=None))
    return with_section(config, "tool", ToolConfig(cron=CronConfig(**cron)))


@dataclass
class Rig:
    dispatcher: Dispatcher
    cron: CronService
    seen: list[str]
    scope: trio.CancelScope
    peer: Peer = field(default_factory=lambda: Peer("test"))  # the sender (no uid: stdin's)

    async def call(self, *fields: Field, inline: str | None = None) -> Reply:
        task = Task("cron", "TOOL", "CRON_RESULT", inline, fields)
        return await self.dispatcher.run(task, self.peer)

    async def add(self, job_id: str, schedule: str, task: str = TICK, *more: Field) -> Reply:
        fields = (("JOB_ID", job_id), ("SCHEDULE", schedule), ("TASK", task), *more)
        reply = await self.call(("ACTION", "add"), *fields)
        assert reply.status is Status.OK, reply
        return reply

    def writes(self, kind: str) -> list[MemoryWrite]:
        """The outbox's pending writes of type ``kind``, oldest first."""
        store = outbox_of(self.dispatcher)._store  # the durable store is what to observe
        return [write for _, write in store.oldest(1_000_000) if write.type == kind]

    def history(self, job_id: str) -> list[tuple[str, str]]:
        return [(o.key, o.status) for o in self.cron.job(job_id).history]


@asynccontextmanager
async def open_rig(
    config: Config,
    wall: Callable[[], datetime.datetime],
    ops: list[Op[Any]] | None = None,
    link: RedisLink | None = None,
) -> AsyncIterator[Rig]:
    """A dispatcher with the cron op and ``tick`` (plus ``ops``), its scheduler serving."""
    seen: list[str] = []
    async with (
        open_outbox(config.outbox_path, config.outbox, config.memory) as outbox,
        open_cron(config, now_wall=wall, link=link) as cron,
        trio.open_nursery() as nursery,
    ):
        all_ops: list[Op[Any]] = [*OPS, tick_op(seen), *(ops or [])]
        dispatcher = build_dispatcher(
            config, outbox_path(config, outbox), all_ops, ToolServices(None, None, cron)
        )
        scope = trio.CancelScope()

        async def serve(*, task_status: trio.TaskStatus[None]) -> None:
            with scope:  # as the daemon runs TOOL's background task, on its TaskPort
                await cron.serve(DispatchPort(dispatcher), task_status=task_status)

        await nursery.start(serve)
        yield Rig(dispatcher, cron, seen, scope)
        nursery.cancel_scope.cancel()


async def settle(predicate: Callable[[], bool], *, real_timeout_s: float = 10.0) -> None:
    """Checkpoint until ``predicate()`` holds; fails after ``real_timeout_s`` of real time."""
    deadline = time.monotonic() + real_timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await trio.lowlevel.checkpoint()


def job_lines(reply: Reply) -> list[dict[str, Any]]:
    return [json.loads(line) for line in reply.get_all("JOB")]


def code(reply: Reply) -> str:
    assert reply.status is Status.FAIL, reply
    return (reply.get("ERROR") or "").partition(":")[0]


def without_linger(config: Config) -> Config:
    """``config`` with an outbox that sends a partial batch at once: under ``mock_clock``
    time stands still unless a test jumps it, so ``outbox.linger_s`` would never end."""
    return dataclasses.replace(config, outbox=dataclasses.replace(config.outbox, linger_s=0.0))


async def start_cron_daemon(
    nursery: trio.Nursery, config: Config, cron: CronService, socket_path: str
) -> Dispatcher:
    """A daemon serving only the cron op on ``socket_path`` until ``nursery`` ends: the
    scheduler as its background task, its memory path the one ``config`` names."""

    async def run_daemon(*, task_status: trio.TaskStatus[Dispatcher]) -> None:
        cron_only = given(ToolServices(None, None, cron), OPS, background=(cron.serve,))
        async with open_daemon(config, (cron_only,), memory=open_memory_path(config)) as daemon:
            await serve(daemon, stdio=None, socket_path=socket_path, task_status=task_status)

    dispatcher: Dispatcher = await nursery.start(run_daemon)
    return dispatcher
