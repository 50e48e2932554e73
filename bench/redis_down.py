"""A fleet with Redis up, then with Redis stopped (issue 21 §5): throughput and worst reply.

Two daemons on one redis-server (the default ``redis.call_timeout_s`` and ``retry_s``), each
with its own process, the HTTPS origin in another; C connections in all fetch the corpus
pages round-robin for a fixed time, cache on (after one warm pass, mostly hits). Then
redis-server is stopped (``--pause``: SIGSTOP, a server that accepts and never answers), each
daemon makes one pass over the pages (the outage's first pass: what its memory tier did not
hold is downloaded; timed and counted apart) and the same load runs again: the daemons must
run on their local tiers. Redis is then restarted empty, and the round repeats (``--rounds``,
alternated so both phases see the same host load). Prints both rates, their ratio (goal >=
0.5), the worst reply of each and the downloads the origin saw with Redis down, for each
working set: by default 5 and 50 pages, smaller and larger than the memory tier the bench
gives each daemon (``--memory-mib``); the disk tier under it (``redis.fallback_cache_bytes``)
holds both.

    python bench/redis_down.py [--seconds S] [--rounds R] [--concurrency C]
        [--pages N,N...] [--memory-mib M] [--pause]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import trio

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so `python bench/redis_down.py` finds the packages
    sys.path.insert(0, str(REPO_ROOT))

from bench.csp_client import fetch_task  # noqa: E402
from bench.origin import corpus_pages, page_path  # noqa: E402
from bench.redis_fleet import (  # noqa: E402
    HOST,
    Fleet,
    connect,
    count_seen,
    open_fleet,
    redis_stats,
)
from csp_web.config.redis import RedisConfig  # noqa: E402
from protocol import Status  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402


@dataclass
class Phase:
    """Replies and seconds summed over the rounds of one phase (Redis up, or stopped)."""

    replies: int = 0
    seconds: float = 0.0
    worst_ms: float = 0.0

    @property
    def rate(self) -> float:
        return self.replies / self.seconds

    def __str__(self) -> str:
        return f"{self.rate:.1f} replies/s (worst {self.worst_ms:.0f} ms)"


async def load(paths: list[str], urls: list[str], seconds: float, c: int, into: Phase) -> None:
    """C connections fetch ``urls`` round-robin for ``seconds``; counted ``into`` the phase."""
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
    into.replies += done
    into.seconds += time.perf_counter() - started
    into.worst_ms = max(into.worst_ms, worst * 1000)


async def warm(paths: list[str], urls: list[str]) -> float:
    """Every page once through each daemon (the daemons at once): in Redis when it is up, in
    each memory tier it fits, and with Redis down in the disk tier. Returns the seconds."""
    started = time.perf_counter()

    async def one(path: str) -> None:
        client = await connect(path)
        for url in urls:
            await client.call(fetch_task(url))

    async with trio.open_nursery() as nursery:
        for path in paths:
            nursery.start_soon(one, path)
    return time.perf_counter() - started


async def downloads(fleet: Fleet) -> int:
    return (await count_seen(fleet.ca_path, fleet.port)).get("/corpus", 0)


async def measure_set(
    fleet: Fleet, server: RedisServer, args: argparse.Namespace, pages: int
) -> None:
    """Both rates for a working set of ``pages`` corpus pages on two fresh daemons, in
    ``args.rounds`` rounds of up then stopped (alternated: both see the same host load)."""
    urls = [
        f"https://{HOST}:{fleet.port}{page_path(page_id)}"
        for page_id in sorted(corpus_pages())[:pages]
    ]
    memory_bytes = args.memory_mib * 1024 * 1024
    paths = [
        fleet.daemon(f"p{pages}-{n}", redis=True, call_timeout_s=None, memory_bytes=memory_bytes)
        for n in (1, 2)
    ]
    up, down = Phase(), Phase()
    first_s, first_fetched, fetched = 0.0, 0, 0
    for _ in range(args.rounds):
        await warm(paths, urls)
        await load(paths, urls, args.seconds, args.concurrency, up)
        if args.pause:
            server.pause()  # SIGSTOP: connects are queued by the kernel, replies never come
        else:
            server.stop()
        before = await downloads(fleet)
        first_s += await warm(paths, urls)  # the outage's first pass: pages not held, fetched
        middle = await downloads(fleet)
        await load(paths, urls, args.seconds, args.concurrency, down)
        first_fetched, fetched = (
            first_fetched + middle - before,
            fetched + await downloads(fleet) - middle,
        )
        server.restart()  # empty (no persistence); resumed first when paused
        await trio.sleep(RedisConfig.retry_s)  # the daemons' down window ends: warm asks Redis
    fallbacks: Counter[str] = Counter()
    for path in paths:
        fallbacks.update((await redis_stats(await connect(path)))["fallbacks"])
    fleet.stop()
    print(
        f"{len(urls)} corpus pages, memory tier {args.memory_mib} MiB, fleet of 2, "
        f"{args.concurrency} connections, {args.rounds} x {args.seconds:g} s each: "
        f"Redis up {up}, Redis {'paused' if args.pause else 'stopped'} {down}: "
        f"down/up x{down.rate / up.rate:.2f} (goal >= 0.5); "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print(
        f"    Redis down: the first pass over the pages took {first_s / args.rounds:.1f} s "
        f"with {first_fetched / args.rounds:.0f} downloads at the origin (per round); the "
        f"timed load after it {fetched / args.rounds:.0f} downloads per round; the fleet's "
        f"fallbacks {dict(sorted(fallbacks.items()))}"
    )


async def measure(fleet: Fleet, server: RedisServer, args: argparse.Namespace) -> None:
    for pages in args.pages:
        await measure_set(fleet, server, args, pages)


def run(args: argparse.Namespace) -> None:
    with open_fleet("csp-down-") as (fleet, server):
        trio.run(measure, fleet, server, args)
    print(
        f"reproduce: python bench/redis_down.py --seconds {args.seconds:g} "
        f"--rounds {args.rounds} --concurrency {args.concurrency} "
        f"--pages {','.join(map(str, args.pages))} --memory-mib {args.memory_mib}"
        + (" --pause" if args.pause else "")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="each measurement's length")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of up then stopped")
    parser.add_argument("--concurrency", type=int, default=8, help="connections in all")
    parser.add_argument(
        "--pages",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[5, 50],
        help="working sets measured, in corpus pages (default 5,50: with 1 MiB of memory tier,"
        " one it holds and one it does not: 50 pages cache about 1.5 MB of JSON)",
    )
    parser.add_argument(
        "--memory-mib", type=int, default=1, help="each daemon's web.cache.memory_bytes, MiB"
    )
    parser.add_argument("--pause", action="store_true", help="SIGSTOP redis-server, not kill it")
    run(parser.parse_args())


if __name__ == "__main__":
    main()
