"""Node-route latency (issue 13, protocol/NODES.md N-17): a node connected to daemon A, the
same ``location_get`` asked of A (the daemon holding the link) and of B (a peer, which
forwards it over Redis). Both daemons, the node (scripted: it answers at once, so the figure
is the daemons' and Redis's share) and the client run in this one trio process; redis-server
is its own process on a Unix socket. Prints p50 and p99 of each, and the Redis round trips
each routed task cost B.

    python bench/node_route.py [--tasks N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so `python bench/node_route.py` finds the packages
    sys.path.insert(0, str(REPO_ROOT))

from csp_web.client.trio_client import open_client  # noqa: E402
from csp_web.config import Config, DaemonConfig  # noqa: E402
from csp_web.config.redis import RedisConfig  # noqa: E402
from csp_web.infra.redis_link import RedisLink, open_redis_link  # noqa: E402
from protocol import Status  # noqa: E402
from tests.node.support import (  # noqa: E402
    NodeDaemon,
    ScriptedNode,
    node_config,
    node_task,
    pair,
    start_node_daemon,
)
from tests.redis_server import RedisServer  # noqa: E402


async def answer(node: ScriptedNode) -> None:
    while True:
        task = await node.next_task()
        await node.answer(task, Status.OK, ("DATA", "lat:1.5,lon:2.5"), ("SOURCE", "fixed"))


async def timed(daemon: NodeDaemon, tasks: int) -> list[float]:
    took = []
    async with open_client(daemon.client_path) as client:
        for _ in range(tasks):
            started = time.perf_counter()
            reply = await client.call(node_task("lab1", "location_get"), timeout_s=30)
            took.append((time.perf_counter() - started) * 1000)
            assert reply.status is Status.OK, reply
    return took


def summary(label: str, took: list[float]) -> str:
    ordered = sorted(took)
    p99 = ordered[min(len(ordered) - 1, round(len(ordered) * 0.99))]
    return f"{label:<34} p50 {statistics.median(ordered):6.2f} ms   p99 {p99:6.2f} ms"


async def main(tasks: int, directory: str, server: RedisServer) -> None:
    redis = RedisConfig(url=server.url)
    async with (
        open_redis_link(redis) as link_a,
        open_redis_link(redis) as link_b,
        trio.open_nursery() as nursery,
    ):
        assert link_a is not None
        assert link_b is not None
        links: list[RedisLink] = [link_a, link_b]
        for link in links:
            nursery.start_soon(link.serve_events)
        with trio.fail_after(10):
            while not all(link.events_live for link in links):
                await trio.sleep(0.01)
        daemons = []
        for name, link in zip("ab", links, strict=True):
            sub = os.path.join(directory, name)
            os.mkdir(sub, 0o700)
            config = Config(daemon=DaemonConfig(state_dir=os.path.join(sub, "state")))
            config = node_config(config, sub)
            daemons.append(await start_node_daemon(nursery, config, sub, link=link))
        a, b = daemons
        node, _ = await pair(a, "lab1")
        fleet = a.services.fleet
        assert fleet is not None
        with trio.fail_after(10):
            while "lab1" not in fleet.registered:
                await fleet.synced.wait()
        nursery.start_soon(answer, node)
        await timed(a, 20)  # warm both paths
        await timed(b, 20)
        here = await timed(a, tasks)
        trips_before = link_b.round_trips
        there = await timed(b, tasks)
        trips = (link_b.round_trips - trips_before) / tasks
        print(f"node route, {tasks} location_get tasks each, load average {os.getloadavg()[0]:.2f}")
        print(summary("through the daemon holding the link", here))
        print(summary("through a peer (forwarded)", there))
        print(f"Redis round trips per forwarded task at the peer: {trips:.2f}")
        print("B's NODES line:", b.services.stats_line())
        print("B's REDIS line:", json.loads(link_b.stats_line())["fallbacks"] or "no fallbacks")
        print("reproduce: python bench/node_route.py --tasks", tasks)
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=300)
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="csp-bench-", dir="/tmp")
    server = RedisServer(directory)
    server.start()
    try:
        trio.run(main, args.tasks, directory, server)
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
