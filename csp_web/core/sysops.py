"""The daemon's own ops under IN:SYS: ping, ops and stats, over ``SysServices``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from csp_web.core.context import OpContext
from csp_web.core.fields import Example, Params, ReplyField
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
                f"connected:{str(outbox.connected).lower()},waiting:{outbox.waiting}",
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


PING_REPLIES = ()
PING_EXAMPLE = Example(
    ("TASK REQ:ping IN:SYS OUT:PONG\nID 1\n"),
    ("STATUS OK\nID 1\nSCOPE [sys]\nDATA pong\n"),
)

OPS_REPLIES = (
    ReplyField("OP", "one per op", "the op as JSON: req, in, out, inline, fields, replies, doc"),
)
OPS_EXAMPLE = Example(
    ("TASK REQ:ops IN:SYS OUT:OPS\nID 1\n"),
    (
        "STATUS OK\n"
        "ID 1\n"
        "SCOPE [sys]\n"
        "DATA ops:22\n"
        'OP {"req":"exec","in":"SHELL","out":"EXEC_RESULT","inline":"COMMAND"'
        ',"fields":[{"name":"COMMAND","type":"text","required":true,"max_char'
        's":8192},{"name":"TIMEOU…\n'
        'OP {"req":"nodes","in":"SYS","out":"NODES","fields":[{"name":"AC'
        'TION","type":"choice","default":"list","choices":["list","approve","'
        'revoke"]},{"name":"CODE","ty…\n'
        'OP {"req":"ops","in":"SYS","out":"OPS","fields":[],"replies":[{"n'
        'ame":"OP","always":false,"when":"one per op","doc":"the op as JSON: '
        "req, in, out, inline, field…\n"
        "… 19 more OP\n"
    ),
)

STATS_REPLIES = (
    ReplyField(
        "OUTBOX",
        "a memory path is configured",
        "depth, delivered, rejected, refused, connected, waiting (ops waiting for a turn, O-5)",
    ),
    ReplyField("OP", "one per op run since start", "<op> count, failed, p50_ms, p99_ms"),
    ReplyField("REJECTED", "one per code frames were refused with", "<code>:<count>"),
    ReplyField("RELOAD", "after a SIGHUP", "the last reload's outcome"),
    ReplyField("REDIS", "redis.url is set", "the shared state's link (web)"),
    ReplyField("SANDBOX", "exec is configured", "the sandbox kind (tool)"),
    ReplyField("EXEC_LIMITS", "exec is configured", "what enforces exec's limits (tool)"),
    ReplyField(
        "EXEC_PROTECTED",
        "exec is configured",
        "JSON list of the paths commands may not change or create, even in their working"
        " dir (tool)",
    ),
    ReplyField("MCP", "MCP servers are configured: one per server", "its state (tool)"),
    ReplyField("BROWSER", "always", "the browser's state (browser)"),
    ReplyField("NODES", "always", "paired and connected nodes (node)"),
)
STATS_EXAMPLE = Example(
    ("TASK REQ:stats IN:SYS OUT:STATS\nID 1\n"),
    (
        "STATUS OK\n"
        "ID 1\n"
        "SCOPE [sys]\n"
        "DATA …\n"
        "OUTBOX …\n"
        "OP exec count:1,failed:0,p50_ms:0,p99_ms:0\n"
        "OP fetch count:1,failed:0,p50_ms:0,p99_ms:0\n"
        "OP nodes count:2,failed:0,p50_ms:0,p99_ms:0\n"
        "BROWSER …\n"
        "EXEC_LIMITS …\n"
        "EXEC_PROTECTED …\n"
        'MCP {"server":"toy","state":"idle","calls":0,"restarts":0,"in_flight'
        '":0,"last_error":"","failures":0}\n'
        "NODES paired:1,connected:1,links:1,pending_pairs:0\n"
        "SANDBOX bwrap\n"
        "… 4 more OP\n"
    ),
    volatile=("DATA", "OUTBOX", "BROWSER", "EXEC_LIMITS", "EXEC_PROTECTED"),
)


SYS_OPS: tuple[Op[SysServices], ...] = (
    Op(
        "ping",
        "SYS",
        "PONG",
        "sys",
        ping,
        replies=PING_REPLIES,
        example=PING_EXAMPLE,
        doc="liveness check",
        instant=True,
    ),
    Op(
        "ops",
        "SYS",
        "OPS",
        "sys",
        ops,
        replies=OPS_REPLIES,
        example=OPS_EXAMPLE,
        doc="every op with its fields, reply fields and OUT kind",
        instant=True,
    ),
    Op(
        "stats",
        "SYS",
        "STATS",
        "sys",
        stats_op,
        replies=STATS_REPLIES,
        example=STATS_EXAMPLE,
        doc="counters, latencies, outbox depth",
        instant=True,
    ),
)
