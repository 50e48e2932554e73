"""Search's prefetch (issue 27): a fetch of a page a search prefetched costs what a cache hit
costs. Over the real Unix socket, an in-process daemon whose search goes to a SearXNG-shaped
route of a local HTTPS origin running in its own process (as a remote site would, so its
serving work is not counted as ours):

- (a) cache hit: one page fetched once, then fetched again and again (CACHED true);
- (b) prefetched: each round searches a new query with ``PREFETCH 3``, lets the background
  loads finish, then fetches each of the three hits once, for the first time (every such
  fetch must answer CACHED true, or the bench stops);
- (c) uncached, for scale: the same kind of page with NO_CACHE true.

The figure is the ratio of (b)'s median to (a)'s (goal: about 1). The wait after each search
is a fixed pause (the bench has no view of the daemon's background queue): a fetch that
still finds its page missing stops the bench rather than being counted.

    python bench/prefetch.py [--rounds N]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import ssl
import sys
import tempfile
import time
import urllib.parse
from dataclasses import replace
from pathlib import Path

import trio
import trustme

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so `python bench/prefetch.py` finds the packages
    sys.path.insert(0, str(REPO_ROOT))

from bench.csp_client import Client, check, percentiles  # noqa: E402
from bench.processes import start_serving  # noqa: E402
from csp_web.app.memory_path import open_memory_path  # noqa: E402
from csp_web.config import (  # noqa: E402
    Config,
    DaemonConfig,
    with_section,
)
from csp_web.core.daemon.compose import open_daemon  # noqa: E402
from csp_web.core.daemon.lifecycle import serve  # noqa: E402
from csp_web.net import GuardConfig  # noqa: E402
from protocol import Task  # noqa: E402
from specialists.web import make_web  # noqa: E402
from specialists.web.config import (  # noqa: E402
    RateConfig,
    SearchProvider,
    WebConfig,
)
from tests.net._dns import FixedResolver  # noqa: E402
from tests.net._origin import Origin, Seen  # noqa: E402
from tests.net._origin import Reply as OriginReply  # noqa: E402

HOST = "origin.test"
HITS = 3  # seed 004 prefetches the top 3 results
PAGES = 2000  # pages the origin serves: /page/0 .. /page/1999
SETTLE_S = 0.5  # the pause after a search for its three background loads
_PARAGRAPH = (
    "The North Sea has two high tides every day, about twelve hours and twenty-five minutes "
    "apart. Spring tides follow the new and the full moon; neap tides fall between them. "
)


def page(number: int) -> bytes:
    """An article of about 20 KB: what extraction meets on a typical result page."""
    body = "".join(f"<p>{number}: {_PARAGRAPH}</p>" for _ in range(100))
    return (
        f"<!doctype html><html lang=en><head><title>Tides {number}</title></head>"
        f"<body><article><h1>Tides {number}</h1>{body}</article></body></html>"
    ).encode()


def searx(port: int, seen: Seen) -> OriginReply:
    """SearXNG's JSON for query ``q<n>``: pages n*HITS .. n*HITS+HITS-1, best first."""
    q = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(seen.target).query))["q"]
    first = int(q.removeprefix("q")) * HITS
    results = [
        {"url": f"https://{HOST}:{port}/page/{n}", "title": f"Tides {n}", "content": "tides",
         "score": float(HITS - i)}
        for i, n in enumerate(range(first, first + HITS))
    ]  # fmt: skip
    body = json.dumps({"query": q, "number_of_results": HITS, "results": results}).encode()
    return OriginReply(200, [("content-type", "application/json")], body)


async def serve_origin(pem_path: str) -> None:
    """The origin process: the pages and the search route; prints the port, runs until
    killed."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pem_path)
    origin = Origin("https")
    html = [("content-type", "text/html; charset=utf-8")]
    for number in range(PAGES):
        origin.routes[f"/page/{number}"] = functools.partial(
            lambda data, _seen: OriginReply(200, html, data), page(number)
        )
    origin.routes["/searx/search"] = lambda seen: searx(origin.port, seen)
    async with trio.open_nursery() as nursery:
        await nursery.start(functools.partial(origin.serve, ssl_context=context))
        print(origin.port, flush=True)


def bench_config(workdir: str, port: int) -> Config:
    web = WebConfig()
    searxng = SearchProvider("searxng", base_url=f"https://{HOST}:{port}/searx/")
    unlimited = RateConfig(per_minute=1e9, burst=1_000_000)  # the bench measures no bucket
    return with_section(
        Config(daemon=DaemonConfig(state_dir=os.path.join(workdir, "state"), log_level="warning")),
        "web",
        replace(
            web,
            guard=GuardConfig(allowed_ports=(port,), allow_private=("127.0.0.1",)),
            fetch=replace(web.fetch, rate=unlimited),
            search=replace(
                web.search,
                order=("searxng",),
                providers={"searxng": replace(searxng, rate=unlimited)},
                max_per_domain=HITS,
            ),
        ),
    )


async def timed_fetch(client: Client, url: str, *fields: tuple[str, str]) -> tuple[float, str]:
    """One fetch's round trip in ms and its CACHED value."""
    started = time.perf_counter()
    reply = await client.call(Task("fetch", "WEB", "CONTENT", url, fields))
    elapsed = (time.perf_counter() - started) * 1000
    check(reply, url)
    return elapsed, reply.get("CACHED") or ""


