"""``csp-web health``: one probe of a running daemon for service managers and load balancers.

It asks the daemon's socket for ``REQ:stats`` and judges the reply: exit 0 and ``healthy``
when nothing is wrong; 1 and ``degraded: <reason>; ...`` when the daemon answers but a part
it depends on is not well (a full disk, the Memory Specialist or Redis unreachable, an MCP
server given up on, the reply itself a FAIL); 3 and ``unreachable: <why>`` when no daemon
answers in time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import trio

from csp_web.cli.send import leaves
from csp_web.client.trio_client import ClientClosed, open_client
from protocol import Reply, Status, Task

EXIT_HEALTHY, EXIT_DEGRADED, EXIT_UNREACHABLE = 0, 1, 3
_STATS = Task("stats", "SYS", "STATS", fields=(("ID", "health"),))


@dataclass(frozen=True)
class HealthOptions:
    path: str
    timeout_s: float


def judge(reply: Reply) -> list[str]:
    """What is wrong, read from a ``REQ:stats`` reply (empty: healthy)."""
    if reply.status is Status.FAIL:
        return [f"stats failed: {reply.get('ERROR')}"]
    reasons: list[str] = []
    storage = reply.get("STORAGE") or "full:none"
    if storage != "full:none":
        reasons.append(f"storage_full:{storage.removeprefix('full:')}")
    outbox = dict(_pairs(reply.get("OUTBOX") or ""))
    if outbox.get("connected") == "false":
        reasons.append(f"memory specialist unreachable (outbox depth {outbox.get('depth', '?')})")
    for key, value in reply.fields:
        if key in ("REDIS", "MCP"):
            reasons.extend(_component(key, value))
    return reasons


def _pairs(line: str) -> list[tuple[str, str]]:
    return [item.partition(":")[::2] for item in line.split(",") if ":" in item]


def _component(key: str, line: str) -> list[str]:
    try:
        data = json.loads(line)
    except ValueError:
        return []
    if not isinstance(data, dict):
        return []
    if key == "REDIS" and data.get("state") == "down":
        return [f"redis down ({data.get('error') or 'no answer'})"]
    if key == "MCP" and data.get("state") == "failed":
        return [f"mcp server {data.get('server')} failed"]
    return []


async def probe(options: HealthOptions) -> tuple[int, str]:
    """(exit code, the one line to print) for the daemon at ``options.path``."""
    reply: Reply | None = None
    why = ""
    try:
        with trio.fail_after(options.timeout_s):
            async with open_client(options.path, connect_timeout_s=options.timeout_s) as client:
                reply = await client.call(_STATS, timeout_s=options.timeout_s)
    except* (OSError, ClientClosed, trio.TooSlowError) as group:
        first = leaves(group)[0]
        why = str(first) or type(first).__name__
    if reply is None:
        return EXIT_UNREACHABLE, f"unreachable: {options.path}: {why}"
    reasons = judge(reply)
    if reasons:
        return EXIT_DEGRADED, "degraded: " + "; ".join(reasons)
    return EXIT_HEALTHY, "healthy"


def health_main(options: HealthOptions) -> int:
    """Run the probe, print its one line on stdout, return its exit code."""
    code, line = trio.run(probe, options)
    print(line)
    return code
