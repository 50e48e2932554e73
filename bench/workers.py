"""Every core works (issue 26 goal 3): uncached fetches of the extraction dev corpus against
``csp-web serve`` in its own process, over its Unix socket, with ``web.workers`` 0 (all in the
daemon) and 2 (extraction in worker processes), in the same run.

The origin runs in a process of its own (``bench/fetch.py --origin``: HTTPS, a trustme
certificate for 127.0.0.1), so its work is not counted as ours. For each setting and for 1 and
16 connections, every connection fetches the corpus pages in turn with NO_CACHE true; from
/proc, over the timed window:

- cores: CPU seconds of the daemon's processes (the daemon, every thread, and its workers) per
  wall second (goal at 16 connections, workers=2: >= 1.3);
- loop ms/page: CPU of the daemon's main thread, the one running the event loop, per page
  (goal: < 3 ms);
- pages/s, and the ratio of 16 connections to 1 (goal: >= 1.7).

The fetch rate limit is raised so it never waits, the web slots to 16 running (the seed's 5
running + 10 queued would refuse the 16th connection as busy), the body caps to 2 MB (one
corpus page is over the default 1 MB). A warm-up pass (the corpus once, over 16 connections,
not timed) warms the workers; a worker's start is printed on its own: the CPU it uses to start and
import the extractor (measured on a pool of one in this process).

    python bench/workers.py [--quick] [--passes N]   # --quick: every other page, one pass

``main()`` prints one line per measure, ``measure<TAB>value<TAB>anchor<TAB>ratio<TAB>goal``
(the one bench command of issue 26 reads them), then the command and the load average.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import trio
import trustme

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so `python bench/workers.py` finds the packages
    sys.path.insert(0, str(REPO_ROOT))

from bench.csp_client import Client, check, fetch_task  # noqa: E402
from bench.daemon import wait_for_socket  # noqa: E402
from bench.daemon_process import descendants  # noqa: E402
from bench.origin import corpus_pages, page_path, start_origin  # noqa: E402
from csp_web.infra.workers import open_worker_pool  # noqa: E402

HOST = "127.0.0.1"
TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Run:
    """One timed window: its pages, wall seconds, and CPU seconds (all processes, the loop)."""

    pages: int
    wall_s: float
    cpu_s: float
    loop_cpu_s: float

    @property
    def cores(self) -> float:
        return self.cpu_s / self.wall_s

    @property
    def loop_ms_per_page(self) -> float:
        return self.loop_cpu_s / self.pages * 1000

    @property
    def per_s(self) -> float:
        return self.pages / self.wall_s


def stat_cpu_s(path: str) -> float:
    """utime + stime of a /proc stat file (a process's, or one thread's), in seconds; 0 for a
    process gone."""
    try:
        with open(path) as file:
            fields = file.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def daemon_cpu_s(pid: int) -> tuple[float, float]:
    """(CPU of the daemon and its live descendants, CPU of its event loop's thread): its
    workers are its template's children."""
    total = stat_cpu_s(f"/proc/{pid}/stat")
    total += sum(stat_cpu_s(f"/proc/{child}/stat") for child in descendants(pid))
    return total, stat_cpu_s(f"/proc/{pid}/task/{pid}/stat")


def start_daemon(
    workdir: str, port: int, pem: str, workers: int
) -> tuple[subprocess.Popen[bytes], str]:
    name = f"w{workers}"
    socket_path = os.path.join(workdir, f"{name}-socket", "csp.sock")
    config = os.path.join(workdir, f"{name}.yaml")
    with open(config, "w") as file:
        file.write(
            f"daemon: {{state_dir: {workdir}/{name}/state, log_level: warning}}\n"
            "tasks: {specialists: {web: {max_running: 16, max_queued: 64}}}\n"
            "web:\n"
            f"  workers: {workers}\n"
            f"  guard: {{allowed_ports: [{port}], allow_private: [127.0.0.1, '::1'],"
            " max_body_bytes: 2000000, max_decoded_bytes: 2000000}\n"
            f"  tls: {{ca_file: {pem}}}\n"
            "  fetch: {rate: {per_minute: 1000000000, burst: 1000000}}\n"
        )
    command = [sys.executable, "-m", "csp_web", "serve", "--config", config]
    proc = subprocess.Popen([*command, "--socket", socket_path, "--no-stdin"])
    wait_for_socket(proc, socket_path, "daemon")
    return proc, socket_path


async def fetch_all(socket_path: str, urls: list[str], connections: int) -> int:
    """Fetch ``urls`` (NO_CACHE true) over ``connections`` connections, each taking the next
    URL as it finishes one; the pages fetched."""
    queue = iter(urls)
    done = 0

    async def connection() -> None:
        nonlocal done
        async with await trio.open_unix_socket(socket_path) as stream:
            client = Client(stream)
            for url in queue:
                check(await client.call(fetch_task(url, ("NO_CACHE", "true"))), url)
                done += 1

    async with trio.open_nursery() as nursery:
        for _ in range(connections):
            nursery.start_soon(connection)
    return done


async def timed(pid: int, socket_path: str, urls: list[str], connections: int) -> Run:
    cpu_before, loop_before = daemon_cpu_s(pid)
    started = time.perf_counter()
    pages = await fetch_all(socket_path, urls, connections)
    wall_s = time.perf_counter() - started
    cpu_after, loop_after = daemon_cpu_s(pid)
    return Run(pages, wall_s, cpu_after - cpu_before, loop_after - loop_before)


async def measure(
    workdir: str, port: int, pem: str, workers: int, args: argparse.Namespace
) -> dict[int, Run]:
    """Runs at 1 and 16 connections, after a warm-up pass (the workers warm, about 1 s,
    while its first pages are extracted in the daemon's threads)."""
    base = f"https://{HOST}:{port}"
    urls = [base + page_path(page_id) for page_id in corpus_pages()][:: args.every]
    passes = args.passes
    proc, socket_path = start_daemon(workdir, port, pem, workers)
    try:
        await fetch_all(socket_path, urls, 16)
        return {n: await timed(proc.pid, socket_path, urls * passes, n) for n in (1, 16)}
    finally:
        proc.terminate()
        proc.wait()


async def worker_start_cpu_s() -> float:
    """The CPU a fresh worker uses to start and warm on the extractor's module (the pool's
    workers fork from a template: bench/worker_starts.py compares the two)."""
    async with open_worker_pool(1, warm="specialists.web.pages.loading", template=False) as pool:
        await pool.wait_warm()
        return stat_cpu_s(f"/proc/{pool.pids[0]}/stat")


def line(measure: str, value: float, anchor: float, goal: str) -> str:
    ratio = value / anchor if anchor else float("nan")
    return f"{measure}\t{value:.3f}\t{anchor:.3f}\t{ratio:.2f}\t{goal}"


def report(by_workers: dict[int, dict[int, Run]], start_s: float) -> list[str]:
    """The measure lines: workers=2 against workers=0 (the anchor) in the same run."""
    pool, alone = by_workers[2], by_workers[0]
    lines = [
        line("daemon cores, 16 conns, workers=2 vs 0", pool[16].cores, alone[16].cores, ">= 1.3"),
        line(
            "event loop CPU ms/uncached page, 16 conns, workers=2 vs 0",
            pool[16].loop_ms_per_page,
            alone[16].loop_ms_per_page,
            "< 3",
        ),
        line("pages/s 16 conns vs 1, workers=2", pool[16].per_s, pool[1].per_s, ">= 1.7x"),
        line("pages/s 16 conns vs 1, workers=0", alone[16].per_s, alone[1].per_s, "-"),
        line("pages/s 16 conns, workers=2 vs 0", pool[16].per_s, alone[16].per_s, "-"),
        line("daemon cores, 1 conn, workers=2 vs 0", pool[1].cores, alone[1].cores, "-"),
        line(
            "event loop CPU ms/uncached page, 1 conn, workers=2 vs 0",
            pool[1].loop_ms_per_page,
            alone[1].loop_ms_per_page,
            "-",
        ),
    ]
    lines.append(f"worker start CPU s (interpreter + extractor imports)\t{start_s:.3f}\t-\t-\t-")
    return lines


async def run(args: argparse.Namespace) -> list[str]:
    ca = trustme.CA()
    with tempfile.TemporaryDirectory(prefix="csp-bench-", dir="/tmp") as workdir:
        ca_pem = os.path.join(workdir, "ca.pem")
        ca.cert_pem.write_to_path(ca_pem)
        origin, port = start_origin(ca, workdir)
        try:
            by_workers = {
                workers: await measure(workdir, port, ca_pem, workers, args) for workers in (0, 2)
            }
            start_s = await worker_start_cpu_s()
        finally:
            origin.kill()
            origin.wait()
    return report(by_workers, start_s)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="one pass of every other page (< 60 s unloaded)"
    )
    parser.add_argument("--passes", type=int, default=3, help="corpus passes per timed window")
    args = parser.parse_args(argv)
    args.every = 2 if args.quick else 1
    if args.quick:
        args.passes = 1
    for text in trio.run(run, args):
        print(text)
    command = "python bench/workers.py" + (" --quick" if args.quick else f" --passes {args.passes}")
    with open("/proc/loadavg") as file:
        print(f"reproduce: {command}  (load average {file.read().split()[0]})")


if __name__ == "__main__":
    main()
