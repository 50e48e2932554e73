"""Fairness under load: a fresh client's ping while adversaries hold the daemon's socket.

Starts ``csp-web serve`` on a Unix socket in its own process, then for each scenario starts the
adversaries in a second process (so their own scheduling never delays the measuring client)
and measures a fresh client's ping round trip: connect, send one ping, read the pong.

- ``baseline``: no adversary;
- ``busy``: many connections, each keeping ``--depth`` pings in flight and reading replies;
- ``busy-asyncio``: the review's shape (issue 21): asyncio clients, ``--busy`` connections each
  keeping ``--asyncio-depth`` (100) pings pipelined, answered pings sent again at once;
- ``nonreading``: connections that pipeline pings and never read (the write limit, L-7, must
  close them); also reports, per connection, the time from the daemon's last write to it (its
  unread bytes, FIONREAD, last grew) to the close, and its whole lifetime (the kernel buffers
  a few hundred replies before a write blocks); connections dropped unserved count apart;
- ``newlines``: connections flooding bare newlines, reconnecting when closed (L-8);
- ``hoarders``: as many idle connections as the per-uid cap allows (L-9: evicted for newcomers).

The busy scenarios measure once every busy connection has had its first pong (the ramp-up,
printed as ``ready after N s``), and print the pongs/s the busy connections got after it.
On a shared 2-core host the client processes compete with the daemon: run it several times,
read the p50/p90/p99 distribution and the ratio to the baseline measured in the same run, and
``--pauses`` tells the daemon's own pauses (CPU time) from preemption.

Goal (issue 8 item 10, issue 21): fresh ping p99 <= 50 ms in every scenario; each p99 is also
printed as a ratio to the baseline's, measured in the same run (the host is shared and noisy).
Every count and duration is bounded by the options below.

    python bench/fairness.py [--busy 1000] [--nonreading 200] [--floods 4] [--hoarders 256]
                             [--seconds 8] [--samples 100] [--only busy-asyncio]
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import resource
import select
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from protocol import CLOSED, NEED_DATA, Connection, Limits, Reply

PING = b"TASK REQ:ping IN:SYS OUT:PONG\n\n"
HERE = Path(__file__).resolve()


def start_daemon(
    workdir: str,
    max_connections: int,
    per_uid: int,
    *,
    pauses: bool = False,
    frames_per_round: int | None = None,
) -> tuple[subprocess.Popen[bytes], str]:
    socket_path = os.path.join(workdir, "s", "csp.sock")
    config = os.path.join(workdir, "bench.yaml")
    with open(config, "w") as file:
        file.write(
            f"daemon: {{state_dir: {workdir}/state, log_level: warning}}\n"
            f"socket: {{max_connections: {max_connections}, "
            f"max_connections_per_uid: {per_uid}}}\n"
        )
        if frames_per_round is not None:
            file.write(f"connection: {{frames_per_round: {frames_per_round}}}\n")
    runner = [str(HERE.parent / "pauses.py")] if pauses else ["-m", "csp_web"]
    command = [sys.executable, *runner, "serve", "--config", config]
    with open(os.path.join(workdir, "daemon.log"), "ab") as log:  # its warnings stay out of ours
        proc = subprocess.Popen([*command, "--socket", socket_path, "--no-stdin"], stderr=log)
    deadline = time.monotonic() + 30
    while not os.path.exists(socket_path):
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit("daemon did not start")
        time.sleep(0.05)
    return proc, socket_path


# --- adversaries (run in their own process: ``fairness.py --adversary KIND ...``)


RAMP_CAP_S = 60.0  # busy connections not all answered by then: measured anyway


class Ramp:
    """The busy connections' ramp-up, shared by both shapes: ``ready`` once each connection
    has had its first pong (or dropped out); they stop ``seconds`` after that (``RAMP_CAP_S``
    at the latest), so the fresh pings are measured behind connections that are all busy, not
    behind a burst of connects. Pongs are counted from ``ready`` on."""

    def __init__(self, count: int, seconds: float) -> None:
        self.pending = count
        self.seconds = seconds
        self.started = time.monotonic()
        self.stop = self.started + RAMP_CAP_S + seconds
        self.ready_at: float | None = None
        self.pongs = 0

    def settled(self) -> None:
        """One connection had its first pong, or dropped out."""
        self.pending -= 1
        if self.pending == 0:
            self._ready()

    def _ready(self) -> None:
        self.ready_at = time.monotonic()
        self.stop = self.ready_at + self.seconds
        self.pongs = 0
        print(f"ready after {self.ready_at - self.started:.1f} s", flush=True)

    def running(self) -> bool:
        return time.monotonic() < self.stop

    def answered(self, pongs: int) -> None:
        self.pongs += pongs

    def summary(self) -> str:
        """The busy connections' own figure: pongs/s after the ramp-up, what a smaller
        ``frames_per_round`` costs them."""
        if self.ready_at is None:
            return f"not ready after {RAMP_CAP_S:g} s: {self.pending} connections unanswered"
        rate = self.pongs / (time.monotonic() - self.ready_at)
        return f"busy connections got {rate:,.0f} pongs/s after the ramp-up"


def _replies_in(codec: Connection, data: bytes) -> int:
    """How many whole replies ``data`` completes on ``codec`` (both clients' one parsing step)."""
    codec.receive_data(data)
    answered = 0
    while isinstance(codec.next_event(), Reply):
        answered += 1
    return answered


async def _busy_one(path: str, depth: int, ramp: Ramp) -> None:
    first = True
    try:
        stream = await trio.open_unix_socket(path)
        codec = Connection()
        async with stream:
            await stream.send_all(PING * depth)
            while ramp.running():
                data = await stream.receive_some(65536)
                if not data:
                    return
                answered = _replies_in(codec, data)
                if answered and first:
                    first = False
                    ramp.settled()
                ramp.answered(answered)
                if answered:
                    await stream.send_all(PING * answered)
    except (OSError, trio.BrokenResourceError):  # refused at the backlog, or closed: drop out
        return
    finally:
        if first:
            ramp.settled()


async def _wait_stop(ramp: Ramp, scope: trio.CancelScope) -> None:
    while ramp.running():
        await trio.sleep(0.05)
    scope.cancel()


async def _asyncio_busy(path: str, count: int, depth: int, seconds: float) -> None:
    """``count`` asyncio connections, each keeping ``depth`` pings in flight (``Ramp``): the
    review's harness (issue 21), whose clients reconnect nothing and read greedily."""
    import asyncio

    ramp = Ramp(count, seconds)

    async def one() -> None:
        first = True
        try:
            reader, writer = await asyncio.open_unix_connection(path)
        except OSError:  # refused at the backlog: drop out, as _busy_one does
            ramp.settled()
            return
        codec = Connection()
        writer.write(PING * depth)
        try:
            while ramp.running():
                data = await reader.read(65536)
                if not data:
                    return
                answered = _replies_in(codec, data)
                if answered and first:
                    first = False
                    ramp.settled()
                ramp.answered(answered)
                if answered:
                    writer.write(PING * answered)
                    await writer.drain()
        except OSError:
            return
        finally:
            if first:
                ramp.settled()
            writer.close()

    async def until_stop() -> None:
        while ramp.running():
            await asyncio.sleep(0.05)

    clients = asyncio.gather(*(one() for _ in range(count)))
    await until_stop()
    clients.cancel()  # reads still waiting at the end
    with contextlib.suppress(asyncio.CancelledError):
        await clients
    print(ramp.summary())


NONREADING_CAP_S = 40.0  # a non-reader still open after this is reported as never closed


def _unread_bytes(stream: trio.SocketStream) -> int:
    """Reply bytes the daemon has written to us that we have not read (FIONREAD)."""
    raw = fcntl.ioctl(stream.socket.fileno(), termios.FIONREAD, b"\0\0\0\0")
    return int(struct.unpack("i", raw)[0])


async def _nonreading_one(path: str, stalls: list[float], lifetimes: list[float]) -> None:
    """Pipeline pings without reading until the daemon closes the connection.

    L-7 is measured from our side as the time from the daemon's last write to us (our unread
    bytes last grew, polled every 10 ms) until it closed the connection (our send fails)."""
    stream = await trio.open_unix_socket(path)
    opened = last_write = trio.current_time()
    unread = 0

    async def watch() -> None:
        nonlocal unread, last_write
        while True:
            now_unread = _unread_bytes(stream)
            if now_unread > unread:
                unread, last_write = now_unread, trio.current_time()
            await trio.sleep(0.01)

    async with stream, trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        with trio.move_on_after(NONREADING_CAP_S):
            try:
                while True:
                    await stream.send_all(PING * 256)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                closed = trio.current_time()
                if unread:  # served, then closed; else dropped at the backlog (counted apart)
                    stalls.append(closed - last_write)
                lifetimes.append(closed - opened)
        nursery.cancel_scope.cancel()


async def _flood_one(path: str, stop: float) -> None:
    flood = b"\n" * 65536
    while trio.current_time() < stop:
        try:
            stream = await trio.open_unix_socket(path)
            async with stream:
                while trio.current_time() < stop:
                    await stream.send_all(flood)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            await trio.lowlevel.checkpoint()


async def _hoard(path: str, count: int, stop: float) -> None:
    streams = []
    for _ in range(count):
        streams.append(await trio.open_unix_socket(path))
    await trio.sleep_until(stop)
    for stream in streams:
        await stream.aclose()


async def run_adversary(kind: str, path: str, count: int, depth: int, seconds: float) -> None:
    if kind == "busy":
        ramp = Ramp(count, seconds)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_wait_stop, ramp, nursery.cancel_scope)
            for _ in range(count):
                nursery.start_soon(_busy_one, path, depth, ramp)
        print(ramp.summary())
        return
    stop = trio.current_time() + seconds
    stalls: list[float] = []
    lifetimes: list[float] = []
    with trio.move_on_at(stop + (NONREADING_CAP_S if kind == "nonreading" else 1)):
        async with trio.open_nursery() as nursery:
            if kind == "hoarders":
                nursery.start_soon(_hoard, path, count, stop)
            for _ in range(count if kind != "hoarders" else 0):
                if kind == "nonreading":
                    nursery.start_soon(_nonreading_one, path, stalls, lifetimes)
                else:
                    nursery.start_soon(_flood_one, path, stop)
    if kind == "nonreading":
        stall = f"{max(stalls):.1f}" if stalls else "-"
        life = f"{max(lifetimes):.1f}" if lifetimes else "-"
        print(
            f"{len(stalls)}/{count} served and closed within {NONREADING_CAP_S:g} s (plus "
            f"{len(lifetimes) - len(stalls)} dropped unserved); longest from the daemon's last "
            f"write to the close: {stall} s (write limit 10 s); longest lifetime {life} s"
        )


