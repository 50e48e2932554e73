"""Fetch benchmarks as a user meets them (issue 26, goals 1 to 4): ``csp-web serve`` in its own
process, the client on its Unix socket, the HTTPS origin (bench/origin.py) in a third process.
Each figure is a ratio against an anchor measured in the same run:

- cached fetch round trip, p50 and p99, against a ping's on the same connection, interleaved
  (goal <= 2x), and the daemon's CPU per cache hit (/proc utime+stime over a block of hits;
  goal <= 0.3 ms) beside its CPU per ping;
- uncached fetch + extract of every corpus page (NO_CACHE true): the daemon's own overhead per
  page, round trip - a pooled GET of the same page (httpx keep-alive client) - extraction
  (``extract_article`` here, in process, on the same HTML), each the page's best of the rounds,
  median over pages (goal <= 2 ms); and the event loop's CPU per page (the daemon's main thread;
  goal < 3 ms);
- throughput at 1/4/16/64 connections, cached and uncached: 64 keeps >= 90 % of the peak,
  16 uncached >= 1.7x 1, and the daemon's processes (with its workers) use >= 1.3 cores at 16
  connections uncached.

The daemon runs with the shipped config except: the origin's port and 127.0.0.1 opened, the
body caps at 2 MB (one page is over 1 MB), the fetch rate limit out of the way, and
``fetch.render: never`` (a page judged an app shell would otherwise measure Chromium). Figure
lines are tab-separated for scripts/bench (bench/table.py).

    python bench/fetch.py [--quick] [--workers N]
"""

from __future__ import annotations

import argparse
import collections
import itertools
import math
import os
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import trio
import trustme

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so `python bench/fetch.py` finds the packages
    sys.path.insert(0, str(REPO_ROOT))

from bench.csp_client import PING, Client, check, connect, fetch_task, percentiles  # noqa: E402
from bench.daemon_process import (  # noqa: E402
    DaemonProcess,
    cpu_s,
    default_has,
    running_daemon,
    tree_cpu_s,
)
from bench.origin import ADDRESS, BODY_CAP_BYTES, corpus_pages, page_path, start_origin  # noqa: E402
from protocol import Status, Task  # noqa: E402
from specialists.extract import extract_article  # noqa: E402

CONNECTIONS = (1, 4, 16, 64)
NO_CACHE = ("NO_CACHE", "true")


def emit(measure: str, value: str, anchor: str, ratio: str, goal: str) -> None:
    """One figure line for scripts/bench's table."""
    print("\t".join((measure, value, anchor, ratio, goal)), flush=True)


def daemon_settings(workdir: str, port: int, ca_path: str, workers: int | None) -> dict[str, Any]:
    web: dict[str, Any] = {
        "guard": {
            "allowed_ports": [port],
            "allow_private": [ADDRESS],
            "max_body_bytes": BODY_CAP_BYTES,
            "max_decoded_bytes": BODY_CAP_BYTES,
        },
        # Raised so that the benchmark measures the fetch, not the bucket (seed: 20/min).
        "fetch": {"rate": {"per_minute": 1e9, "burst": 1_000_000}, "render": "never"},
        "tls": {"ca_file": ca_path},
    }
    if workers is not None:
        web["workers"] = workers
    return {
        "daemon": {"state_dir": os.path.join(workdir, "state"), "log_level": "warning"},
        "web": web,
    }


# --- (1) cached fetch against ping ----------------------------------------------------------------


async def timed(client: Client, task: Task, *, cached: bool = False) -> float:
    """``task``'s round trip in ms; exits the bench on a FAIL or an expected hit that missed."""
    started = time.perf_counter()
    reply = await client.call(task)
    elapsed = (time.perf_counter() - started) * 1000
    check(reply, task.req)
    if cached and reply.get("CACHED") != "true":
        raise SystemExit("a cached fetch was not answered from the cache")
    return elapsed


async def cpu_per_call_ms(client: Client, pid: int, task: Task, calls: int) -> float:
    """The daemon's CPU (with any workers) per call of ``task``, over ``calls`` in a row."""
    before = tree_cpu_s(pid)
    for _ in range(calls):
        check(await client.call(task), task.req)
    return (tree_cpu_s(pid) - before) * 1000 / calls


