"""The daemon's own ops under IN:SYS: ping, ops, stats and cancel, over ``SysServices``."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from csp_web.core.api.context import OpContext
from csp_web.core.api.errors import OpError
from csp_web.core.api.fields import ID_PATTERN, Example, FieldSpec, Params, ReplyField
from csp_web.core.api.ops import READS_LOCAL, Effects, Op, OpTable
from csp_web.core.api.ports import CounterFamily, MemoryPath, StatsLine
from csp_web.core.api.replies import Result
from csp_web.core.dispatch.cancels import Cancels
from csp_web.core.dispatch.stats import Stats
from protocol import ErrorCode


@dataclass(frozen=True)
class SysServices:
    """What the sys ops read: the op table (plain data, complete before anything is bound),
    the counters, the memory path, the specialists' ``REQ:stats`` lines, and the tickets of
    the tasks in flight (what ``REQ:cancel`` cancels)."""

    table: OpTable
    stats: Stats
    memory: MemoryPath | None
    lines: Mapping[str, StatsLine]
    cancels: Cancels
    storage: tuple[tuple[str, Callable[[], bool]], ...] = ()  # (store, is its disk full)
    counters: tuple[CounterFamily, ...] = ()  # the specialists' labelled counters (metrics)


# Every pong is the same frozen Result: building one was a tenth of a pipelined ping's
# dataclass construction (py-spy on bench/daemon.py --quick, issue 26).
_PONG = Result("pong", scope=("sys",))


async def ping(params: Params, ctx: OpContext, services: SysServices) -> Result:
    return _PONG


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
            f"outbox_depth:{outbox.room.depth if outbox is not None else 0}",
        ]
    )
    fields: list[tuple[str, str]] = []
    if outbox is not None:
        fields.append(
            (
                "OUTBOX",
                f"depth:{outbox.room.depth},delivered:{outbox.delivery.delivered},"
                f"rejected:{outbox.delivery.rejected},refused:{outbox.room.refused},"
                f"connected:{str(outbox.room.connected).lower()},waiting:{outbox.room.waiting_turns}",
            )
        )
    full = sorted({which for which, is_full in services.storage if is_full()})
    fields.append(("STORAGE", f"full:{','.join(full) or 'none'}"))  # SPEC O-6
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


async def cancel(params: Params, ctx: OpContext, services: SysServices) -> Result:
    """Cancel the unfinished tasks the caller's uid sent with ID ``TARGET`` (SPEC C-6): each
    answers ``cancelled``. None (or only another uid's) is ``unknown_task``, which tells a
    caller nothing of other uids' tasks."""
    target = params.text("TARGET")
    if not ID_PATTERN.fullmatch(target):
        raise OpError(ErrorCode.INVALID_FIELD, "TARGET must be a task ID (SPEC C-1)")
    count = services.cancels.cancel(ctx.peer.uid, target)
    if not count:
        raise OpError(ErrorCode.UNKNOWN_TASK, target, scope=("sys",))
    return Result("cancelled", scope=("sys",), fields=(("CANCELLED", str(count)),))


CANCEL_FIELDS = (
    FieldSpec(
        "TARGET",
        required=True,
        max_chars=128,
        doc="the ID of the tasks to cancel (this uid's, on any of its connections)",
    ),
)
CANCEL_REPLIES = (
    ReplyField("CANCELLED", "OK", "how many unfinished tasks were cancelled", kind="int"),
)
CANCEL_EXAMPLE = Example(
    ("TASK REQ:cancel IN:SYS OUT:ACK\nID 1\nTARGET job-7\n"),
    ("STATUS FAIL\nID 1\nSCOPE [sys]\nDATA none\nERROR unknown_task:job-7\n"),
)

PING_REPLIES = ()
PING_EXAMPLE = Example(
    ("TASK REQ:ping IN:SYS OUT:PONG\nID 1\n"),
    ("STATUS OK\nID 1\nSCOPE [sys]\nDATA pong\n"),
)

OPS_REPLIES = (
    ReplyField(
        "OP",
        "one per op",
        "the op as JSON: req, in, out, inline, fields, replies, doc",
        repeat=True,
    ),
)
OPS_EXAMPLE = Example(
    ("TASK REQ:ops IN:SYS OUT:OPS\nID 1\n"),
    (
        "STATUS OK\n"
        "ID 1\n"
        "SCOPE [sys]\n"
        "DATA ops:24\n"
        'OP {"req":"exec","in":"SHELL","out":"EXEC_RESULT","inline":"COMMAND"'
        ',"fields":[{"name":"COMMAND","type":"text","required":true,"max_char'
        's":8192},{"name":"TIMEOU…\n'
        'OP {"req":"cancel","in":"SYS","out":"ACK","fields":[{"name":"TARGET"'
        ',"type":"text","required":true,"max_chars":128,"doc":"the ID of the '
        "tasks to cancel (this ui…\n"
        'OP {"req":"nodes","in":"SYS","out":"NODES","fields":[{"name":"AC'
        'TION","type":"choice","default":"list","choices":["list","approve","'
        'revoke"]},{"name":"CODE","ty…\n'
        "… 21 more OP\n"
    ),
)

STATS_REPLIES = (
    ReplyField(
        "OUTBOX",
        "a memory path is configured",
        "depth, delivered, rejected, refused, connected, waiting (ops waiting for a turn, O-5)",
    ),
    ReplyField(
        "STORAGE",
        "always",
        "full:<stores whose disk is full now> (outbox, cache, memory, media, state) or none",
    ),
    ReplyField(
        "OP", "one per op run since start", "<op> count, failed, p50_ms, p99_ms", repeat=True
    ),
    ReplyField(
        "REJECTED",
        "one per code frames were refused with; a code outside the catalogue (a relayed"
        " reply's) counts as `other`",
        "<code>:<count>",
        repeat=True,
    ),
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
    ReplyField(
        "MCP", "MCP servers are configured: one per server", "its state (tool)", repeat=True
    ),
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
        "STORAGE full:none\n"
        "OP cancel count:1,failed:1,p50_ms:0,p99_ms:0\n"
        "OP exec count:1,failed:0,p50_ms:0,p99_ms:0\n"
        "OP fetch count:1,failed:0,p50_ms:0,p99_ms:0\n"
        "REJECTED unknown_task:1\n"
        "BROWSER …\n"
        "EXEC_LIMITS …\n"
        "EXEC_PROTECTED …\n"
        'MCP {"server":"toy","state":"idle","calls":0,"restarts":0,"in_flight'
        '":0,"last_error":"","failures":0}\n'
        "NODES paired:1,connected:1,links:1,pending_pairs:0\n"
        "SANDBOX bwrap\n"
        "… 5 more OP\n"
    ),
    volatile=("DATA", "OUTBOX", "BROWSER", "EXEC_LIMITS", "EXEC_PROTECTED"),
)


SYS_OPS: tuple[Op[SysServices], ...] = (
    Op(
        "cancel",
        "SYS",
        "ACK",
        "sys",
        cancel,
        CANCEL_FIELDS,
        replies=CANCEL_REPLIES,
        example=CANCEL_EXAMPLE,
        doc="cancel this uid's unfinished tasks with ID TARGET; each answers FAIL cancelled",
        instant=True,
        # It ends running work; a second cancel finds nothing left to end.
        effects=Effects(destructive=True, idempotent=True, open_world=False),
    ),
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
        effects=READS_LOCAL,
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
        effects=READS_LOCAL,
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
        effects=READS_LOCAL,
    ),
)
