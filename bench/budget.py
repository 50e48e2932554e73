"""What a budget costs a task (issue 29): the in-process ping, unbudgeted as the anchor, then
with a BUDGET of its own, with a BUDGET_ID in the embedded ledger (SQLite in the state dir),
and with a BUDGET_ID on Redis (a real redis-server on a Unix socket).

A budgeted task opens its budget, charges its wall time and writes BUDGET_LEFT; one with a
BUDGET_ID reads the ledger, and charges it when it spends a limited dimension: a ping with
counts only (``read``) spends nothing, one with ``wall_ms`` (``read+charge``) one charge.
The embedded series go through ``Dispatcher.try_now`` (its ledger never waits); a Redis
ledger's calls are round trips in a worker thread, so those pings run as tasks of their own
(``Dispatcher.run``), measured against unbudgeted pings through ``run`` too.

CPU time of this process per task (``time.process_time``: steady on a shared machine) for the
in-process series; wall time for Redis (its cost is the round trip, spent waiting). Goals:
a BUDGET <= 1.2x the ping's CPU, a local BUDGET_ID <= 3x, a Redis BUDGET_ID <= 1 ms added.

    python bench/budget.py [--quick] [--tasks N]

prints one ``measure<TAB>value<TAB>anchor<TAB>ratio<TAB>goal`` line per series (microseconds).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import trio

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so `python bench/budget.py` finds the packages
    sys.path.insert(0, str(REPO_ROOT))

from csp_web.config import Config, DaemonConfig  # noqa: E402
from csp_web.config.redis import RedisConfig  # noqa: E402
from csp_web.core.api.context import Peer  # noqa: E402
from csp_web.core.dispatch.dispatcher import Dispatcher  # noqa: E402
from csp_web.core.dispatch.ledger import LocalLedger  # noqa: E402
from csp_web.infra.redis_budget import RedisLedger  # noqa: E402
from csp_web.infra.redis_link import open_redis_link  # noqa: E402
from protocol import Status, Task  # noqa: E402
from tests.harness import open_harness  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402

PEER = Peer("bench", 1000, 1)
BIG = "wall_ms:1000000000000"  # never spent: every ping charges it and goes on
COUNTS = "searches:100,fetches:1000"  # a ping charges none: the ledger is only read
Step = Callable[[Dispatcher, Task], Awaitable[None]]


def ping(*fields: tuple[str, str]) -> Task:
    return Task("ping", "SYS", "PONG", None, fields)


async def at_once(dispatcher: Dispatcher, task: Task) -> None:
    reply = await dispatcher.try_now(task, PEER)
    assert reply is not None, "a ping was not answered at once"
    assert reply.status is Status.OK, reply


async def as_task(dispatcher: Dispatcher, task: Task) -> None:
    reply = await dispatcher.run(task, PEER)
    assert reply.status is Status.OK, reply


async def per_task_us(
    dispatcher: Dispatcher, task: Task, step: Step, n: int, *, cpu: bool
) -> float:
    """Microseconds per task over ``n`` tasks after a warm-up: CPU or wall time."""
    for _ in range(min(n, 200)):
        await step(dispatcher, task)
    clock = time.process_time if cpu else time.perf_counter
    began = clock()
    for _ in range(n):
        await step(dispatcher, task)
    return (clock() - began) / n * 1e6


async def measure(config: Config, redis_url: str, n: int) -> list[tuple[str, float, float, str]]:
    rows: list[tuple[str, float, float, str]] = []
    async with open_harness(config) as harness:
        dispatcher = harness.dispatcher
        dispatcher.ledger = ledger = LocalLedger(config.daemon.state_dir, config.budgets)
        anchor = await per_task_us(dispatcher, ping(), at_once, n, cpu=True)
        own = await per_task_us(dispatcher, ping(("BUDGET", BIG)), at_once, n, cpu=True)
        rows.append(("ping BUDGET (cpu us)", own, anchor, "<= 1.2x"))
        counts = ping(("BUDGET_ID", "counts"), ("BUDGET", COUNTS))
        local = await per_task_us(dispatcher, counts, at_once, n, cpu=True)
        rows.append(("ping BUDGET_ID local, read (cpu us)", local, anchor, "<= 3x"))
        walled = ping(("BUDGET_ID", "walled"), ("BUDGET", BIG))
        local = await per_task_us(dispatcher, walled, at_once, n, cpu=True)
        rows.append(("ping BUDGET_ID local, read+charge (cpu us)", local, anchor, "<= 3x"))
        ledger.close()
        async with open_redis_link(RedisConfig(url=redis_url, call_timeout_s=5.0)) as link:
            assert link is not None
            dispatcher.ledger = RedisLedger(link, config.budgets)
            plain = await per_task_us(dispatcher, ping(), as_task, n, cpu=False)
            for name, task in (("read", counts), ("read+charge", walled)):
                remote = await per_task_us(dispatcher, task, as_task, n, cpu=False)
                rows.append(
                    (f"ping BUDGET_ID Redis, {name} (wall us)", remote, plain, "<= +1000 us")
                )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2,000 tasks a series (A/B runs)")
    parser.add_argument("--tasks", type=int, default=20_000)
    args = parser.parse_args(argv)
    n = 2_000 if args.quick else args.tasks
    directory = tempfile.mkdtemp(prefix="csp-budget-bench-", dir="/tmp")
    server = RedisServer(directory)
    server.start()
    try:
        config = Config(daemon=DaemonConfig(state_dir=directory, log_level="warning"))
        config = replace(config, audit=replace(config.audit, enabled=False))
        rows = trio.run(measure, config, server.url, n)
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
    print(f"# {n} tasks a series; python bench/budget.py{' --quick' if args.quick else ''}")
    print("measure\tvalue\tanchor\tratio\tgoal")
    for name, value, anchor, goal in rows:
        print(f"{name}\t{value:.1f}\t{anchor:.1f}\t{value / anchor:.2f}\t{goal}")


if __name__ == "__main__":
    main()
