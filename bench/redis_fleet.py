"""Three daemons on one Redis (issue 13): each daemon, the HTTPS origin and redis-server run in
their own process; the client talks CSP/1 over each daemon's Unix socket.

- (a) cache hit latency through a peer's socket: daemon 1 fetches N corpus pages, daemon 2
  then fetches each once (a Redis hit: nothing in its memory tier) and again (a memory hit).
  The same in the same run for the embedded store: a daemon without Redis fetches the pages,
  a second one on the same diskcache directory fetches them (a disk hit). p50 and p99.
- (b) Redis round trips per op, from daemon 2's ``REDIS`` stats line (goal: a hit costs <= 1).
- (c) fetch throughput (NO_CACHE, corpus pages): the fleet of three vs one daemon, same client
  concurrency in total.
- (d) single-flight: the three daemons fetch one new URL at once; upstream requests counted.
- (e) a fetch rate limit of N/min held fleet-wide: three fresh daemons with ``fetch.rate`` N/min
  (burst N) each send N fetches of distinct URLs; the origin counts what reached it.

- (g) two daemons on one Redis serving cached fetches (issue 26, goal 3: past one machine):
  a page fetched through daemon A is a hit in daemon B, and the fetches/s of the pair against
  one daemon, the same connections in all, as figure lines for scripts/bench (bench/table.py).

    python bench/redis_fleet.py [--quick] [--pages N] [--concurrency C] [--limit N]

``--quick`` runs (g) alone, on 30 pages and 2 s windows.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import trio
import trustme

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so `python bench/redis_fleet.py` finds the packages
    sys.path.insert(0, str(REPO_ROOT))

from bench.csp_client import Client, fetch_task  # noqa: E402
from bench.origin import corpus_pages, page_path  # noqa: E402
from csp_web.app.memory_path import open_memory_path  # noqa: E402
from csp_web.config import CacheConfig, Config, DaemonConfig, with_section  # noqa: E402
from csp_web.config.redis import RedisConfig  # noqa: E402
from csp_web.core.daemon.compose import open_daemon  # noqa: E402
from csp_web.core.daemon.lifecycle import serve  # noqa: E402
from csp_web.infra.redis_link import open_redis_link  # noqa: E402
from csp_web.net import GuardConfig  # noqa: E402
from protocol import Reply, Status, Task  # noqa: E402
from specialists.web import make_web  # noqa: E402
from specialists.web.config import RateConfig, WebConfig  # noqa: E402
from tests.net._dns import FixedResolver  # noqa: E402
from tests.net._origin import Origin  # noqa: E402
from tests.net._origin import Reply as OriginReply  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402

HOST = "origin.test"
BODY_CAP_BYTES = 2_000_000


# --- the origin process -------------------------------------------------------------------------


async def serve_origin(pem_path: str) -> None:
    """Corpus pages at /corpus/<id>, a small page at any /page/<name>, and /__seen: how many
    requests each path prefix received (JSON)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pem_path)
    origin = Origin("https")
    html = [("content-type", "text/html; charset=utf-8")]
    for page_id, body in corpus_pages().items():
        origin.routes[page_path(page_id)] = functools.partial(
            lambda data, _seen: OriginReply(200, html, data), body
        )

    def seen(_seen: object) -> OriginReply:
        counts: dict[str, int] = {}
        for request in origin.requests:
            prefix = "/" + request.target.strip("/").split("/")[0]
            counts[prefix] = counts.get(prefix, 0) + 1
        return OriginReply(200, [("content-type", "application/json")], json.dumps(counts).encode())

    origin.routes["/__seen"] = seen  # /page/<anything> is the origin's built-in small page
    async with trio.open_nursery() as nursery:
        await nursery.start(functools.partial(origin.serve, ssl_context=context))
        print(origin.port, flush=True)


# --- a daemon process ---------------------------------------------------------------------------


def daemon_config(spec: dict[str, Any]) -> Config:
    web = WebConfig()
    # 1 s unless told: the fleet sections measure Redis, not its deadline; redis_down.py
    # passes None, the default (the deadline is what it measures).
    timeout_s = spec.get("call_timeout_s", 1.0) or RedisConfig.call_timeout_s
    redis = RedisConfig(url=spec["redis_url"], key_prefix=spec["prefix"], call_timeout_s=timeout_s)
    rate = RateConfig(per_minute=spec["rate_per_minute"], burst=spec["rate_burst"])
    return with_section(
        Config(
            daemon=DaemonConfig(state_dir=spec["state_dir"], log_level="warning"),
            redis=redis if spec["redis_url"] else RedisConfig(),
        ),
        "web",
        replace(
            web,
            guard=GuardConfig(
                allowed_ports=(spec["port"],),
                allow_private=("127.0.0.1",),
                max_body_bytes=BODY_CAP_BYTES,
                max_decoded_bytes=BODY_CAP_BYTES,
            ),
            cache=CacheConfig(
                directory=spec["cache_dir"],
                memory_bytes=spec.get("memory_bytes") or CacheConfig.memory_bytes,
            ),
            fetch=replace(web.fetch, rate=rate),
        ),
    )