# --- measurement


async def fresh_ping(path: str) -> float:
    """Seconds for a new connection's ping round trip (connect included)."""
    started = time.perf_counter()
    with trio.fail_after(120):
        stream = await trio.open_unix_socket(path)
        async with stream:
            await stream.send_all(PING)
            codec = Connection(Limits())
            while True:
                event = codec.next_event()
                if isinstance(event, Reply):
                    assert event.get("DATA") == "pong", event
                    return time.perf_counter() - started
                if event is CLOSED:
                    raise RuntimeError("closed without a reply")
                assert event is NEED_DATA
                codec.receive_data(await stream.receive_some(4096))


async def measure(path: str, samples: int, seconds: float) -> list[float]:
    """Up to ``samples`` fresh pings spread over ``seconds``."""
    times: list[float] = []
    stop = trio.current_time() + seconds
    gap = seconds / samples
    while len(times) < samples and trio.current_time() < stop:
        times.append(await fresh_ping(path))
        await trio.sleep(gap)
    return times


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def scenario(
    path: str, kind: str, count: int, args: argparse.Namespace, anchor: list[float]
) -> str:
    """One scenario's line; the baseline's p99 is kept in ``anchor`` for the others' ratio."""
    adversary = None
    if kind != "baseline":
        adversary = subprocess.Popen(
            [
                *(sys.executable, str(HERE), "--adversary", kind, "--socket", path),
                *(
                    "--count",
                    str(count),
                    "--depth",
                    str(args.asyncio_depth if kind == "busy-asyncio" else args.depth),
                    "--seconds",
                    str(args.seconds),
                ),
            ],
            stdout=subprocess.PIPE,
        )
        note = _wait_ramp(adversary, kind, args.seconds)
    else:
        note = ""
    try:
        times = trio.run(measure, path, args.samples, args.seconds * 0.6)
    finally:
        if adversary is not None:
            out, _ = adversary.communicate(timeout=args.seconds + RAMP_CAP_S + NONREADING_CAP_S)
            note = "; ".join(filter(None, (note, out.decode().strip())))
    p50, p99 = percentile(times, 0.5) * 1000, percentile(times, 0.99) * 1000
    p90 = percentile(times, 0.9) * 1000
    if kind == "baseline":
        anchor.append(p99)
    ratio = f"  p99 x{p99 / anchor[0]:.1f} baseline" if anchor else ""
    verdict = "ok" if p99 <= 50 else "OVER 50 ms"
    return (
        f"{kind:<12} x{count:<5} fresh ping p50 {p50:7.2f} ms  p90 {p90:7.2f} ms  "
        f"p99 {p99:7.2f} ms  "
        f"max {max(times) * 1000:7.2f} ms  mean {statistics.mean(times) * 1000:6.2f} ms  "
        f"({len(times)} samples)  {verdict}{ratio}" + (f"\n            {note}" if note else "")
    )


