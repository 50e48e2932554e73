"""Document benchmarks over the real Unix socket (issue 14): an in-process daemon with every web
op and its embedded Memory Specialist, and bench/origin.py's local HTTPS origin process serving
the extraction dev corpus.

- (a) five pages uncached (NO_CACHE true): five fetch tasks one after another, against one
  fetch task with five URL fields (loaded concurrently); the median wall time of each;
- (b) the File Cabinet: ``save`` of a fetched page (one acknowledged memory write) and
  ``cabinet`` reading a page saved once back (one memory read), p50 and p99 each.

    python bench/documents.py [--rounds N]
"""

from __future__ import annotations

import argparse
import functools
import os
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio
import trustme

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so `python bench/documents.py` finds the packages
    sys.path.insert(0, str(REPO_ROOT))

from bench.csp_client import Client, check, percentiles  # noqa: E402
from bench.origin import HOST, bench_config, corpus_pages, page_path, start_origin  # noqa: E402
from csp_web.app.memory_path import open_memory_path  # noqa: E402
from csp_web.core.daemon.compose import open_daemon  # noqa: E402
from csp_web.core.daemon.lifecycle import serve  # noqa: E402
from protocol import Task  # noqa: E402
from specialists.web import make_web  # noqa: E402
from tests.net._dns import FixedResolver  # noqa: E402

PAGES = 5


def task(req: str, out: str, *fields: tuple[str, str]) -> Task:
    return Task(req, "WEB", out, None, fields)


async def five_pages(client: Client, urls: list[str], rounds: int) -> tuple[float, float]:
    one_by_one: list[float] = []
    together: list[float] = []
    for _ in range(rounds):
        started = time.perf_counter()
        for url in urls:
            check(
                await client.call(task("fetch", "CONTENT", ("URL", url), ("NO_CACHE", "true"))), url
            )
        one_by_one.append((time.perf_counter() - started) * 1000)
        fields = [("URL", url) for url in urls] + [("NO_CACHE", "true")]
        started = time.perf_counter()
        reply = await client.call(task("fetch", "CONTENT", *fields))
        together.append((time.perf_counter() - started) * 1000)
        check(reply, "five URLs")
        if reply.get("DATA") != f"fetched:{len(urls)},failed:0":
            raise SystemExit(f"five URLs: {reply.get('DATA')}")
    return statistics.median(one_by_one), statistics.median(together)


async def cabinet(client: Client, urls: list[str], rounds: int) -> tuple[list[float], list[float]]:
    """Saves of one page again and again, and reads of another page saved once (a key saved
    N times is N lines at its PATH, and a read carries them all)."""
    keys = []
    for url in urls[:2]:
        fetched = await client.call(task("fetch", "CONTENT", ("URL", url)))
        check(fetched, "fetch")
        keys.append(fetched.get("FILE_KEY") or "")
    saved, read = keys
    check(await client.call(task("save", "ACK", ("FILE_KEY", read))), "save")
    saves: list[float] = []
    reads: list[float] = []
    for _ in range(rounds):
        started = time.perf_counter()
        check(await client.call(task("save", "ACK", ("FILE_KEY", saved))), "save")
        saves.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        check(await client.call(task("cabinet", "CONTENT", ("FILE_KEY", read))), "cabinet")
        reads.append((time.perf_counter() - started) * 1000)
    return saves, reads


async def measure(trust: ssl.SSLContext, port: int, workdir: str, rounds: int) -> None:
    config = bench_config(workdir, port, "normal")
    resolver = FixedResolver({HOST: ["127.0.0.1"]})
    pages = corpus_pages()
    by_size = sorted(pages, key=lambda page_id: len(pages[page_id]))
    middle = len(by_size) // 2
    chosen = by_size[middle - PAGES // 2 : middle - PAGES // 2 + PAGES]
    urls = [f"https://{HOST}:{port}{page_path(page_id)}" for page_id in chosen]
    web = make_web(resolver=resolver, ssl_context=trust)
    async with (
        open_daemon(config, (web,), memory=open_memory_path(config)) as daemon,
        trio.open_nursery() as nursery,
    ):
        socket_path = os.path.join(workdir, "docs.sock")
        await nursery.start(functools.partial(serve, daemon, stdio=None, socket_path=socket_path))
        async with await trio.open_unix_socket(socket_path) as stream:
            client = Client(stream)
            sequential, concurrent = await five_pages(client, urls, rounds)
            saves, reads = await cabinet(client, urls, rounds * 10)
        nursery.cancel_scope.cancel()
    print(f"(a) {PAGES} median-size corpus pages, NO_CACHE, median of {rounds} rounds:")
    print(f"    {PAGES} fetch tasks one after another: {sequential:.1f} ms")
    print(f"    one fetch task with {PAGES} URL fields: {concurrent:.1f} ms")
    save_p50, save_p99 = percentiles(saves)
    read_p50, read_p99 = percentiles(reads)
    print(f"(b) File Cabinet, {len(saves)} rounds, embedded Memory Specialist:")
    print(f"    save    p50 {save_p50:.2f} ms  p99 {save_p99:.2f} ms")
    print(f"    cabinet p50 {read_p50:.2f} ms  p99 {read_p99:.2f} ms")
    print(f"reproduce: python bench/documents.py --rounds {rounds}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    ca = trustme.CA()
    trust = ssl.create_default_context()
    ca.configure_trust(trust)
    with tempfile.TemporaryDirectory() as workdir:
        proc, port = start_origin(ca, workdir)
        try:
            trio.run(measure, trust, port, workdir, args.rounds)
        finally:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
