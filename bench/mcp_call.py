"""An MCP tool call as a user makes it: ``TASK REQ:mcp`` to a ``csp-web serve`` process over its
Unix socket, next to the SDK's own ``ClientSession.call_tool`` on the same toy server.

Run from the repository root::

    python bench/mcp_call.py [--quick] [--calls 2000] [--warmup 200] [--rounds 10]

Both paths call the ``echo`` tool of the toy test server (tests/tool/mcp_servers), each on
its own warm stdio process (the daemon's is started by its pool), in alternating rounds so
that load on the host falls on both alike. The daemon's path adds the CSP/1 round trip,
dispatch, the pool's deadline, session lookup, argument check, rendering of the result and the
op's audit record; the goal is a p50 no worse than 1.5 times the direct call's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so `python bench/mcp_call.py` finds the packages
    sys.path.insert(0, str(REPO_ROOT))

from mcp import Client, StdioServerParameters, stdio_client  # noqa: E402

from bench.csp_client import check, connect  # noqa: E402
from bench.daemon_process import running_daemon  # noqa: E402
from protocol import Task  # noqa: E402
from tests.tool.mcp_servers.support import TOY_SERVER  # noqa: E402

ARGUMENTS = {"text": "ping"}
GOAL_RATIO = 1.5
MCP_TASK = Task(
    "mcp",
    "TOOL",
    "MCP_RESULT",
    None,
    (("SERVER", "toy"), ("TOOL", "echo"), ("PARAMS", json.dumps(ARGUMENTS))),
)

Call = Callable[[], Awaitable[object]]


async def timed(call: Call, count: int) -> list[float]:
    """The wall time of ``count`` sequential calls, in milliseconds each."""
    samples = []
    for _ in range(count):
        began = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - began) * 1000)
    return samples


def percentile(samples: list[float], fraction: float) -> float:
    """The nearest-rank percentile of ``samples``."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def run(
    socket_path: str, calls: int, warmup: int, rounds: int
) -> tuple[list[float], list[float]]:
    """Samples for the daemon path and the direct path, ``calls`` each, after ``warmup``."""
    params = StdioServerParameters(command=sys.executable, args=[str(TOY_SERVER)])
    daemon: list[float] = []
    direct: list[float] = []
    csp = await connect(socket_path)
    async with csp.stream, Client(stdio_client(params)) as client:
        await client.list_tools()  # as the pool does at start: output schemas known

        async def via_daemon() -> object:
            reply = await csp.call(MCP_TASK)
            check(reply, "mcp")
            return reply

        async def via_sdk() -> object:
            return await client.session.call_tool("echo", ARGUMENTS)

        await timed(via_daemon, warmup)
        await timed(via_sdk, warmup)
        per_round = max(1, calls // rounds)
        for _ in range(rounds):
            daemon += await timed(via_daemon, per_round)
            direct += await timed(via_sdk, per_round)
    return daemon, direct


def report(daemon: list[float], direct: list[float], command: str) -> None:
    """Print p50/p99 of both paths, the figure lines of their ratios, and how to reproduce."""
    print(f"{'path':<28}{'calls':>7}{'p50 ms':>10}{'p99 ms':>10}{'mean ms':>10}")
    rows = (("REQ:mcp via the daemon", daemon), ("ClientSession.call_tool", direct))
    for name, samples in rows:
        p50, p99 = percentile(samples, 0.50), percentile(samples, 0.99)
        mean = statistics.fmean(samples)
        print(f"{name:<28}{len(samples):>7}{p50:>10.3f}{p99:>10.3f}{mean:>10.3f}")
    for name, fraction in (("p50", 0.50), ("p99", 0.99)):
        mine, anchor = percentile(daemon, fraction), percentile(direct, fraction)
        figure = (
            f"MCP tool call round trip {name}",
            f"{mine:.3f} ms",
            f"{anchor:.3f} ms SDK call_tool {name}",
            f"{mine / anchor:.2f}x",
            f"<= {GOAL_RATIO}x" if name == "p50" else "",
        )
        print("\t".join(figure))
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print(f"reproduce: {command}")


def main() -> None:
    """Parse the options, start the daemon, run both paths, print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="500 calls, 100 warm-up")
    parser.add_argument("--calls", type=int, help="measured calls per path (default 2000)")
    parser.add_argument("--warmup", type=int, help="unmeasured calls per path (default 200)")
    parser.add_argument("--rounds", type=int, default=10, help="alternations of the paths")
    options = parser.parse_args()
    calls = options.calls or (500 if options.quick else 2000)
    warmup = options.warmup or (100 if options.quick else 200)
    toy = {"command": sys.executable, "args": [str(TOY_SERVER)]}
    with tempfile.TemporaryDirectory(prefix="csp-bench-mcp-", dir="/tmp") as workdir:
        settings = {
            "daemon": {"state_dir": os.path.join(workdir, "state"), "log_level": "warning"},
            "tool": {"mcp": {"servers": {"toy": toy}}},
        }
        with running_daemon(workdir, settings) as process:
            daemon, direct = trio.run(run, process.socket_path, calls, warmup, options.rounds)
    command = (
        f"python bench/mcp_call.py --calls {calls} --warmup {warmup} --rounds {options.rounds}"
    )
    report(daemon, direct, command)


if __name__ == "__main__":
    main()
