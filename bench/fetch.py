"""Fetch benchmarks over the real Unix socket: an in-process daemon serving the fetch ops, and a
local HTTPS origin (trustme certificate, test DNS mapping origin.test to 127.0.0.1) that runs in
its own process, as a remote site would, so its serving work is not counted as ours.

- (a) cached fetch round trip, p50 and p99: a page of median size is fetched once to prime the
  cache, then again and again on one connection (goal: p50 <= 1 ms);
- (b) uncached fetch + extract of every page of the extraction dev corpus, one at a time with
  NO_CACHE true: the median ms per page end to end (goal: <= 10 ms).

Each op writes its one audit record into the durable outbox as in production; no Memory
Specialist runs, so the writes accumulate. Both outbox sync settings are measured ("normal" is
the default). The fetch rate limit is raised so it never waits, and the body caps are doubled
to 2 MB because one corpus page is over the default 1 MB. The daemon freezes its start-up
objects out of the collector's view itself (serve calls gc.freeze()).

    python bench/fetch.py [--rounds N] [--synchronous full|normal|both]
"""

from __future__ import annotations

import argparse
import functools
import gzip
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Literal

import trio
import trustme

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so `python bench/fetch.py` finds the packages
    sys.path.insert(0, str(REPO_ROOT))

from bench.processes import start_serving  # noqa: E402
from csp_web.app.memory_path import open_memory_path  # noqa: E402
from csp_web.config import Config, DaemonConfig, OutboxConfig, with_section  # noqa: E402
from csp_web.core.daemon.compose import open_daemon  # noqa: E402
from csp_web.core.daemon.lifecycle import serve  # noqa: E402
from csp_web.net import GuardConfig  # noqa: E402
from protocol import CLOSED, NEED_DATA, Connection, Reply, Status, Task  # noqa: E402
from specialists.web import make_web  # noqa: E402
from specialists.web.config import (  # noqa: E402
    RateConfig,
    WebConfig,
)
from tests.net._dns import FixedResolver  # noqa: E402
from tests.net._origin import Origin  # noqa: E402
from tests.net._origin import Reply as OriginReply  # noqa: E402

CORPUS = REPO_ROOT.parent / "shared" / "corpus" / "extraction-dev" / "html"
HOST = "origin.test"
BODY_CAP_BYTES = 2_000_000  # the guard's default is 1 MB (seed 001)
Sync = Literal["full", "normal"]


class Client:
    """One CSP/1 connection to the daemon: send a task, wait for its reply."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.codec = Connection()

    async def call(self, task: Task) -> Reply:
        await self.stream.send_all(self.codec.send(task))
        while True:
            event = self.codec.next_event()
            if isinstance(event, Reply):
                return event
            if event is CLOSED:
                raise SystemExit("daemon closed the connection")
            assert event is NEED_DATA
            self.codec.receive_data(await self.stream.receive_some(1 << 20))


def corpus_pages() -> dict[str, bytes]:
    return {
        path.name.removesuffix(".html.gz"): gzip.decompress(path.read_bytes())
        for path in sorted(CORPUS.glob("*.html.gz"))
    }


def page_path(page_id: str) -> str:
    return f"/corpus/{page_id}"


async def serve_origin(pem_path: str) -> None:
    """The origin process: serve every corpus page, print the port, run until killed."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pem_path)
    origin = Origin("https")
    headers = [("content-type", "text/html; charset=utf-8")]
    for page_id, body in corpus_pages().items():
        origin.routes[page_path(page_id)] = functools.partial(
            lambda data, _seen: OriginReply(200, headers, data), body
        )
    async with trio.open_nursery() as nursery:
        await nursery.start(functools.partial(origin.serve, ssl_context=context))
        print(origin.port, flush=True)


def start_origin(ca: trustme.CA, workdir: str) -> tuple[subprocess.Popen[str], int]:
    pem_path = os.path.join(workdir, "origin.pem")
    ca.issue_cert(HOST).private_key_and_cert_chain_pem.write_to_path(pem_path)
    script = str(Path(__file__).resolve())
    return start_serving(script, "--origin", pem_path)


def bench_config(workdir: str, port: int, synchronous: Sync) -> Config:
    web = WebConfig()
    return with_section(
        Config(
            daemon=DaemonConfig(state_dir=os.path.join(workdir, synchronous), log_level="warning"),
            outbox=OutboxConfig(synchronous=synchronous),
        ),
        "web",
        replace(
            web,
            guard=GuardConfig(
                allowed_ports=(port,),
                allow_private=("127.0.0.1",),
                max_body_bytes=BODY_CAP_BYTES,
                max_decoded_bytes=BODY_CAP_BYTES,
            ),
            # Raised so that the benchmark measures the fetch, not the bucket (seed: 20/min).
            fetch=replace(web.fetch, rate=RateConfig(per_minute=1e9, burst=1_000_000)),
        ),
    )


