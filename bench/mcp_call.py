"""Round trip of ``McpPool.call_tool`` next to the SDK's own ``ClientSession.call_tool``.

Run from the repository root::

    python bench/mcp_call.py [--calls 2000] [--warmup 200] [--rounds 10]

Both paths call the ``echo`` tool of the toy test server (tests/tool/mcp_servers), each on
its own warm stdio process, in alternating rounds so that load on the host falls on both
alike. The pool's path adds its deadline, session lookup, argument check and rendering of
the result; the goal is a p50 no worse than 1.5 times the direct call's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so `python bench/mcp_call.py` finds the packages
    sys.path.insert(0, str(REPO_ROOT))

from mcp import Client, StdioServerParameters, stdio_client  # noqa: E402

from specialists.tool.mcp import open_mcp_pool  # noqa: E402
from specialists.tool.mcp.config import (  # noqa: E402
    McpConfig,
    StdioServerConfig,
)
from tests.tool.mcp_servers.support import TOY_SERVER  # noqa: E402

ARGUMENTS = {"text": "ping"}
GOAL_RATIO = 1.5

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


async def run(calls: int, warmup: int, rounds: int) -> tuple[list[float], list[float]]:
    """Samples for the pool path and the direct path, ``calls`` each, after ``warmup``."""
    server = StdioServerConfig(command=sys.executable, args=(str(TOY_SERVER),))
    params = StdioServerParameters(command=sys.executable, args=[str(TOY_SERVER)])
    pooled: list[float] = []
    direct: list[float] = []
    pool_config = McpConfig(servers={"toy": server})
    async with open_mcp_pool(pool_config) as pool, Client(stdio_client(params)) as client:
        await client.list_tools()  # as the pool does at start: output schemas known

        async def via_pool() -> object:
            return await pool.call_tool("toy", "echo", ARGUMENTS)

        async def via_sdk() -> object:
            return await client.session.call_tool("echo", ARGUMENTS)

        await timed(via_pool, warmup)
        await timed(via_sdk, warmup)
        per_round = max(1, calls // rounds)
        for _ in range(rounds):
            pooled += await timed(via_pool, per_round)
            direct += await timed(via_sdk, per_round)
    return pooled, direct


def report(pooled: list[float], direct: list[float], command: str) -> None:
    """Print p50/p99 of both paths, their ratios, and how to reproduce the run."""
    print(f"{'path':<28}{'calls':>7}{'p50 ms':>10}{'p99 ms':>10}{'mean ms':>10}")
    rows = (("McpPool.call_tool", pooled), ("ClientSession.call_tool", direct))
    for name, samples in rows:
        p50, p99 = percentile(samples, 0.50), percentile(samples, 0.99)
        mean = statistics.fmean(samples)
        print(f"{name:<28}{len(samples):>7}{p50:>10.3f}{p99:>10.3f}{mean:>10.3f}")
    ratio_p50 = percentile(pooled, 0.50) / percentile(direct, 0.50)
    ratio_p99 = percentile(pooled, 0.99) / percentile(direct, 0.99)
    verdict = "meets" if ratio_p50 <= GOAL_RATIO else "misses"
    print(f"ratio pool/direct: p50 {ratio_p50:.2f}x, p99 {ratio_p99:.2f}x", end=" ")
    print(f"({verdict} the p50 goal of <= {GOAL_RATIO}x)")
    print(f"reproduce: {command}")


def main() -> None:
    """Parse the options, run both paths, print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="measured calls per path")
    parser.add_argument("--warmup", type=int, default=200, help="unmeasured calls per path")
    parser.add_argument("--rounds", type=int, default=10, help="alternations of the paths")
    options = parser.parse_args()
    pooled, direct = trio.run(run, options.calls, options.warmup, options.rounds)
    command = (
        f"python bench/mcp_call.py --calls {options.calls} --warmup {options.warmup} "
        f"--rounds {options.rounds}"
    )
    report(pooled, direct, command)


if __name__ == "__main__":
    main()
