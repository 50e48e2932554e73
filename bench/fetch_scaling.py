"""Whether the daemon's CPU per fetch grows with connections (issue 26 goals 3 and 4), in CPU
time, which the other load of a shared host does not inflate as it does fetches/s.

``csp-web serve`` in its own process, the HTTPS origin (bench/origin.py) in another, as in
bench/fetch.py. For 1, 16 and 64 connections in turn, each a closed loop over the dev corpus
pages, the same number of fetches each (cached: every page primed; uncached: NO_CACHE): the
event loop's thread CPU per fetch and the daemon's processes' (with its workers), each against
the 1-connection figure of the same run. Goal: the ratio stays near 1x (per-op work that is
O(connections) would grow it); docs/scaling.md has the diagnosis. Each point also prints the
worker processes started during it: a worker is replaced after 200 tasks, about 1 s of CPU
each, which lands in whichever point it falls in (the processes' figure, not the loop's).

    python bench/fetch_scaling.py [--cached N] [--uncached N]
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import tempfile
from pathlib import Path

import trio
import trustme

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so `python bench/fetch_scaling.py` finds the packages
    sys.path.insert(0, str(REPO_ROOT))

from bench.csp_client import check, connect, fetch_task  # noqa: E402
from bench.daemon_process import (  # noqa: E402
    DaemonProcess,
    cpu_s,
    descendants,
    running_daemon,
    tree_cpu_s,
)
from bench.fetch import NO_CACHE, daemon_settings, emit  # noqa: E402
from bench.origin import ADDRESS, corpus_pages, page_path, start_origin  # noqa: E402

CONNECTIONS = (1, 16, 64)


async def cpu_per_fetch_ms(
    daemon: DaemonProcess, urls: list[str], connections: int, fetches: int, cached: bool
) -> tuple[float, float]:
    """The event loop's and the daemon's processes' CPU (ms) per fetch, over ``fetches``
    spread across ``connections`` closed-loop clients; prints the workers started meanwhile."""
    clients = [await connect(daemon.socket_path) for _ in range(connections)]
    next_url, fields = itertools.cycle(urls), (() if cached else (NO_CACHE,))
    left = fetches
    workers_before = set(descendants(daemon.pid))
    workers_seen = set(workers_before)

    async def loop(client_index: int) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            task = fetch_task(next(next_url), *fields)
            check(await clients[client_index].call(task), task.req)
            workers_seen.update(descendants(daemon.pid))

    loop_before, tree_before = cpu_s(daemon.pid, daemon.pid), tree_cpu_s(daemon.pid)
    async with trio.open_nursery() as nursery:
        for index in range(connections):
            nursery.start_soon(loop, index)
    loop_ms = (cpu_s(daemon.pid, daemon.pid) - loop_before) * 1000 / fetches
    tree_ms = (tree_cpu_s(daemon.pid) - tree_before) * 1000 / fetches
    for client in clients:
        await client.stream.aclose()
    kind = "cached" if cached else "uncached"
    started = len(workers_seen - workers_before)
    print(f"{kind} x{connections}: {fetches} fetches, {started} worker processes started")
    return loop_ms, tree_ms


async def measure(daemon: DaemonProcess, port: int, counts: dict[bool, int]) -> None:
    base = f"https://{ADDRESS}:{port}"
    urls = [base + page_path(page_id) for page_id in corpus_pages()]
    primer = await connect(daemon.socket_path)
    for url in urls:
        check(await primer.call(fetch_task(url)), url)
    await primer.stream.aclose()
    for cached, fetches in counts.items():
        kind = "cached" if cached else "uncached"
        figures = {n: await cpu_per_fetch_ms(daemon, urls, n, fetches, cached) for n in CONNECTIONS}
        for connections in CONNECTIONS[1:]:
            for which, name in ((0, "event-loop"), (1, "daemon processes'")):
                mine, anchor = figures[connections][which], figures[1][which]
                emit(
                    f"{name} CPU per {kind} fetch at {connections} connections",
                    f"{mine:.2f} ms",
                    f"{anchor:.2f} ms at 1",
                    f"{mine / max(anchor, 1e-6):.2f}x",
                    "~1x",
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cached", type=int, default=3000, help="cached fetches per point")
    parser.add_argument("--uncached", type=int, default=150, help="uncached fetches per point")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores", flush=True)
    ca = trustme.CA()
    with tempfile.TemporaryDirectory(prefix="csp-bench-scaling-", dir="/tmp") as workdir:
        ca_path = os.path.join(workdir, "ca.pem")
        ca.cert_pem.write_to_path(ca_path)
        origin, port = start_origin(ca, workdir)
        try:
            with running_daemon(workdir, daemon_settings(workdir, port, ca_path, None)) as daemon:
                trio.run(measure, daemon, port, {True: args.cached, False: args.uncached})
        finally:
            origin.kill()
            origin.wait()
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    flags = f"--cached {args.cached} --uncached {args.uncached}"
    print(f"reproduce: python bench/fetch_scaling.py {flags}")


if __name__ == "__main__":
    main()
