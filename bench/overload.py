"""Overload benchmark (issue 26 goal 4): what a refused frame costs, and whether throughput holds
when more clients come than the web specialist runs at once.

Against `csp-web serve` in its own process, over its Unix socket, with a local HTTP origin in a
process of its own (so its serving work is not counted as the daemon's); every op audited into
the durable outbox as in production.

- **refused frame**: with the web pool held full (two fetches the origin never answers, the
  pool at 1 running + 1 queued), one connection pipelines fetches that are all answered ``busy``;
  the daemon's CPU per refusal, against its CPU per pipelined audited ping in the same daemon
  (the cheapest frame it answers). Goal <= 50 us.
- **throughput at 1 / 16 / 64 connections**, each a closed loop (send one fetch, wait for its
  reply, again), under the configured defaults and under the seed's 5 running / 10 queued:
  a cheap op (a cached fetch) and a slow one (``NO_CACHE`` fetch of a page the origin answers
  after ``--delay-ms``, a distinct URL each so no two share a load). Successful replies per
  second, and the share answered ``busy``. Goal: at 64 connections >= 90 % of the best of the
  three, and no ``busy`` (64 clients wait rather than fail).

Prints one line per measure, ``measure<TAB>value<TAB>anchor<TAB>ratio<TAB>goal``, the load
average before and after, and the command that reproduces them:

    python bench/overload.py [--quick] [--seconds S] [--delay-ms MS]
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.daemon import PING, cpu_s, loadavg, measure_line, read_replies, start_daemon
from bench.processes import start_serving
from protocol import Connection, Reply, Status

PAGE = b"<html><head><title>Slow</title></head><body><p>" + b"word " * 200 + b"</p></body></html>"
SEED_POOLS = "{max_running: 5, max_queued: 10}"  # the seed's tool limits, web's before issue 26
CONNECTIONS = (1, 16, 64)


async def serve_origin(delay_s: float) -> None:
    """The origin process: HTTP/1.1 keep-alive on 127.0.0.1; ``/slow/...`` answers after
    ``delay_s``, ``/hold/...`` never within a run, anything else at once; prints its port."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    print(listeners[0].socket.getsockname()[1], flush=True)
    head = b"HTTP/1.1 %s\r\ncontent-type: text/html\r\ncontent-length: %d\r\n\r\n"
    ok, missing = head % (b"200 OK", len(PAGE)) + PAGE, head % (b"404 Not Found", 0)

    async def serve(stream: trio.SocketStream) -> None:
        buffer = b""
        try:
            while True:
                while b"\r\n\r\n" not in buffer:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    buffer += data
                request, _, buffer = buffer.partition(b"\r\n\r\n")
                path = request.split(b" ", 2)[1]
                if path.startswith(b"/slow/"):
                    await trio.sleep(delay_s)
                elif path.startswith(b"/hold/"):
                    await trio.sleep(3600)
                await stream.send_all(missing if path == b"/robots.txt" else ok)
        except trio.BrokenResourceError:
            return

    await trio.serve_listeners(serve, listeners)


def web_config(port: int, pools: str | None) -> str:
    """The daemon's web settings: the guard opened for the local origin, no rate limit."""
    tasks = f"tasks: {{specialists: {{web: {pools}}}}}\n" if pools else ""
    return tasks + (
        "web:\n"
        f"  guard: {{allow_http: true, allowed_ports: [{port}], allow_private: ['127.0.0.1']}}\n"
        "  fetch: {rate: {per_minute: 1000000000, burst: 1000000}, render: never}\n"
    )


def fetch_frame(url: str, *, no_cache: bool, timeout_ms: int | None = None) -> bytes:
    extra = "NO_CACHE true\n" if no_cache else ""
    extra += f"TIMEOUT_MS {timeout_ms}\n" if timeout_ms else ""
    return f"TASK REQ:fetch {url} IN:WEB OUT:CONTENT\n{extra}\n".encode()


async def one_reply(stream: trio.SocketStream, codec: Connection) -> Reply:
    replies: list[Reply] = []
    await read_replies(stream, codec, 1, replies)
    return replies[0]


class Tally:
    """Replies counted by outcome across a run's clients."""

    def __init__(self) -> None:
        self.ok = 0
        self.busy = 0
        self.other: dict[str, int] = {}

    def count(self, reply: Reply) -> None:
        if reply.status is not Status.FAIL:
            self.ok += 1
            return
        code = (reply.get("ERROR") or "").partition(":")[0]
        if code == "busy":
            self.busy += 1
        else:
            self.other[code] = self.other.get(code, 0) + 1


async def closed_loop(path: str, frames: Iterator[bytes], end: float, tally: Tally) -> None:
    """One client: a frame, its reply, the next, until ``end`` (perf_counter)."""
    stream = await trio.open_unix_socket(path)
    codec = Connection()
    async with stream:
        while time.perf_counter() < end:
            await stream.send_all(next(frames))
            tally.count(await one_reply(stream, codec))


async def throughput(
    path: str, make: Callable[[int, int], bytes], connections: int, seconds: float
) -> Tally:
    tally = Tally()
    end = time.perf_counter() + seconds
    async with trio.open_nursery() as nursery:
        for client in range(connections):
            frames = (make(client, n) for n in itertools.count())
            nursery.start_soon(closed_loop, path, frames, end, tally)
    return tally