def _wait_ramp(adversary: subprocess.Popen[bytes], kind: str, seconds: float) -> str:
    """Wait for the adversaries to be in place: the busy ones say ``ready`` once every
    connection has been answered (``Ramp``); the others get a fixed head start."""
    if kind not in ("busy", "busy-asyncio"):
        time.sleep(min(2.0, seconds / 4))
        return ""
    assert adversary.stdout is not None
    readable, _, _ = select.select([adversary.stdout], [], [], RAMP_CAP_S + 10)
    return adversary.stdout.readline().decode().strip() if readable else "never ready"


def _print_daemon_notes(workdir: str, pauses: bool) -> None:
    """The daemon's pause summary (``--pauses``) and any error it logged."""
    with open(os.path.join(workdir, "daemon.log"), errors="replace") as log:
        for line in log:
            if (pauses and line.startswith("pauses:")) or " ERROR " in line or "Error" in line:
                print("            daemon: " + line.rstrip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--busy", type=int, default=1000)
    parser.add_argument("--nonreading", type=int, default=200)
    parser.add_argument("--floods", type=int, default=4)
    parser.add_argument("--hoarders", type=int, default=256)
    parser.add_argument("--depth", type=int, default=8, help="pings in flight per busy client")
    parser.add_argument(
        "--asyncio-depth", type=int, default=100, help="pings in flight per busy-asyncio client"
    )
    parser.add_argument("--seconds", type=float, default=8.0, help="per scenario")
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--only", help="run one scenario")
    parser.add_argument(
        "--pauses",
        action="store_true",
        help="run the daemon under bench/pauses.py: print its GC and longest task-step pauses",
    )
    parser.add_argument(
        "--frames-per-round", type=int, help="the daemon's connection.frames_per_round (L-10)"
    )
    parser.add_argument("--adversary", help=argparse.SUPPRESS)
    parser.add_argument("--socket", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if args.adversary == "busy-asyncio":
        import asyncio

        asyncio.run(_asyncio_busy(args.socket, args.count, args.depth, args.seconds))
        return
    if args.adversary:
        trio.run(run_adversary, args.adversary, args.socket, args.count, args.depth, args.seconds)
        return
    plan = [
        ("baseline", 0),
        ("busy", args.busy),
        ("busy-asyncio", args.busy),
        ("nonreading", args.nonreading),
        ("newlines", args.floods),
        ("hoarders", args.hoarders),
    ]
    anchor: list[float] = []  # the baseline's p99, always measured first
    for kind, count in plan:
        if args.only not in (None, kind) and kind != "baseline":
            continue
        # A fresh daemon each; the hoarders fill exactly the per-uid cap (L-9), the others
        # must not meet any cap.
        cap = max(2048, args.busy + args.nonreading + 64)
        with tempfile.TemporaryDirectory(prefix="csp-fair-") as workdir:
            per_uid = count if kind == "hoarders" else cap
            proc, path = start_daemon(
                workdir, cap, per_uid, pauses=args.pauses, frames_per_round=args.frames_per_round
            )
            try:
                print(scenario(path, kind, count, args, anchor), flush=True)
            finally:
                proc.terminate()
                proc.wait(timeout=60)
                _print_daemon_notes(workdir, args.pauses)
    print(f"reproduce: python bench/fairness.py {' '.join(sys.argv[1:])}".rstrip())


if __name__ == "__main__":
    main()
