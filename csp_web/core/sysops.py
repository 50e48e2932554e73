"""The daemon's own ops under IN:SYS: ping, ops and stats, over ``SysServices``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from csp_web.core.context import OpContext
from csp_web.core.fields import Params
from csp_web.core.ops import Op, OpTable
from csp_web.core.ports import MemoryPath, StatsLine
from csp_web.core.replies import Result
from csp_web.core.stats import Stats


@dataclass(frozen=True)
class SysServices:
    """What the sys ops read: the op table (plain data, complete before anything is bound),
    the counters, the memory path, and the specialists' ``REQ:stats`` lines."""

    table: OpTable
    stats: Stats
    memory: MemoryPath | None
    lines: Mapping[str, StatsLine]


async def ping(params: Params, ctx: OpContext, services: SysServices) -> Result:
    return Result("pong", scope=("sys",))


async def ops(params: Params, ctx: OpContext, services: SysServices) -> Result:
    entries = [op.describe() for op in services.table]
    lines = tuple(("OP", json.dumps(e, separators=(",", ":"))) for e in entries)
    return Result(f"ops:{len(entries)}", scope=("sys",), fields=lines)


async def stats_op(params: Params, ctx: OpContext, services: SysServices) -> Result:
    stats = services.stats
    memory = services.memory
    outbox = memory.outbox if memory is not None else None
    data = ",".join(
        [
            f"uptime_s:{stats.uptime_s:.0f}",
            f"frames:{stats.frames}",
            f"in_flight:{stats.in_flight}",
            f"connections:{stats.connections}",
            f"outbox_depth:{outbox.depth if outbox is not None else 0}",
        ]
    )
    fields: list[tuple[str, str]] = []
    if outbox is not None:
        fields.append(
            (
                "OUTBOX",
                f"depth:{outbox.depth},delivered:{outbox.delivered},"
                f"rejected:{outbox.rejected},refused:{outbox.refused},"
                f"connected:{str(outbox.connected).lower()}",
            )
        )
    for name, entry in sorted(stats.ops.items()):
        fields.append(
            (
                "OP",
                f"{name} count:{entry.count},failed:{entry.failed},"
                f"p50_ms:{entry.percentile(0.5):.3f},p99_ms:{entry.percentile(0.99):.3f}",
            )
        )
    for code, count in sorted(stats.rejections.items()):
        fields.append(("REJECTED", f"{code}:{count}"))
    if stats.last_reload is not None:
        fields.append(("RELOAD", stats.last_reload.line()))
    # A value is a line or lines, or a callable giving the current one(s) (MCP servers' state).
    for key, value in sorted(services.lines.items()):
        current = value() if callable(value) else value
        lines = (current,) if isinstance(current, str) else current
        fields.extend((key, line) for line in lines)
    return Result(data, scope=("sys",), fields=tuple(fields))


SYS_OPS: tuple[Op[SysServices], ...] = (
    Op("ping", "SYS", "PONG", "sys", ping, doc="liveness check", instant=True),
    Op("ops", "SYS", "OPS", "sys", ops, doc="every op with its fields and OUT kind", instant=True),
    Op(
        "stats",
        "SYS",
        "STATS",
        "sys",
        stats_op,
        doc="counters, latencies, outbox depth",
        instant=True,
    ),
)
