"""Benchmark of the durable memory outbox: writes persisted and delivered per second.

Run from the repository root::

    python bench/outbox.py [--writes 20000] [--writers 64] [--synchronous full|normal]
        [--rate daemon|N] [--seconds 5] [--sink reference|ack|embedded] [--sample 0.5]
        [--only-sustained]

Three figures, each over ``--writes`` audit-sized records (about 200 bytes of JSON, one
logical file each, as the dispatcher's audit writes are):

persist    ``--writers`` concurrent tasks call ``put()`` with no Memory Specialist; the rate
           is writes whose ``put()`` returned (committed to SQLite) per second, with the
           latency of a single ``put()`` at p50 and p99.
end-to-end the same puts with the reference ``csp-web memory-sink`` running as its own
           process; the time runs from the first ``put()`` until the outbox depth is 0 (every
           write acknowledged by the sink and removed from the store).
backlog    the outbox left by ``persist`` is reopened with the sink running; the time is how
           long delivery alone takes to drain it.
sink       the sink alone, no outbox: one connection to ``csp-web memory-sink`` sends the
           writes in pipelined batches of ``batch_size`` (as delivery does) and waits for each
           batch's ACKs; the rate is writes acknowledged (committed) per second.
sustained  writes offered at ``--rate`` per second for ``--seconds``, against the sink, each
           admitted as the dispatcher admits an audited op (``wait_room``, then ``put()``)
           from 8 connections running at most ``connection.max_in_flight`` ops each (what
           is offered beyond waits, as frames in a client's socket); the lines give the
           rates offered, admitted and delivered over the same window, delivered/admitted,
           the deepest and last depth, and a timeline (every ``--sample`` seconds:
           admitted/s, delivered/s, depth). Delivery keeps up when it delivers at least 80%
           of what was admitted and nothing is refused.
           ``--rate daemon`` (the default) first measures the daemon's own peak reply rate
           (``csp-web serve``, audited, best of 3 x 20,000 pipelined pings, as
           bench/daemon.py) and the memory writes it made per reply meanwhile (IN:SYS audits
           are summarised, SPEC O-4), then runs the phase twice: at the write rate the daemon
           produced at that peak, and at one write per reply (the worst case: every reply an
           op audited per frame).

``--sink ack`` runs a Memory Specialist that acknowledges each write without storing it (the
outbox's own delivery capacity); ``--sink reference`` (the default) runs ``csp-web
memory-sink``, which also stores every write; ``--sink embedded`` runs the reference sink in
this process, on the outbox's own event loop, as the daemon does without
``memory.socket_path``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so `python bench/outbox.py` finds the packages
    sys.path.insert(0, str(REPO_ROOT))

import trio  # noqa: E402

from csp_web.app.memory_path import open_memory_link  # noqa: E402
from csp_web.client.trio_client import open_client  # noqa: E402
from csp_web.config import Config, ConnectionConfig, MemoryConfig, OutboxConfig  # noqa: E402
from csp_web.core.api.errors import OpError  # noqa: E402
from csp_web.core.api.records import json_record, make_write  # noqa: E402
from csp_web.memory.link import MemoryLink  # noqa: E402
from csp_web.memory.outbox import Outbox, open_outbox  # noqa: E402
from csp_web.sink.store import STORE_FILE  # noqa: E402
from protocol import Task  # noqa: E402

MAX_WRITES = 200_000  # a bound on the run, far past the default 20k
RUN_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Figure:
    name: str
    writes: int
    elapsed_s: float
    latencies_ms: tuple[float, ...] = ()

    def line(self) -> str:
        rate = self.writes / self.elapsed_s if self.elapsed_s else float("inf")
        text = f"{self.name:<11} {self.writes:>7} writes  {self.elapsed_s:8.3f} s  {rate:>9.0f}/s"
        if self.latencies_ms:
            ordered = sorted(self.latencies_ms)
            p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
            text += f"  put p50 {statistics.median(ordered):.2f} ms  p99 {p99:.2f} ms"
        return text


def _record(n: int) -> str:
    return json_record(
        time=time.time(),
        op="fetch",
        domain="WEB",
        uid=1000,
        pid=4242,
        connection=f"unix-{n % 97}",
        id=f"bench-{n}",
        outcome="OK",
        error=None,
        duration_ms=12.345,
    )


async def _put_all(outbox: Outbox, writes: int, writers: int) -> list[float]:
    """Put ``writes`` records from ``writers`` concurrent tasks; the latency of each put."""
    latencies: list[float] = []
    counter = iter(range(writes))

    async def writer() -> None:
        for n in counter:
            write = make_write("sys", "audit", "bench", _record(n), suffix=".json")
            started = time.perf_counter()
            await outbox.put(write)
            latencies.append((time.perf_counter() - started) * 1000)

    async with trio.open_nursery() as nursery:
        for _ in range(writers):
            nursery.start_soon(writer)
    return latencies


async def _persist(path: str, config: OutboxConfig, writes: int, writers: int) -> Figure:
    async with open_outbox(path, config, MemoryConfig()) as outbox:
        started = time.perf_counter()
        latencies = await _put_all(outbox, writes, writers)
        elapsed = time.perf_counter() - started
        assert outbox.room.depth == writes, outbox.room.depth
    return Figure("persist", writes, elapsed, tuple(latencies))


async def _end_to_end(
    path: str, config: OutboxConfig, memory: MemoryConfig, writes: int, writers: int
) -> Figure:
    async with open_outbox(path, config, memory) as outbox:
        started = time.perf_counter()
        latencies = await _put_all(outbox, writes, writers)
        await outbox.wait_drained()
        elapsed = time.perf_counter() - started
        assert (outbox.room.depth, outbox.delivery.delivered) == (0, writes), (
            outbox.room.depth,
            outbox.delivery.delivered,
        )
    return Figure("end-to-end", writes, elapsed, tuple(latencies))


async def _backlog(path: str, config: OutboxConfig, memory: MemoryConfig, writes: int) -> Figure:
    async with open_outbox(path, config, memory) as outbox:
        assert outbox.room.depth == writes, outbox.room.depth
        started = time.perf_counter()
        await outbox.wait_drained()
        elapsed = time.perf_counter() - started
        assert outbox.delivery.delivered == writes, outbox.delivery.delivered
    return Figure("backlog", writes, elapsed)


@dataclass(frozen=True)
class Sample:
    """The counts at ``at_s`` seconds into a sustained phase."""

    at_s: float
    admitted: int
    delivered: int
    depth: int


@dataclass(frozen=True)
class Sustained:
    """A sustained phase: writes offered, admitted (``wait_room`` passed and ``put()``
    returned, as the dispatcher admits an audited op) and delivered over the same window; the
    depth left, the writes refused ``outbox_full``, and the counts sampled over time."""

    offered: Figure
    admitted: Figure
    delivered: Figure
    left: int
    refused: int
    samples: tuple[Sample, ...]

    def lines(self) -> list[str]:
        out = [f"  {figure.line()}" for figure in (self.offered, self.admitted, self.delivered)]
        share = self.delivered.writes / self.admitted.writes if self.admitted.writes else 1.0
        top = max((sample.depth for sample in self.samples), default=0)
        out.append(
            f"  delivered/admitted {share:.0%}, depth max {top}, left {self.left}, "
            f"refused full {self.refused}"
        )
        out.append("     t s   admitted/s  delivered/s    depth")
        before = Sample(0.0, 0, 0, 0)
        for sample in self.samples:
            span = sample.at_s - before.at_s
            admitted = (sample.admitted - before.admitted) / span
            delivered = (sample.delivered - before.delivered) / span
            out.append(f"  {sample.at_s:6.1f} {admitted:12.0f} {delivered:12.0f} {sample.depth:8d}")
            before = sample
        return out


PRODUCERS = 8  # the connections the writes come from (each has its share, SPEC O-2)
IN_FLIGHT = ConnectionConfig().max_in_flight  # the ops each connection runs at once


async def _sustained(
    path: str,
    config: OutboxConfig,
    memory: MemoryConfig,
    rate: int,
    seconds: float,
    *,
    link: MemoryLink | None = None,
    sample_s: float = 0.5,
) -> Sustained:
    """Offer ``rate`` writes/s for ``seconds`` from ``PRODUCERS`` connections, each running at
    most ``IN_FLIGHT`` ops at once as the daemon does (what is offered beyond that waits, as
    frames wait in a client's socket); each write admitted as the dispatcher admits an audited
    op (``wait_room``, then ``put``). The counts are sampled every ``sample_s``."""
    tick_s = 0.01
    refused = 0
    admitted = 0
    taken = 0
    samples: list[Sample] = []
    offers = trio.Semaphore(0)  # writes offered and not yet taken by a connection's op

    async def op(owner: str) -> None:
        nonlocal refused, admitted, taken
        while True:
            await offers.acquire()
            write = make_write("sys", "audit", "bench", _record(taken), suffix=".json")
            taken += 1
            try:
                await outbox.wait_room(owner)
                await outbox.put(write, owner=owner)
                admitted += 1
            except OpError:  # outbox_full: delivery fell max_pending behind
                refused += 1

    async def sample(started: float) -> None:
        while True:
            await trio.sleep(sample_s)
            at_s = trio.current_time() - started
            delivered = outbox.delivery.delivered - delivered_before
            samples.append(Sample(at_s, admitted, delivered, outbox.room.depth))

    async with (
        open_outbox(path, config, memory, link=link) as outbox,
        trio.open_nursery() as nursery,
    ):
        delivered_before = outbox.delivery.delivered
        for n in range(PRODUCERS * IN_FLIGHT):
            nursery.start_soon(op, f"bench-{n % PRODUCERS}")
        offered = 0
        started = trio.current_time()
        nursery.start_soon(sample, started)
        end = started + seconds
        while (now := trio.current_time()) < end:
            due = min(int((now - started) * rate), MAX_WRITES) - offered
            for _ in range(due):
                offers.release()
            offered += due
            await trio.sleep(tick_s)
        elapsed = trio.current_time() - started
        delivered = outbox.delivery.delivered - delivered_before
        if not samples or elapsed - samples[-1].at_s >= sample_s / 10:  # the window's end
            samples.append(Sample(elapsed, admitted, delivered, outbox.room.depth))
        result = Sustained(
            Figure("offered", offered, elapsed),
            Figure("admitted", admitted, elapsed),
            Figure("delivered", delivered, elapsed),
            outbox.room.depth,
            refused,
            tuple(samples),
        )
        nursery.cancel_scope.cancel()
    return result


async def serve_ack_sink(socket_path: str) -> None:
    """A Memory Specialist that acknowledges every write without storing it, as cheaply as
    CSP/1 allows (the codec, one reply write per chunk read): what is left is the outbox's
    own delivery cost."""
    from csp_web.config import SocketConfig
    from csp_web.core.api.context import Peer
    from csp_web.core.transports.unix import Lease, serve_unix
    from protocol import CLOSED, NEED_DATA, Connection

    async def handle(stream: trio.SocketStream, peer: Peer, _lease: Lease) -> None:
        codec = Connection()
        async with stream:
            while data := await stream.receive_some(1 << 18):
                codec.receive_data(data)
                out = []
                while isinstance(event := codec.next_event(), Task):
                    out.append(f"STATUS OK\nID {event.id}\nSCOPE [memory]\nDATA stored\n\n")
                assert event in (NEED_DATA, CLOSED), event
                if out:
                    await stream.send_all("".join(out).encode())

    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: serve_unix(
                socket_path,
                SocketConfig(),
                handle,
                handler_nursery=nursery,
                task_status=task_status,
            )
        )


async def _wait_serving(socket_path: str, sink: trio.Process) -> None:
    probe = Task("read", "MEMORY", "CONTENT", None, (("PATH", "probe"),))
    with trio.fail_after(30):
        while True:
            if sink.poll() is not None:
                raise RuntimeError(f"memory-sink exited with {sink.returncode}")
            try:
                async with open_client(socket_path) as client:
                    await client.call(probe, timeout_s=30)
                return
            except OSError:
                await trio.sleep(0.02)


def _stored_ids(directory: str) -> int:
    db = sqlite3.connect(f"file:{os.path.join(directory, STORE_FILE)}?mode=ro", uri=True)
    try:
        return int(db.execute("SELECT COUNT(*) FROM writes").fetchone()[0])
    finally:
        db.close()


async def _sink_alone(socket_path: str, writes: int, batch_size: int) -> Figure:
    """Writes acknowledged per second by the sink itself, batches pipelined on one connection."""
    tasks = [make_write("sys", "audit", "sink", _record(n), suffix=".json") for n in range(writes)]
    async with open_client(socket_path) as client:
        started = time.perf_counter()
        for first in range(0, writes, batch_size):
            batch = [w.to_task() for w in tasks[first : first + batch_size]]
            replies = await client.call_many(list(batch), timeout_s=60)
            assert all(r.get("DATA") == "stored" for r in replies), replies[0]
        elapsed = time.perf_counter() - started
    return Figure("sink", writes, elapsed)


def _sink_command(kind: str, socket_path: str, sink_dir: str) -> list[str]:
    if kind == "ack":
        return [sys.executable, str(Path(__file__).resolve()), "--serve-ack-sink", socket_path]
    command = [sys.executable, "-m", "csp_web", "memory-sink"]
    return [*command, "--socket", socket_path, "--dir", sink_dir]


async def run_sustained(
    rate: int, seconds: float, synchronous: str, sink_kind: str, sample_s: float
) -> Sustained:
    config = OutboxConfig(synchronous="full" if synchronous == "full" else "normal")
    with (
        tempfile.TemporaryDirectory(prefix="csp-bench-") as state,
        tempfile.TemporaryDirectory(prefix="csp-", dir="/tmp") as sockets,
    ):
        outbox_path = os.path.join(state, "s.sqlite3")
        if sink_kind == "embedded":  # the daemon's default: the sink on the same event loop
            daemon = Config(memory=MemoryConfig(directory=os.path.join(state, "mem")))
            async with open_memory_link(daemon) as (link, _sink):
                return await _sustained(
                    outbox_path, config, daemon.memory, rate, seconds, link=link, sample_s=sample_s
                )
        socket_path = os.path.join(sockets, "memory.sock")
        sink = await trio.lowlevel.open_process(
            _sink_command(sink_kind, socket_path, os.path.join(state, "mem")),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=str(REPO_ROOT),
        )
        try:
            await _wait_serving(socket_path, sink)
            memory = MemoryConfig(socket_path=socket_path)
            return await _sustained(outbox_path, config, memory, rate, seconds, sample_s=sample_s)
        finally:
            sink.terminate()
            await sink.wait()


async def run(writes: int, writers: int, synchronous: str) -> list[Figure]:
    config = OutboxConfig(synchronous="full" if synchronous == "full" else "normal")
    with (
        tempfile.TemporaryDirectory(prefix="csp-bench-") as state,
        tempfile.TemporaryDirectory(prefix="csp-", dir="/tmp") as sockets,
    ):
        socket_path = os.path.join(sockets, "memory.sock")
        memory = MemoryConfig(socket_path=socket_path)
        sink_dir = os.path.join(state, "mem")
        persisted = await _persist(os.path.join(state, "a.sqlite3"), config, writes, writers)
        command = [sys.executable, "-m", "csp_web", "memory-sink"]
        sink = await trio.lowlevel.open_process(
            [*command, "--socket", socket_path, "--dir", sink_dir],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=str(REPO_ROOT),
        )
        try:
            await _wait_serving(socket_path, sink)
            both = await _end_to_end(
                os.path.join(state, "b.sqlite3"), config, memory, writes, writers
            )
            backlog = await _backlog(os.path.join(state, "a.sqlite3"), config, memory, writes)
            alone = await _sink_alone(socket_path, writes, memory.batch_size)
        finally:
            sink.terminate()
            await sink.wait()
        assert _stored_ids(sink_dir) == 3 * writes
    return [persisted, both, backlog, alone]


def measure_daemon() -> tuple[float, float]:
    """(the daemon's peak reply rate, memory writes it made per reply meanwhile), measured as
    bench/daemon.py does: ``csp-web serve`` audited, best of 3 x 20,000 pipelined pings."""
    spec = importlib.util.spec_from_file_location(
        "bench_daemon", Path(__file__).with_name("daemon.py")
    )
    assert spec is not None
    assert spec.loader is not None
    bench_daemon = importlib.util.module_from_spec(spec)  # bench/daemon.py, a sibling script
    spec.loader.exec_module(bench_daemon)

    with tempfile.TemporaryDirectory(prefix="csp-bench-", dir="/tmp") as workdir:
        proc, path = bench_daemon.start_daemon(workdir, True, "normal", None)
        try:

            async def peak() -> tuple[float, float]:
                before = await bench_daemon.outbox_figures(path)
                rates = [await bench_daemon.pipelined(path, 20_000) for _ in range(3)]
                await trio.sleep(1.5)  # the summaries' interval (audit.sys_summary_interval_s)
                after = await bench_daemon.outbox_figures(path)
                made = after["delivered"] + after["depth"] - before["delivered"] - before["depth"]
                return max(rates), made / 60_000

            return trio.run(peak)
        finally:
            proc.terminate()
            proc.wait(30)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=20_000)
    parser.add_argument("--writers", type=int, default=64)
    parser.add_argument(  # the daemon's own setting unless asked (config.yaml: normal)
        "--synchronous", choices=("full", "normal"), default=OutboxConfig().synchronous
    )
    parser.add_argument(
        "--rate", default="daemon", help="sustained writes/s, or 'daemon': its measured peak"
    )
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--sink", choices=("reference", "ack", "embedded"), default="reference")
    parser.add_argument("--sample", type=float, default=0.5, help="seconds between samples")
    parser.add_argument("--only-sustained", action="store_true")
    parser.add_argument("--serve-ack-sink", metavar="SOCKET", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_ack_sink:
        trio.run(serve_ack_sink, args.serve_ack_sink)
        return 0
    if not 0 < args.writes <= MAX_WRITES or args.writers <= 0:
        parser.error(f"--writes must be 1..{MAX_WRITES} and --writers positive")
    rates: list[tuple[int, str]] = []
    if args.rate == "daemon":
        peak, per_reply = measure_daemon()
        rates.append(
            (
                max(1, round(peak * per_reply)),
                f"the daemon's writes at its peak reply rate {peak:,.0f}/s "
                f"x {per_reply:.4f} writes/reply",
            )
        )
        rates.append(
            (round(peak), f"one write per reply at the daemon's peak reply rate {peak:,.0f}/s")
        )
    elif args.rate.isdigit():
        rates.append((int(args.rate), "--rate"))
    else:
        parser.error("--rate must be a number of writes/s or 'daemon'")
    if not all(0 < rate * args.seconds <= MAX_WRITES for rate, _ in rates):
        parser.error(f"--rate x --seconds must be 1..{MAX_WRITES}")

    async def bounded() -> tuple[list[Figure], list[Sustained]]:
        with trio.fail_after(RUN_TIMEOUT_S):
            figures = (
                []
                if args.only_sustained
                else await run(args.writes, args.writers, args.synchronous)
            )
            sustained = [
                await run_sustained(rate, args.seconds, args.synchronous, args.sink, args.sample)
                for rate, _ in rates
            ]
            return figures, sustained

    figures, sustained = trio.run(bounded)
    shown = ["python", "bench/outbox.py", *(argv if argv is not None else sys.argv[1:])]
    print(f"$ {shlex.join(shown)}")
    print(
        f"writes {args.writes}, writers {args.writers}, synchronous={args.synchronous}, "
        f"batch_size {MemoryConfig().batch_size}, python {sys.version.split()[0]}, "
        f"{os.cpu_count()} cpus"
    )
    for figure in figures:
        print(figure.line())
    in_flight = OutboxConfig().delivery_window * MemoryConfig().batch_size
    for (rate, which), phase in zip(rates, sustained, strict=True):
        print(f"sustained at {rate}/s ({which}) for {args.seconds:g} s, --sink {args.sink}:")
        print("\n".join(phase.lines()))
        # Delivery keeps up when it delivers at least 80% of what was admitted, none refused.
        keeps_up = phase.delivered.writes >= 0.8 * phase.admitted.writes and not phase.refused
        verdict = "keeps up" if keeps_up else "falls behind"
        print(f"  delivery {verdict} (in flight at most {in_flight})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