async def cached_figures(daemon: DaemonProcess, url: str, rounds: int) -> None:
    client = await connect(daemon.socket_path)
    hit = fetch_task(url)
    check(await client.call(hit), "prime")
    pings: list[float] = []
    hits: list[float] = []
    for index in range(rounds + rounds // 10):  # interleaved: load on the host hits both alike
        ping_ms, hit_ms = await timed(client, PING), await timed(client, hit, cached=True)
        if index >= rounds // 10:  # the first tenth warms up
            pings.append(ping_ms)
            hits.append(hit_ms)
    cpu = {"ping": 0.0, "hit": 0.0}
    # Alternated blocks: the host's load falls on both, and audit writes the outbox batches
    # after a block ends land in the next block of either kind.
    for _ in range(2):
        cpu["ping"] += await cpu_per_call_ms(client, daemon.pid, PING, rounds // 2) / 2
        cpu["hit"] += await cpu_per_call_ms(client, daemon.pid, hit, rounds // 2) / 2
    await client.stream.aclose()
    (hit50, hit99), (ping50, ping99) = percentiles(hits), percentiles(pings)
    for name, mine, anchor in (("p50", hit50, ping50), ("p99", hit99, ping99)):
        emit(
            f"cached fetch round trip {name}",
            f"{mine:.3f} ms",
            f"{anchor:.3f} ms ping {name}",
            f"{mine / anchor:.2f}x",
            "<= 2x",
        )
    emit(
        "daemon CPU per cache hit",
        f"{cpu['hit']:.3f} ms",
        f"{cpu['ping']:.3f} ms per ping",
        f"{cpu['hit'] / max(cpu['ping'], 1e-6):.2f}x",
        "<= 0.3 ms",
    )


# --- (2) uncached fetch + extract: the daemon's own overhead --------------------------------------


async def timed_get(http: httpx.AsyncClient, url: str) -> float:
    started = time.perf_counter()
    response = await http.get(url)
    elapsed = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise SystemExit(f"pooled GET {url}: {response.status_code}")
    return elapsed


def timed_extract(html: str, url: str) -> float:
    started = time.perf_counter()
    extract_article(html, url=url)
    return (time.perf_counter() - started) * 1000


async def uncached_figures(
    daemon: DaemonProcess, base: str, trust: ssl.SSLContext, rounds: int
) -> None:
    pages = {page_id: html.decode("utf-8", "replace") for page_id, html in corpus_pages().items()}
    best = {page_id: [math.inf, math.inf, math.inf] for page_id in pages}  # trip, GET, extract
    client = await connect(daemon.socket_path)
    loop_cpu = daemon_cpu = 0.0
    async with httpx.AsyncClient(verify=trust) as http:
        for _ in range(rounds):
            for page_id, html in pages.items():
                url = base + page_path(page_id)
                get_ms = await timed_get(http, url)
                loop_before, tree_before = cpu_s(daemon.pid, daemon.pid), tree_cpu_s(daemon.pid)
                trip_ms = await timed(client, fetch_task(url, NO_CACHE))
                loop_cpu += cpu_s(daemon.pid, daemon.pid) - loop_before
                daemon_cpu += tree_cpu_s(daemon.pid) - tree_before
                figures = (trip_ms, get_ms, timed_extract(html, url))
                best[page_id] = [min(pair) for pair in zip(best[page_id], figures, strict=True)]
    await client.stream.aclose()
    fetches = rounds * len(pages)
    overhead = statistics.median(trip - get - extract for trip, get, extract in best.values())
    get_ms = statistics.median(figures[1] for figures in best.values())
    extract_ms = statistics.median(figures[2] for figures in best.values())
    emit(
        f"uncached fetch overhead per page ({len(pages)} pages, median)",
        f"{overhead:.2f} ms",
        f"{get_ms:.2f} ms pooled GET + {extract_ms:.2f} ms extraction",
        f"{overhead / (get_ms + extract_ms):.2f}x",
        "<= 2 ms",
    )
    loop_ms, daemon_ms = loop_cpu * 1000 / fetches, daemon_cpu * 1000 / fetches
    emit(
        "event-loop CPU per uncached page",
        f"{loop_ms:.2f} ms",
        f"{daemon_ms:.2f} ms CPU of the daemon's processes",
        f"{loop_ms / max(daemon_ms, 1e-6):.2f}x",
        "< 3 ms",
    )


# --- (3) throughput by connections ----------------------------------------------------------------


async def fetch_rate(
    daemon: DaemonProcess, urls: list[str], connections: int, seconds: float, cached: bool
) -> tuple[float, collections.Counter[str], float]:
    """Served fetches/s over ``connections`` clients looping for ``seconds``, the replies by
    outcome ("served" or the error code), and the daemon's processes' cores used meanwhile."""
    clients = [await connect(daemon.socket_path) for _ in range(connections)]
    next_url = itertools.cycle(urls)
    fields = () if cached else (NO_CACHE,)
    outcomes: collections.Counter[str] = collections.Counter()
    end = time.perf_counter() + seconds

    async def loop(client: Client) -> None:
        while time.perf_counter() < end:
            reply = await client.call(fetch_task(next(next_url), *fields))
            if reply.status is Status.FAIL:
                outcomes[(reply.get("ERROR") or "").partition(":")[0]] += 1
                continue
            if cached and reply.get("CACHED") != "true":
                raise SystemExit("a cached fetch was not answered from the cache")
            outcomes["served"] += 1  # OK, or PARTIAL for a page cut at its MAX_CHARS

    cpu_before, started = tree_cpu_s(daemon.pid), time.perf_counter()
    async with trio.open_nursery() as nursery:
        for client in clients:
            nursery.start_soon(loop, client)
    elapsed = time.perf_counter() - started
    cores = (tree_cpu_s(daemon.pid) - cpu_before) / elapsed
    for client in clients:
        await client.stream.aclose()
    return outcomes["served"] / elapsed, outcomes, cores


async def throughput_figures(daemon: DaemonProcess, urls: list[str], seconds: float) -> None:
    client = await connect(daemon.socket_path)
    for url in urls:  # every page in the cache for the cached series
        check(await client.call(fetch_task(url)), url)
    await client.stream.aclose()
    rates: dict[tuple[bool, int], float] = {}
    for cached in (True, False):
        refused = []
        for connections in CONNECTIONS:
            rate, outcomes, cores = await fetch_rate(daemon, urls, connections, seconds, cached)
            rates[cached, connections] = rate
            refused.append(sum(outcomes.values()) - outcomes["served"])
            print(f"{'cached' if cached else 'uncached'} x{connections}: {dict(outcomes)}")
            if not cached and connections == 16:
                emit(
                    "daemon cores used, 16 connections uncached",
                    f"{cores:.2f} cores",
                    f"{os.cpu_count()} cores in the machine",
                    f"{cores / (os.cpu_count() or 1):.0%}",
                    ">= 1.3 cores",
                )
        kind = "cached" if cached else "uncached"
        series = "/".join(f"{rates[cached, n]:.0f}" for n in CONNECTIONS)
        shown = "/".join(str(n) for n in refused)
        emit(f"{kind} fetches/s at 1/4/16/64 connections", series, f"refused {shown}", "", "")
        peak_at = max(CONNECTIONS, key=lambda n: rates[cached, n])
        peak = rates[cached, peak_at]
        emit(
            f"{kind} fetches/s at 64 connections vs peak",
            f"{rates[cached, 64]:.0f}/s",
            f"peak {peak:.0f}/s at {peak_at}",
            f"{rates[cached, 64] / peak:.0%}",
            ">= 90%",
        )
    emit(
        "uncached fetches/s at 16 connections vs 1",
        f"{rates[False, 16]:.0f}/s",
        f"{rates[False, 1]:.0f}/s at 1",
        f"{rates[False, 16] / max(rates[False, 1], 1e-6):.2f}x",
        ">= 1.7x",
    )


# --- the run --------------------------------------------------------------------------------------


async def measure(daemon: DaemonProcess, port: int, trust: ssl.SSLContext, quick: bool) -> None:
    base = f"https://{ADDRESS}:{port}"
    pages = corpus_pages()
    by_size = sorted(pages, key=lambda page_id: len(pages[page_id]))
    typical = by_size[len(by_size) // 2]
    started = time.perf_counter()
    await cached_figures(daemon, base + page_path(typical), 300 if quick else 4000)
    print(f"(cached figures in {time.perf_counter() - started:.0f} s)")
    await uncached_figures(daemon, base, trust, 1 if quick else 3)
    print(f"(uncached figures in {time.perf_counter() - started:.0f} s)")
    urls = [base + page_path(page_id) for page_id in pages]
    await throughput_figures(daemon, urls, 1.5 if quick else 6.0)
    print(f"(throughput figures in {time.perf_counter() - started:.0f} s)")


def run(args: argparse.Namespace) -> None:
    if args.workers is not None and not default_has("web", "workers"):
        raise SystemExit("--workers: this daemon has no web.workers setting")
    ca = trustme.CA()
    trust = ssl.create_default_context()
    ca.configure_trust(trust)
    with tempfile.TemporaryDirectory(prefix="csp-bench-fetch-", dir="/tmp") as workdir:
        ca_path = os.path.join(workdir, "ca.pem")
        ca.cert_pem.write_to_path(ca_path)
        origin, port = start_origin(ca, workdir)
        try:
            settings = daemon_settings(workdir, port, ca_path, args.workers)
            with running_daemon(workdir, settings) as daemon:
                trio.run(measure, daemon, port, trust, args.quick)
        finally:
            origin.kill()
            origin.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="300 cached rounds, 1 uncached, 1.5 s windows"
    )
    parser.add_argument("--workers", type=int, help="web.workers (where the daemon has it)")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores", flush=True)
    run(args)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    flags = (" --quick" if args.quick else "") + (
        f" --workers {args.workers}" if args.workers is not None else ""
    )
    print(f"reproduce: python bench/fetch.py{flags}")


if __name__ == "__main__":
    main()
