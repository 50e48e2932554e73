"""The daemon's own ops under IN:SYS: ping, ops and stats."""

from __future__ import annotations

import json

from csp_web.core.context import OpContext
from csp_web.core.fields import Params
from csp_web.core.ops import Op, Registry
from csp_web.core.replies import Result
from csp_web.core.stats import Stats


async def ping(params: Params, ctx: OpContext) -> Result:
    return Result("pong", scope=("sys",))


def make_sys_ops(registry_ref: list[Registry], stats: Stats) -> list[Op]:
    """The IN:SYS ops; ``registry_ref`` is filled once the full registry exists."""

    async def ops(params: Params, ctx: OpContext) -> Result:
        entries = [op.describe() for op in registry_ref[0]]
        lines = tuple(("OP", json.dumps(e, separators=(",", ":"))) for e in entries)
        return Result(f"ops:{len(entries)}", scope=("sys",), fields=lines)

    async def stats_op(params: Params, ctx: OpContext) -> Result:
        memory = ctx.services.memory
        outbox = ctx.services.outbox if memory is not None else None
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
        by_key = dict(ctx.services.extras.get("stats_lines", {}))
        if memory is not None:
            by_key.update(memory.stats_lines)
        for key, value in sorted(by_key.items()):
            current = value() if callable(value) else value
            lines = (current,) if isinstance(current, str) else current
            fields.extend((key, line) for line in lines)
        return Result(data, scope=("sys",), fields=tuple(fields))

    return [
        Op("ping", "SYS", "PONG", "sys", ping, doc="liveness check"),
        Op("ops", "SYS", "OPS", "sys", ops, doc="every op with its fields and OUT kind"),
        Op("stats", "SYS", "STATS", "sys", stats_op, doc="counters, latencies, outbox depth"),
    ]
