"""The one function that builds a daemon: ``open_daemon(config, specialists, memory=...)``.

It opens each specialist's services (in tuple order) on one exit stack, binds their ops and
the IN:SYS ops, builds every slot pool, and yields a ``Daemon`` for ``lifecycle.serve``;
the services close in reverse order on exit. It names no specialist: the composition root
(csp_web.app) passes them in.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

from csp_web.config import Config, SlotLimits, SlotsConfig
from csp_web.config.reload import RELOADABLE, RESTART_ONLY
from csp_web.core.api.budget import Ledger
from csp_web.core.api.context import Services
from csp_web.core.api.ops import BoundOp, OpTable, Registry, bind
from csp_web.core.api.ports import MemoryPath, StatsLine, TaskPort
from csp_web.core.api.specialist import Background, Composable, Opened, Reloader
from csp_web.core.api.trace import TaskTracer
from csp_web.core.dispatch.cancels import Cancels
from csp_web.core.dispatch.dispatcher import Dispatcher, DispatchPort
from csp_web.core.dispatch.ledger import LocalLedger
from csp_web.core.dispatch.stats import Stats
from csp_web.core.dispatch.sysops import SYS_OPS, SysServices


@dataclass(frozen=True)
class Daemon:
    """A composed daemon, ready to serve: its dispatcher (the bound ops, slots and memory
    path), the op table, the port background tasks get, and what a reload needs."""

    dispatcher: Dispatcher
    table: OpTable
    port: TaskPort
    background: tuple[Background, ...]
    reloaders: tuple[Reloader, ...]
    reloadable: tuple[str, ...]
    restart_only: tuple[str, ...]
    sys: SysServices  # what REQ:stats reads; the metrics read the same (csp_web.app.metrics)


def op_table(specialists: Sequence[Composable]) -> OpTable:
    """The IN:SYS ops and every specialist's, sorted by (IN, REQ); a (REQ, IN) given twice
    raises ValueError. Opens nothing."""
    return OpTable([*SYS_OPS, *(spec for s in specialists for spec in s.specs)])


def reload_paths(specialists: Sequence[Composable]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(reloadable, restart_only): the core's own dotted config paths and each specialist's."""
    reloadable = (*RELOADABLE, *(path for s in specialists for path in s.reloadable))
    restart_only = (*RESTART_ONLY, *(path for s in specialists for path in s.restart_only))
    return reloadable, restart_only


def slot_pools(config: Config, specialists: Sequence[Composable]) -> dict[str, SlotLimits]:
    """Every pool's limits: the core's own (sys, and memory for relayed frames), and each
    specialist's by its name."""
    slots: SlotsConfig = config.tasks.specialists
    pools = {"sys": slots.sys, "memory": slots.memory}
    pools.update({s.name: s.slots(slots) for s in specialists})
    return pools


@asynccontextmanager
async def open_daemon(
    config: Config,
    specialists: Sequence[Composable],
    *,
    memory: MemoryPath | AbstractAsyncContextManager[MemoryPath] | None,
    tracer: TaskTracer | None = None,
    ledger: Ledger | None = None,
) -> AsyncIterator[Daemon]:
    """Open ``specialists`` (tuple order) and compose them with the core over ``memory``: a
    memory path the caller owns, or one to open here once the specialists are open
    (``csp_web.app.memory_path.open_memory_path(config)``: a bad cron.json then stops the
    start before the outbox is touched); None: nothing is audited and IN:MEMORY frames are
    looked up in the table. ``tracer``: a span per task (``csp_web.app.tracing``), the
    caller's. ``ledger``: where BUDGET_IDs live (the fleet's, ``csp_web.infra.redis_budget``),
    the caller's; None: the embedded one in the state dir, opened on first use and closed
    here. What is opened here is closed on exit, in reverse order. Raises
    what a specialist's ``open_services`` raises, and ValueError for an op declared twice."""
    table = op_table(specialists)
    async with AsyncExitStack() as stack:
        opened = [await specialist.open(config, stack) for specialist in specialists]
        if memory is not None and not isinstance(memory, MemoryPath):
            memory = await stack.enter_async_context(memory)
        if ledger is None:
            local = LocalLedger(config.daemon.state_dir, config.budgets)
            stack.callback(local.close)
            ledger = local
        yield compose(
            config, specialists, opened, table=table, memory=memory, tracer=tracer, ledger=ledger
        )


def compose(
    config: Config,
    specialists: Sequence[Composable],
    opened: Sequence[Opened],
    *,
    table: OpTable,
    memory: MemoryPath | None,
    tracer: TaskTracer | None = None,
    ledger: Ledger | None = None,
) -> Daemon:
    """The daemon over already opened specialists (``open_daemon`` opens them)."""
    stats = Stats()
    lines: dict[str, StatsLine] = {}
    for each in opened:
        lines.update(each.stats_lines)
    storage = [check for each in opened for check in each.storage.items()]
    if memory is not None:
        lines.update(memory.stats_lines)
        storage += [("outbox", lambda: memory.outbox.room.storage_full), *memory.storage.items()]
    cancels = Cancels()
    counters = tuple(family for each in opened for family in each.counters)
    sys_services = SysServices(table, stats, memory, lines, cancels, tuple(storage), counters)
    bound: list[BoundOp] = [bind(op, sys_services) for op in SYS_OPS]
    bound += [op for each in opened for op in each.ops]
    pools = slot_pools(config, specialists)
    for spec in table:  # an op in a pool of no specialist: its SlotsConfig field, or KeyError
        if spec.specialist not in pools:
            pools[spec.specialist] = config.tasks.specialists.pool(spec.specialist)
    dispatcher = Dispatcher(
        Registry(bound),
        Services(config, memory),
        stats,
        pools=pools,
        cancels=cancels,
        tracer=tracer,
        ledger=ledger,
    )
    reloadable, restart_only = reload_paths(specialists)
    return Daemon(
        dispatcher,
        table,
        DispatchPort(dispatcher),
        tuple(task for each in opened for task in each.background),
        tuple(each.reload for each in opened if each.reload is not None),
        reloadable,
        restart_only,
        sys_services,
    )