async def prefetched_fetches(client: Client, base: str, rounds: int) -> list[float]:
    samples: list[float] = []
    for number in range(rounds):
        search = Task("search", "WEB", "URL_REFS", None, (("QUERY", f"q{number}"),
                      ("MAX_RESULTS", str(HITS)), ("PREFETCH", str(HITS))))  # fmt: skip
        reply = await client.call(search)
        check(reply, "search")
        if reply.get("PREFETCHED") != str(HITS):
            raise SystemExit(f"search prefetched {reply.get('PREFETCHED')}, not {HITS}")
        await trio.sleep(SETTLE_S)
        for n in range(number * HITS, number * HITS + HITS):
            elapsed, cached = await timed_fetch(client, f"{base}/page/{n}")
            if cached != "true":
                raise SystemExit(f"page {n} was not prefetched within {SETTLE_S} s")
            samples.append(elapsed)
    return samples


async def report(client: Client, base: str, rounds: int) -> None:
    hot = f"{base}/page/{PAGES - 1}"
    await timed_fetch(client, hot)  # primes the cache
    hits = [(await timed_fetch(client, hot))[0] for _ in range(rounds * HITS)]
    prefetched = await prefetched_fetches(client, base, rounds)
    fresh = PAGES - 2 - rounds * HITS  # pages no search returned
    uncached = [
        (await timed_fetch(client, f"{base}/page/{fresh - n}", ("NO_CACHE", "true")))[0]
        for n in range(min(rounds * HITS, fresh))
    ]
    (h50, h99), (p50, p99), (u50, _) = map(percentiles, (hits, prefetched, uncached))
    print(f"  (a) cache hit:       p50 {h50:.3f} ms, p99 {h99:.3f} ms ({len(hits)} fetches)")
    print(f"  (b) prefetched hit:  p50 {p50:.3f} ms, p99 {p99:.3f} ms ({len(prefetched)} fetches)")
    print(f"  (c) uncached fetch:  p50 {u50:.3f} ms ({len(uncached)} fetches, NO_CACHE true)")
    print(f"  ratio prefetched / cache hit (p50): {p50 / h50:.2f} (goal: about 1)")
    print(f"  ratio uncached / cache hit (p50):   {u50 / h50:.2f}")


async def run(args: argparse.Namespace) -> None:
    ca = trustme.CA()
    trust = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ca.configure_trust(trust)
    with tempfile.TemporaryDirectory(prefix="csp-bench-", dir="/tmp") as workdir:
        pem_path = os.path.join(workdir, "origin.pem")
        ca.issue_cert(HOST).private_key_and_cert_chain_pem.write_to_path(pem_path)
        proc, port = start_serving(str(Path(__file__).resolve()), "--origin", pem_path)
        try:
            config = bench_config(workdir, port)
            web = make_web(resolver=FixedResolver({HOST: ["127.0.0.1"]}), ssl_context=trust)
            async with (
                open_daemon(config, (web,), memory=open_memory_path(config)) as daemon,
                trio.open_nursery() as nursery,
            ):
                socket_path = os.path.join(workdir, "bench.sock")
                # serve runs the daemon's background tasks, the prefetcher among them.
                await nursery.start(
                    functools.partial(serve, daemon, stdio=None, socket_path=socket_path)
                )
                async with await trio.open_unix_socket(socket_path) as stream:
                    await report(Client(stream), f"https://{HOST}:{port}", args.rounds)
                nursery.cancel_scope.cancel()
        finally:
            proc.kill()
            proc.wait()
    print(f"reproduce: python bench/prefetch.py --rounds {args.rounds}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=40, help="searches, 3 prefetched each")
    parser.add_argument("--origin", help=argparse.SUPPRESS)  # internal: run the origin process
    args = parser.parse_args()
    if args.origin:
        trio.run(serve_origin, args.origin)
    else:
        trio.run(run, args)


if __name__ == "__main__":
    main()
