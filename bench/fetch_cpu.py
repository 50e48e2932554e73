"""CPU time of a cached and of an uncached fetch, each beside its anchor in the same run (issue 26
goals 1 and 2). The daemon runs in this process (bench/fetch.py runs it as a process of its
own) and is called over its Unix socket; the HTTPS origin (bench/origin.py) runs in its own
process, so its work is not counted.

- (a) a cache hit: ``time.process_time()`` around ``--rounds`` fetches of one primed page of
  median size, and around as many pings, interleaved in blocks, on one connection: CPU per
  op (client included; the ping's shows what the client and the frame cost), p50 round trips
  and their ratio (goals: hit <= 0.3 ms of daemon CPU, round trip <= 2x a ping's);
- (b) an uncached fetch (NO_CACHE true) of every dev corpus page: the median round trip, less
  a pooled HTTPS GET of the same page (httpx, one client, in this process) and the page's
  reading in this process (``reading.read_page``: extraction, outline and head; and the
  extractor alone), per page (goal: round trip - GET - extraction <= 2 ms).

``--reading`` measures only the reading of the dev corpus pages, ``reading.read_page`` (one
parse for the article and the outline) against each reader alone (a parse each), interleaved,
in CPU time per page.

``--no-audit`` turns the ops' audit records off (``audit.enabled``), to tell the fetch's own
cost from its record's: a fetch's reply waits for its record's commit, a ping's is summarised.

    python bench/fetch_cpu.py [--rounds N] [--no-audit] [--reading]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import trio
import trustme

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so `python bench/fetch_cpu.py` finds the packages
    sys.path.insert(0, str(REPO_ROOT))

from bench.csp_client import Client, check, fetch_task  # noqa: E402
from bench.origin import HOST, bench_config, corpus_pages, page_path, start_origin  # noqa: E402
from csp_web.app.memory_path import open_memory_path  # noqa: E402
from csp_web.config import AuditConfig  # noqa: E402
from csp_web.core.daemon.compose import open_daemon  # noqa: E402
from csp_web.core.daemon.lifecycle import serve  # noqa: E402
from protocol import Task  # noqa: E402
from specialists.extract import extract_article, outline  # noqa: E402
from specialists.web import make_web  # noqa: E402
from specialists.web.pages.appshell import shell_reason  # noqa: E402
from specialists.web.pages.headmeta import read_head  # noqa: E402
from specialists.web.pages.reading import read_page  # noqa: E402
from tests.net._dns import FixedResolver  # noqa: E402

PING = Task("ping", "SYS", "PONG")
BLOCK = 100  # ops per timed block; pings and hits alternate so both see the same load


async def timed(client: Client, task: Task, count: int, wall: list[float]) -> float:
    """CPU seconds of ``count`` calls of ``task``; each round trip appended to ``wall`` (ms)."""
    started_cpu = time.process_time()
    for _ in range(count):
        started = time.perf_counter()
        reply = await client.call(task)
        wall.append((time.perf_counter() - started) * 1000)
    check(reply, task.req)
    return time.process_time() - started_cpu


async def hits(client: Client, url: str, rounds: int) -> None:
    check(await client.call(fetch_task(url)), "prime")
    reply = await client.call(fetch_task(url))
    if reply.get("CACHED") != "true":
        raise SystemExit("the second fetch was not answered from the cache")
    cpu = {"ping": 0.0, "hit": 0.0}
    wall: dict[str, list[float]] = {"ping": [], "hit": []}
    for _ in range(max(1, rounds // BLOCK)):
        cpu["ping"] += await timed(client, PING, BLOCK, wall["ping"])
        cpu["hit"] += await timed(client, fetch_task(url), BLOCK, wall["hit"])
    count = len(wall["hit"])
    hit_us, ping_us = cpu["hit"] / count * 1e6, cpu["ping"] / count * 1e6
    hit_ms, ping_ms = statistics.median(wall["hit"]), statistics.median(wall["ping"])
    print(f"(a) cache hit, {count} each, load {load()}:")
    print(f"    CPU per op: hit {hit_us:.0f} us, ping {ping_us:.0f} us,", end=" ")
    print(f"hit - ping {hit_us - ping_us:.0f} us")
    print(f"    round trip p50: hit {hit_ms:.3f} ms, ping {ping_ms:.3f} ms,", end=" ")
    print(f"ratio {hit_ms / ping_ms:.2f}")


async def uncached(
    client: Client, base: str, pages: dict[str, bytes], trust: ssl.SSLContext
) -> None:
    port = base.rsplit(":", 1)[1]
    trip, get, read, extract, cpu, get_cpu = [], [], [], [], [], []
    async with httpx.AsyncClient(verify=trust) as pool:
        for page_id, body in pages.items():
            started_cpu, started = time.process_time(), time.perf_counter()
            response = await pool.get(f"https://127.0.0.1:{port}{page_path(page_id)}")
            get.append((time.perf_counter() - started) * 1000)
            get_cpu.append((time.process_time() - started_cpu) * 1000)
            assert response.content == body
            html = body.decode("utf-8", "replace")
            started = time.process_time()
            read_page(html, "https://origin.test/page")
            read.append((time.process_time() - started) * 1000)
            started = time.process_time()
            extract_article(html, url="https://origin.test/page")
            extract.append((time.process_time() - started) * 1000)
            started_cpu, started = time.process_time(), time.perf_counter()
            reply = await client.call(fetch_task(base + page_path(page_id), ("NO_CACHE", "true")))
            trip.append((time.perf_counter() - started) * 1000)
            cpu.append((time.process_time() - started_cpu) * 1000)
            check(reply, page_id)
    med = statistics.median
    print(f"(b) uncached fetch, NO_CACHE true, {len(trip)} pages, medians, load {load()}:")
    print(
        f"    round trip {med(trip):.2f} ms, pooled GET {med(get):.2f} ms,"
        f" read_page {med(read):.2f} ms, extract_article {med(extract):.2f} ms"
    )
    over_cpu = [c - g - r for c, g, r in zip(cpu, get_cpu, read, strict=True)]
    print(
        f"    CPU: fetch {med(cpu):.2f} ms, pooled GET {med(get_cpu):.2f} ms;"
        f" overhead (fetch - GET - read_page) median {med(over_cpu):.2f} ms"
    )
    over = [t - g - r for t, g, r in zip(trip, get, read, strict=True)]
    over_x = [t - g - x for t, g, x in zip(trip, get, extract, strict=True)]
    print(
        f"    overhead (trip - GET - read_page) median {med(over):.2f} ms;"
        f" (trip - GET - extract_article) median {med(over_x):.2f} ms"
    )


def each_reader_alone(html: str, url: str) -> tuple[object, ...]:
    article = extract_article(html, url=url)
    head = read_head(html, base_url=url)
    return head, article, outline(html), shell_reason(html, article.markdown)


def reading(rounds: int = 3) -> None:
    """CPU per page of ``read_page`` and of each reader alone, interleaved page by page."""
    spent = {"read_page": 0.0, "alone": 0.0}
    pages = [body.decode("utf-8", "replace") for body in corpus_pages().values()]
    for _ in range(rounds):
        for html in pages:
            for name, read in (("read_page", read_page), ("alone", each_reader_alone)):
                started = time.process_time()
                read(html, "https://origin.test/page")
                spent[name] += time.process_time() - started
    one, alone = (spent[name] / (rounds * len(pages)) * 1000 for name in ("read_page", "alone"))
    print(f"reading, {len(pages)} pages x {rounds}, CPU per page, load {load()}:")
    print(f"    read_page {one:.2f} ms, each reader alone {alone:.2f} ms, ratio {one / alone:.3f}")
    print("reproduce: python bench/fetch_cpu.py --reading")


def load() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 1)[0]


async def run(args: argparse.Namespace) -> None:
    ca = trustme.CA()
    trust = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ca.configure_trust(trust)
    with tempfile.TemporaryDirectory(prefix="csp-bench-", dir="/tmp") as workdir:
        proc, port = start_origin(ca, workdir)
        try:
            config = bench_config(workdir, port, "normal")
            if args.no_audit:
                config = dataclasses.replace(config, audit=AuditConfig(enabled=False))
            resolver = FixedResolver({HOST: ["127.0.0.1"]})
            pages = corpus_pages()
            web = make_web(resolver=resolver, ssl_context=trust)
            async with (
                open_daemon(config, (web,), memory=open_memory_path(config)) as daemon,
                trio.open_nursery() as nursery,
            ):
                socket_path = os.path.join(workdir, "cpu.sock")
                await nursery.start(
                    functools.partial(serve, daemon, stdio=None, socket_path=socket_path)
                )
                async with await trio.open_unix_socket(socket_path) as stream:
                    client = Client(stream)
                    base = f"https://{HOST}:{port}"
                    by_size = sorted(pages, key=lambda page_id: len(pages[page_id]))
                    typical = by_size[len(pages) // 2]
                    await hits(client, base + page_path(typical), args.rounds)
                    await uncached(client, base, pages, trust)
                nursery.cancel_scope.cancel()
        finally:
            proc.kill()
            proc.wait()
    print("reproduce: python bench/fetch_cpu.py" + (" --no-audit" if args.no_audit else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2000, help="cache hits (and pings) to time")
    parser.add_argument("--no-audit", action="store_true", help="audit.enabled false")
    parser.add_argument("--reading", action="store_true", help="only read_page vs each reader")
    args = parser.parse_args()
    if args.reading:
        reading()
    else:
        trio.run(run, args)


if __name__ == "__main__":
    main()