async def serve_one_daemon(spec_json: str) -> None:
    spec = json.loads(spec_json)
    config = daemon_config(spec)
    trust = ssl.create_default_context(cafile=spec["ca"])
    resolver = FixedResolver({HOST: ["127.0.0.1"]})
    async with open_redis_link(config.redis) as link, trio.open_nursery() as nursery:
        # The web specialist as the composition root makes it, with the bench's DNS and CA.
        web = make_web(resolver=resolver, ssl_context=trust, link=link)

        async def daemon(*, task_status: trio.TaskStatus[object]) -> None:
            memory = open_memory_path(config)
            async with open_daemon(config, (web,), memory=memory) as composed:
                await serve(
                    composed, stdio=None, socket_path=spec["socket"], task_status=task_status
                )

        await nursery.start(daemon)
        if link is not None:
            with trio.fail_after(10):
                while not link.events_live:
                    await link.events_changed.wait()
        print("ready", flush=True)


# --- the benchmark ----------------------------------------------------------------------------


class Fleet:
    """Processes started by the benchmark, stopped together."""

    def __init__(self, workdir: str, ca_path: str, port: int, redis_url: str) -> None:
        self.workdir, self.ca_path, self.port, self.redis_url = workdir, ca_path, port, redis_url
        self.procs: list[subprocess.Popen[str]] = []

    def daemon(self, name: str, *, redis: bool, prefix: str = "bench:", rate: float = 1e9,
               burst: int = 1_000_000, cache_dir: str | None = None,
               call_timeout_s: float | None = 1.0,
               memory_bytes: int | None = None) -> str:  # fmt: skip
        socket_path = os.path.join(self.workdir, f"{name}.sock")
        spec = {
            "redis_url": self.redis_url if redis else None,
            "prefix": prefix,
            "state_dir": os.path.join(self.workdir, name),
            "cache_dir": cache_dir or os.path.join(self.workdir, name, "cache"),
            "port": self.port,
            "ca": self.ca_path,
            "socket": socket_path,
            "rate_per_minute": rate,
            "rate_burst": burst,
            "call_timeout_s": call_timeout_s,
            "memory_bytes": memory_bytes,
        }
        script = str(Path(__file__).resolve())
        proc = subprocess.Popen(
            [sys.executable, script, "--daemon", json.dumps(spec)],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.procs.append(proc)
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise SystemExit(f"daemon {name} did not start")
        return socket_path

    def stop(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()
        self.procs.clear()


async def connect(path: str) -> Client:
    return Client(await trio.open_unix_socket(path))


def check(reply: Reply, what: str) -> None:
    if reply.status is Status.FAIL:
        raise SystemExit(f"{what}: {reply.get('ERROR')}")


def pct(samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return f"p50 {statistics.median(ordered):.3f} ms, p99 {p99:.3f} ms"


async def timed_fetches(client: Client, urls: list[str], *, expect_cached: bool) -> list[float]:
    samples = []
    for url in urls:
        started = time.perf_counter()
        reply = await client.call(fetch_task(url))
        samples.append((time.perf_counter() - started) * 1000)
        check(reply, url)
        if expect_cached and reply.get("CACHED") != "true":
            raise SystemExit(f"{url} was not a cache hit")
    return samples


async def redis_stats(client: Client) -> dict[str, Any]:
    reply = await client.call(Task("stats", "SYS", "STATS", None, ()))
    return dict(json.loads(reply.get("REDIS") or "{}"))


async def count_seen(ca_path: str, port: int) -> dict[str, int]:
    def get() -> dict[str, int]:
        import http.client

        context = ssl.create_default_context(cafile=ca_path)
        context.check_hostname = False
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=context)
        conn.request("GET", "/__seen", headers={"Host": HOST})
        data = json.loads(conn.getresponse().read())
        conn.close()
        return dict(data)

    return await trio.to_thread.run_sync(get)


async def hits_section(fleet: Fleet, urls: list[str]) -> None:
    one = await connect(fleet.daemon("d1", redis=True))
    two = await connect(fleet.daemon("d2", redis=True))
    shared_dir = os.path.join(fleet.workdir, "shared-diskcache")
    e1 = await connect(fleet.daemon("e1", redis=False, cache_dir=shared_dir))
    e2 = await connect(fleet.daemon("e2", redis=False, cache_dir=shared_dir))
    await timed_fetches(one, urls, expect_cached=False)  # daemon 1 fills the shared cache
    await timed_fetches(e1, urls, expect_cached=False)  # e1 fills the shared diskcache
    samples: dict[str, list[float]] = {"redis": [], "disk": [], "redis_mem": [], "disk_mem": []}
    stats = [await redis_stats(two)]
    # Interleaved URL by URL, so both stores see the same load on this shared host.
    for url in urls:
        samples["redis"] += await timed_fetches(two, [url], expect_cached=True)
        samples["disk"] += await timed_fetches(e2, [url], expect_cached=True)
    stats.append(await redis_stats(two))
    for url in urls:
        samples["redis_mem"] += await timed_fetches(two, [url], expect_cached=True)
        samples["disk_mem"] += await timed_fetches(e2, [url], expect_cached=True)
    stats.append(await redis_stats(two))
    n = len(urls)
    print(f"(a) cache hit through a peer's socket ({n} corpus pages, interleaved):")
    print(f"    Redis hit (a peer filled Redis)     {pct(samples['redis'])}")
    print(f"    diskcache hit (a peer filled disk)  {pct(samples['disk'])}")
    print(f"    memory-tier hit, Redis mode         {pct(samples['redis_mem'])}")
    print(f"    memory-tier hit, embedded           {pct(samples['disk_mem'])}")
    # A fetch op reads the cache once; the stats op itself makes no Redis call.
    per_redis_hit = (stats[1]["round_trips"] - stats[0]["round_trips"]) / n
    per_memory_hit = (stats[2]["round_trips"] - stats[1]["round_trips"]) / n
    print(
        f"(b) Redis round trips per op: {per_redis_hit:.2f} per Redis hit, "
        f"{per_memory_hit:.2f} per memory hit (goal <= 1)"
    )


async def throughput_section(fleet: Fleet, paths: dict[str, str], urls: list[str], c: int) -> None:
    async def rate(sockets: list[str]) -> float:
        queue = list(urls)
        started = time.perf_counter()

        async def worker(path: str) -> None:
            client = await connect(path)
            while queue:
                url = queue.pop()
                check(await client.call(fetch_task(url, ("NO_CACHE", "true"))), url)

        async with trio.open_nursery() as nursery:
            for index in range(c):
                nursery.start_soon(worker, sockets[index % len(sockets)])
        return len(urls) / (time.perf_counter() - started)

    singles, fleets = [], []
    for _ in range(2):  # alternated, so both see the same load on this shared host
        singles.append(await rate([paths["d1"]]))
        fleets.append(await rate([paths["d1"], paths["d2"], paths["d3"]]))
    single, fleet_rate = max(singles), max(fleets)
    print(
        f"(c) fetch throughput, NO_CACHE, {len(urls)} corpus pages, {c} connections in all "
        f"(best of 2 alternated runs): one daemon {single:.1f} pages/s, fleet of three "
        f"{fleet_rate:.1f} pages/s (x{fleet_rate / single:.2f}; {os.cpu_count()} CPU cores "
        f"shared by every process, load average {os.getloadavg()[0]:.1f})"
    )


async def flight_section(fleet: Fleet, paths: dict[str, str], base: str) -> None:
    url = f"{base}/page/flight-{time.time_ns()}"
    before = (await count_seen(fleet.ca_path, fleet.port)).get("/page", 0)
    async with trio.open_nursery() as nursery:
        for name in ("d1", "d2", "d3"):
            client = await connect(paths[name])
            nursery.start_soon(functools.partial(client.call, fetch_task(url)))
    after = (await count_seen(fleet.ca_path, fleet.port)).get("/page", 0)
    print(f"(d) one new URL fetched by three daemons at once: {after - before} upstream request(s)")


async def limit_section(fleet: Fleet, base: str, limit: int) -> None:
    names = ("l1", "l2", "l3")
    sockets = [
        fleet.daemon(n, redis=True, prefix="bench-limit:", rate=limit, burst=limit) for n in names
    ]
    before = (await count_seen(fleet.ca_path, fleet.port)).get("/page", 0)
    outcomes: dict[str, int] = {}
    started = time.perf_counter()

    async def send(path: str, index: int) -> None:
        client = await connect(path)
        for n in range(limit):
            task = fetch_task(f"{base}/page/limited-{index}-{n}", ("TIMEOUT_MS", "1000"))
            reply = await client.call(task)
            code = "OK" if reply.status is Status.OK else (reply.get("ERROR") or "").split(":")[0]
            outcomes[code] = outcomes.get(code, 0) + 1

    async with trio.open_nursery() as nursery:
        for index, path in enumerate(sockets):
            nursery.start_soon(send, path, index)
    elapsed = time.perf_counter() - started
    seen = (await count_seen(fleet.ca_path, fleet.port)).get("/page", 0) - before
    allowed = limit + int(elapsed * limit / 60)  # the burst plus what refilled meanwhile
    print(
        f"(e) fetch rate {limit}/min (burst {limit}) on each of three daemons, {3 * limit} fetches "
        f"in {elapsed:.1f} s: replies {dict(sorted(outcomes.items()))}; upstream requests seen by "
        f"the origin: {seen} (fleet-wide limit: at most {allowed}) -> "
        f"{'HELD' if seen <= allowed else 'EXCEEDED'}"
    )


async def redis_cost_section(fleet: Fleet) -> None:
    """Redis's own CPU per command over the whole run (INFO commandstats), and what a cache
    hit and an uncached fetch cost it: where one Redis becomes the limit."""

    def info() -> dict[str, Any]:
        import redis

        client = redis.Redis.from_url(fleet.redis_url)
        try:
            return dict(client.info("commandstats"))
        finally:
            client.close()

    stats = await trio.to_thread.run_sync(info)
    usec = {name.removeprefix("cmdstat_"): float(v["usec_per_call"]) for name, v in stats.items()}
    calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
    hit = 2 * usec.get("get", 0.0) + usec.get("pttl", 0.0)  # one pipeline: GET, GET, PTTL
    # An uncached fetch: rate token (script), flight claim (SET NX), two cache writes (the URL
    # and, after a redirect, the final one; here one) and the flight's end: three scripts.
    fetch = 3 * usec.get("evalsha", 0.0) + usec.get("set", 0.0)
    shown = ", ".join(
        f"{name} {usec[name]:.1f} us x{calls[name]}"
        for name in ("get", "pttl", "set", "evalsha", "hgetall", "publish")
        if name in usec
    )
    print(f"(f) Redis CPU per command over the run: {shown}")
    print(
        f"    a cache hit costs Redis ~{hit:.1f} us, an uncached fetch ~{fetch:.1f} us: one Redis "
        f"core serves ~{1e6 / max(hit, 0.1):,.0f} hits/s or ~{1e6 / max(fetch, 0.1):,.0f} "
        "uncached fetches/s before it is the limit"
    )


def emit(measure: str, value: str, anchor: str, ratio: str, goal: str) -> None:
    """One figure line for scripts/bench's table."""
    print("\t".join((measure, value, anchor, ratio, goal)), flush=True)


async def cached_rate(
    sockets: list[str], urls: list[str], connections: int, seconds: float
) -> float:
    """Cache hits/s over ``connections`` clients spread over ``sockets``, each looping over
    ``urls`` for ``seconds``; exits the bench on a FAIL or a miss."""
    clients = [await connect(sockets[index % len(sockets)]) for index in range(connections)]
    served = [0]
    end = time.perf_counter() + seconds

    async def loop(client: Client, offset: int) -> None:
        for url in itertools.islice(itertools.cycle(urls), offset, None):
            if time.perf_counter() >= end:
                return
            await timed_fetches(client, [url], expect_cached=True)
            served[0] += 1

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for offset, client in enumerate(clients):
            nursery.start_soon(loop, client, offset)
    elapsed = time.perf_counter() - started
    for client in clients:
        await client.stream.aclose()
    return served[0] / elapsed


async def pair_section(fleet: Fleet, urls: list[str], connections: int, seconds: float) -> None:
    """(g): daemons A and B on one Redis (a key prefix of their own); A fetches each page, B
    asks for it; then cached fetches/s through A alone and through A and B, alternated."""
    a = fleet.daemon("pair-a", redis=True, prefix="bench-pair:")
    b = fleet.daemon("pair-b", redis=True, prefix="bench-pair:")
    fetcher, asker = await connect(a), await connect(b)
    await timed_fetches(fetcher, urls, expect_cached=False)
    hits = 0
    redis_hits: list[float] = []
    for url in urls:
        started = time.perf_counter()
        reply = await asker.call(fetch_task(url))
        check(reply, url)
        redis_hits.append((time.perf_counter() - started) * 1000)
        hits += reply.get("CACHED") == "true"
    memory_hits = await timed_fetches(asker, urls, expect_cached=True)
    await timed_fetches(fetcher, urls, expect_cached=True)  # A's memory tier holds them too
    emit(
        f"cross-daemon cache hit: fetched via A, asked of B ({len(urls)} pages)",
        f"{hits}/{len(urls)} hits",
        f"B's hit p50 {statistics.median(redis_hits):.2f} ms (then memory "
        f"{statistics.median(memory_hits):.2f} ms)",
        f"{hits / len(urls):.0%}",
        ">= 100%",
    )
    one, two = [], []
    for _ in range(2):  # alternated, so both see the same load on this shared host
        one.append(await cached_rate([a], urls, connections, seconds))
        two.append(await cached_rate([a, b], urls, connections, seconds))
    emit(
        f"cached fetches/s, two daemons on one Redis vs one ({connections} connections)",
        f"{max(two):.0f}/s",
        f"{max(one):.0f}/s one daemon",
        f"{max(two) / max(one):.2f}x",
        "",
    )


async def measure(fleet: Fleet, args: argparse.Namespace) -> None:
    base = f"https://{HOST}:{fleet.port}"
    pages = sorted(corpus_pages())
    urls = [base + page_path(page_id) for page_id in pages[: args.pages]]
    seconds = 2.0 if args.quick else 5.0
    await pair_section(fleet, urls, args.concurrency, seconds)
    if args.quick:
        return
    await hits_section(fleet, urls)
    paths = {name: os.path.join(fleet.workdir, f"{name}.sock") for name in ("d1", "d2")}
    paths["d3"] = fleet.daemon("d3", redis=True)
    all_urls = [base + page_path(page_id) for page_id in pages]
    await throughput_section(fleet, paths, all_urls, args.concurrency)
    await flight_section(fleet, paths, base)
    await limit_section(fleet, base, args.limit)
    await redis_cost_section(fleet)


@contextmanager
def open_fleet(prefix: str) -> Iterator[tuple[Fleet, RedisServer]]:
    """A fresh /tmp folder holding a test CA, a running redis-server and the HTTPS origin
    process, and the ``Fleet`` that starts daemons on them; all stopped and removed on exit
    (shared by this bench and bench/redis_down.py)."""
    ca = trustme.CA()
    workdir = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    ca_path = os.path.join(workdir, "ca.pem")
    ca.cert_pem.write_to_path(ca_path)
    pem = os.path.join(workdir, "origin.pem")
    ca.issue_cert(HOST).private_key_and_cert_chain_pem.write_to_path(pem)
    server = RedisServer(workdir)
    server.start()
    origin = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--origin", pem],
        stdout=subprocess.PIPE,
        text=True,
    )
    fleet: Fleet | None = None
    try:
        assert origin.stdout is not None
        fleet = Fleet(workdir, ca_path, int(origin.stdout.readline()), server.url)
        yield fleet, server
    finally:
        if fleet is not None:
            fleet.stop()
        origin.kill()
        origin.wait()
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def run(args: argparse.Namespace) -> None:
    """Start redis-server and the origin, measure, stop everything."""
    with open_fleet("csp-fleet-") as (fleet, _server):
        trio.run(measure, fleet, args)
    print(f"load average after: {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores")
    print(
        f"reproduce: python bench/redis_fleet.py{' --quick' if args.quick else ''} "
        f"--pages {args.pages} --concurrency {args.concurrency} --limit {args.limit}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="(g) alone, 30 pages, 2 s windows")
    parser.add_argument("--pages", type=int, help="pages for the hits (default 100, quick 30)")
    parser.add_argument("--concurrency", type=int, default=6, help="connections for (c)")
    parser.add_argument("--limit", type=int, default=10, help="fetch rate N/min for (e)")
    parser.add_argument("--origin", help=argparse.SUPPRESS)  # internal: the origin process
    parser.add_argument("--daemon", help=argparse.SUPPRESS)  # internal: one daemon process
    args = parser.parse_args()
    args.pages = args.pages or (30 if args.quick else 100)
    if args.origin:
        trio.run(serve_origin, args.origin)
    elif args.daemon:
        trio.run(serve_one_daemon, args.daemon)
    else:
        run(args)


if __name__ == "__main__":
    main()
