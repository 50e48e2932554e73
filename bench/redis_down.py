"""A fleet with Redis up, then with Redis stopped (issue 21 §5): throughput and worst reply.

Two daemons on one redis-server (the default ``redis.call_timeout_s`` and ``retry_s``), each
with its own process, the HTTPS origin in another; C connections in all fetch the corpus
pages round-robin for a fixed time, cache on (after one warm pass, mostly hits). Then
redis-server is stopped (``--pause``: SIGSTOP, a server that accepts and never answers) and
the same load runs again: the daemons must run on their local fallbacks. Prints both rates,
their ratio (goal >= 0.5) and the worst reply of each. With more pages than a daemon's memory
tier holds (``web.cache.memory_bytes``), every read with Redis down is a download.

    python bench/redis_down.py [--seconds S] [--concurrency C] [--pages N] [--pause]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio
import trustme

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so `python bench/redis_down.py` finds the packages
    sys.path.insert(0, str(REPO_ROOT))

from bench.fetch import corpus_pages, fetch_task, page_path  # noqa: E402
from bench.redis_fleet import HOST, Fleet, connect, redis_stats  # noqa: E402
from protocol import Status  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402


async def load(paths: list[str], urls: list[str], seconds: float, c: int) -> tuple[float, float]:
    """Replies per second and the slowest reply (ms) of C connections for ``seconds``."""
    done = 0
    worst = 0.0
    failed: list[str | None] = []
    stop_at = time.perf_counter() + seconds

    async def worker(index: int) -> None:
        nonlocal done, worst
        client = await connect(paths[index % len(paths)])
        at = index
        while time.perf_counter() < stop_at:
            started = time.perf_counter()
            reply = await client.call(fetch_task(urls[at % len(urls)]))
            if reply.status is Status.FAIL:  # an origin timeout on a loaded host: counted
                failed.append(reply.get("ERROR"))
            worst = max(worst, time.perf_counter() - started)
            done += 1
            at += c

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for index in range(c):
            nursery.start_soon(worker, index)
    if failed:
        print(f"{len(failed)} of {done} failed: {sorted(set(map(str, failed)))}")
    return done / (time.perf_counter() - started), worst * 1000


async def measure(fleet: Fleet, server: RedisServer, args: argparse.Namespace) -> None:
    base = f"https://{HOST}:{fleet.port}"
    urls = [base + page_path(page_id) for page_id in sorted(corpus_pages())[: args.pages]]
    paths = [fleet.daemon(name, redis=True, call_timeout_s=None) for name in ("d1", "d2")]
    for path in paths:  # warm: every page in Redis, and in each daemon's memory tier
        client = await connect(path)
        for url in urls:
            await client.call(fetch_task(url))
    up, up_worst = await load(paths, urls, args.seconds, args.concurrency)
    if args.pause:
        server.pause()  # SIGSTOP: connects are queued by the kernel, replies never come
    else:
        server.stop()
    down, down_worst = await load(paths, urls, args.seconds, args.concurrency)
    fallbacks = (await redis_stats(await connect(paths[0])))["fallbacks"]
    print(f"daemon 1's fallbacks with Redis stopped: {fallbacks}")
    print(
        f"fleet of 2, {args.concurrency} connections, {len(urls)} corpus pages, "
        f"{args.seconds:g} s each: Redis up {up:.1f} replies/s (worst {up_worst:.0f} ms), "
        f"Redis stopped {down:.1f} replies/s (worst {down_worst:.0f} ms): "
        f"down/up x{down / up:.2f} (goal >= 0.5); load average {os.getloadavg()[0]:.1f}"
    )


def run(args: argparse.Namespace) -> None:
    ca = trustme.CA()
    workdir = tempfile.mkdtemp(prefix="csp-down-", dir="/tmp")
    ca_path = os.path.join(workdir, "ca.pem")
    ca.cert_pem.write_to_path(ca_path)
    pem = os.path.join(workdir, "origin.pem")
    ca.issue_cert(HOST).private_key_and_cert_chain_pem.write_to_path(pem)
    server = RedisServer(workdir)
    server.start()
    script = str(REPO_ROOT / "bench" / "redis_fleet.py")
    origin = subprocess.Popen(
        [sys.executable, script, "--origin", pem], stdout=subprocess.PIPE, text=True
    )
    fleet: Fleet | None = None
    try:
        assert origin.stdout is not None
        fleet = Fleet(workdir, ca_path, int(origin.stdout.readline()), server.url)
        trio.run(measure, fleet, server, args)
    finally:
        if fleet is not None:
            fleet.stop()
        origin.kill()
        origin.wait()
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print(
        f"reproduce: python bench/redis_down.py --seconds {args.seconds:g} "
        f"--concurrency {args.concurrency} --pages {args.pages}"
        + (" --pause" if args.pause else "")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="each measurement's length")
    parser.add_argument("--concurrency", type=int, default=8, help="connections in all")
    parser.add_argument("--pages", type=int, default=50, help="corpus pages fetched in turn")
    parser.add_argument("--pause", action="store_true", help="SIGSTOP redis-server, not kill it")
    run(parser.parse_args())


if __name__ == "__main__":
    main()