async def throughput_rows(path: str, base: str, label: str, seconds: float) -> list[str]:
    """Cached and slow fetch throughput at 1 / 16 / 64 connections on one daemon."""
    async with await trio.open_unix_socket(path) as stream:  # prime the cached page
        await stream.send_all(fetch_frame(f"{base}/page", no_cache=False))
        primed = await one_reply(stream, Connection())
        assert primed.status is Status.OK, primed
    ops = {
        "cached fetch": lambda _c, _n: fetch_frame(f"{base}/page", no_cache=False),
        "slow fetch": lambda c, n: fetch_frame(f"{base}/slow/{c}/{n}", no_cache=True),
    }
    rows = []
    for op, make in ops.items():
        rates: dict[int, float] = {}
        tallies: dict[int, Tally] = {}
        for connections in CONNECTIONS:
            tallies[connections] = await throughput(path, make, connections, seconds)
            rates[connections] = tallies[connections].ok / seconds
        peak = max(rates.values())
        for connections in CONNECTIONS:
            tally, rate = tallies[connections], rates[connections]
            answered = tally.ok + tally.busy + sum(tally.other.values())
            rows.append(
                measure_line(
                    f"{op} OK/s at {connections} conns, {label}"
                    + (
                        f" (busy {tally.busy / answered:.0%}, other {tally.other})"
                        if answered
                        else ""
                    ),
                    f"{rate:.0f}/s",
                    f"{peak:.0f}/s peak",
                    rate / peak if peak else 0.0,
                    ">= 0.90 of peak, no busy" if connections == 64 else "-",
                )
            )
    return rows


async def refusal_rows(path: str, pid: int, base: str, frames: int) -> list[str]:
    """Daemon CPU per ``busy`` refusal and per audited ping, pipelined on one connection."""
    holder = await trio.open_unix_socket(path)
    async with holder:
        held = fetch_frame(f"{base}/hold/0", no_cache=True, timeout_ms=600000)
        await holder.send_all(held * 2)
        await trio.sleep(0.5)  # one held fetch runs, one waits: the pool (1 + 1) is full
        refused = await pipelined_cpu_us(
            path, pid, fetch_frame(f"{base}/hold/1", no_cache=True), frames
        )
        ping = await pipelined_cpu_us(path, pid, PING, frames)
    return [
        measure_line(
            "refused (busy) frame, daemon CPU",
            f"{refused[0]:.1f} us",
            f"{ping[0]:.1f} us/audited ping",
            refused[0] / ping[0],
            "<= 50 us" + ("" if refused[1] == frames else f" ({refused[1]}/{frames} busy!)"),
        )
    ]


async def pipelined_cpu_us(path: str, pid: int, frame: bytes, frames: int) -> tuple[float, int]:
    """The daemon's CPU per frame for ``frames`` copies of ``frame`` pipelined on one
    connection (best of two rounds), and how many the last round answered ``busy``."""
    best = float("inf")
    busy = 0
    for _ in range(2):
        stream = await trio.open_unix_socket(path)
        replies: list[Reply] = []
        async with stream, trio.open_nursery() as nursery:
            before = cpu_s(pid)
            nursery.start_soon(stream.send_all, frame * frames)
            await read_replies(stream, Connection(), frames, replies)
            best = min(best, (cpu_s(pid) - before) / frames * 1e6)
        busy = sum((r.get("ERROR") or "").startswith("busy:") for r in replies)
    return best, busy


def run_daemon(workdir: str, name: str, extra: str) -> tuple[subprocess.Popen[bytes], str]:
    return start_daemon(os.path.join(workdir, name), True, "normal", None, extra=extra)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=3.0, help="per throughput point")
    parser.add_argument("--delay-ms", type=float, default=50.0, help="the slow page's delay")
    parser.add_argument("--frames", type=int, default=3000, help="pipelined frames per round")
    parser.add_argument("--quick", action="store_true", help="1 s per point, 2,000 frames")
    parser.add_argument("--origin", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.origin is not None:
        trio.run(serve_origin, args.origin)
        return
    seconds, frames = (1.0, 2000) if args.quick else (args.seconds, args.frames)
    print(f"# load average before: {loadavg()}", file=sys.stderr)
    origin, port = start_serving(
        str(Path(__file__).resolve()), "--origin", str(args.delay_ms / 1000)
    )
    base = f"http://127.0.0.1:{port}"
    rows: list[str] = []
    try:
        with tempfile.TemporaryDirectory(prefix="csp-bench-overload-", dir="/tmp") as workdir:
            for name, pools in (("defaults", None), ("seed 5/10", SEED_POOLS)):
                proc, path = run_daemon(
                    workdir, name.replace(" ", "_").replace("/", "-"), web_config(port, pools)
                )
                try:
                    rows += trio.run(throughput_rows, path, base, name, seconds)
                finally:
                    proc.terminate()
                    proc.wait(30)
            tight = web_config(port, "{max_running: 1, max_queued: 1}")
            proc, path = run_daemon(workdir, "refusals", tight)
            try:
                rows += trio.run(refusal_rows, path, proc.pid, base, frames)
            finally:
                proc.terminate()
                proc.wait(30)
    finally:
        origin.kill()
        origin.wait()
    for row in rows:
        print(row)
    print(f"# load average after: {loadavg()}", file=sys.stderr)
    quick = " --quick" if args.quick else f" --seconds {seconds:g} --frames {frames}"
    print(f"reproduce: python bench/overload.py{quick} --delay-ms {args.delay_ms:g}")


if __name__ == "__main__":
    main()