def fetch_task(url: str, *fields: tuple[str, str]) -> Task:
    return Task("fetch", "WEB", "CONTENT", url, fields)


def check(reply: Reply, what: str) -> None:
    if reply.status is Status.FAIL:
        raise SystemExit(f"{what}: {reply.get('ERROR')}")


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


async def cached_round_trips(client: Client, url: str, rounds: int) -> list[float]:
    check(await client.call(fetch_task(url)), "prime")
    samples: list[float] = []
    for index in range(rounds + rounds // 10):
        started = time.perf_counter()
        reply = await client.call(fetch_task(url))
        elapsed = (time.perf_counter() - started) * 1000
        check(reply, "cached fetch")
        if reply.get("CACHED") != "true":
            raise SystemExit("cached fetch was not answered from the cache")
        if index >= rounds // 10:  # the first tenth warms up
            samples.append(elapsed)
    return samples


async def uncached_pages(client: Client, base: str, page_ids: list[str]) -> list[float]:
    samples: list[float] = []
    for page_id in page_ids:
        started = time.perf_counter()
        reply = await client.call(fetch_task(base + page_path(page_id), ("NO_CACHE", "true")))
        samples.append((time.perf_counter() - started) * 1000)
        check(reply, page_id)
    return samples


async def measure(
    trust: ssl.SSLContext, port: int, workdir: str, synchronous: Sync, args: argparse.Namespace
) -> None:
    config = bench_config(workdir, port, synchronous)
    resolver = FixedResolver({HOST: ["127.0.0.1"]})
    pages = corpus_pages()
    async with (
        open_daemon(
            config,
            (make_web(resolver=resolver, ssl_context=trust),),
            memory=open_memory_path(config),
        ) as daemon,
        trio.open_nursery() as nursery,
    ):
        socket_path = os.path.join(workdir, f"{synchronous}.sock")
        await nursery.start(functools.partial(serve, daemon, stdio=None, socket_path=socket_path))
        async with await trio.open_unix_socket(socket_path) as stream:
            await report(Client(stream), f"https://{HOST}:{port}", pages, args.rounds, synchronous)
        nursery.cancel_scope.cancel()


async def report(
    client: Client, base: str, pages: dict[str, bytes], rounds: int, synchronous: Sync
) -> None:
    by_size = sorted(pages, key=lambda page_id: len(pages[page_id]))
    typical = by_size[len(by_size) // 2]
    cached = await cached_round_trips(client, base + page_path(typical), rounds)
    p50, p99 = percentiles(cached)
    uncached = await uncached_pages(client, base, list(pages))
    u50, u99 = percentiles(uncached)
    print(f"outbox synchronous={synchronous} (every op writes its one audit record):")
    print(
        f"  (a) cached fetch round trip: p50 {p50:.3f} ms, p99 {p99:.3f} ms "
        f"({len(cached)} fetches of a {len(pages[typical]) // 1024} KiB page; goal p50 <= 1 ms)"
    )
    print(
        f"  (b) uncached fetch + extract: median {u50:.2f} ms per page, p99 {u99:.2f} ms "
        f"({len(uncached)} corpus pages, NO_CACHE true; goal median <= 10 ms)"
    )


async def run(args: argparse.Namespace) -> None:
    ca = trustme.CA()
    trust = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ca.configure_trust(trust)
    modes: list[Sync] = ["full", "normal"] if args.synchronous == "both" else [args.synchronous]
    with tempfile.TemporaryDirectory(prefix="csp-bench-", dir="/tmp") as workdir:
        proc, port = start_origin(ca, workdir)
        try:
            for synchronous in modes:
                await measure(trust, port, workdir, synchronous, args)
        finally:
            proc.kill()
            proc.wait()
    print("reproduce: python bench/fetch.py")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2000, help="cached fetches to time")
    parser.add_argument("--synchronous", choices=("full", "normal", "both"), default="both")
    parser.add_argument("--origin", help=argparse.SUPPRESS)  # internal: run the origin process
    args = parser.parse_args()
    if args.origin:
        trio.run(serve_origin, args.origin)
    else:
        trio.run(run, args)


if __name__ == "__main__":
    main()
