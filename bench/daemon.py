"""Daemon benchmarks over the real Unix socket, against `csp-web serve` in its own process.

- ping round trip, p50 and p99: one client, then 64 concurrent clients (one connection each);
- frames per second pipelined on one connection, and the daemon's CPU time per such frame
  (its inverse is the rate one idle core would sustain: stable on a busy machine);
- daemon RSS idle, and with 1,000 idle socket connections.

- sustained audited load (issue 8.8): 10 connections pipelining pings for ``--seconds``; the
  reply rate, and over the same window the audit records the outbox delivered to the Memory
  Specialist per second and the depth left (from ``REQ:stats``' OUTBOX line). Delivery keeps
  up when delivered/s >= replies/s; with back-pressure (SPEC O-1, O-3) replies slow to what
  delivery allows and the depth stays within ``outbox.max_pending``. Then the time to drain.

Goals (issue 2): p50 <= 0.3 ms; >= 20,000 frames/s; RSS <= 60 MB idle, <= +40 MB for 1,000
connections; (issue 8.8) audited >= 80 % of unaudited throughput. Every op is audited into
the durable outbox, as in production (pings, IN:SYS ops, in one summary record per connection
per ``audit.sys_summary_max_frames`` frames or ``audit.sys_summary_interval_s``: SPEC O-4), and
delivered to the Memory Specialist: the embedded one by default (it shares the daemon's
thread), or with ``--memory-sink external`` a ``csp-web memory-sink`` process.
`--no-audit-sys` measures with sys ops not audited.

    python bench/daemon.py [--no-audit-sys] [--memory-sink embedded|external] [--seconds 5]
        [--quick]  # only the 1-client ping and the pipelined figures (A/B runs, ~40 s)

The 1-client ping and the pipelined figures are printed as rows
``measure<TAB>value<TAB>anchor<TAB>ratio<TAB>goal`` against an anchor measured in the same run:
an echo server in its own process that parses the same frames with the same sans-IO codec and
answers each read's frames in one send (the floor under the daemon's per-frame cost). Issue 26
goal 5: >= 30,000 audited pipelined pings/s, <= 30 us of daemon CPU per frame.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.daemon_process import wait_for_listener
from protocol import CLOSED, NEED_DATA, Connection, Reply, Status, serialize

PING = b"TASK REQ:ping IN:SYS OUT:PONG\n\n"


def start_memory_sink(workdir: str) -> tuple[subprocess.Popen[bytes], str]:
    """``csp-web memory-sink`` in its own process; its socket once it is listening."""
    socket_path = os.path.join(workdir, "m", "memory.sock")
    command = [sys.executable, "-m", "csp_web", "memory-sink"]
    proc = subprocess.Popen([*command, "--socket", socket_path, "--dir", f"{workdir}/memory"])
    wait_for_socket(proc, socket_path, "memory-sink")
    return proc, socket_path


def wait_for_socket(proc: subprocess.Popen[bytes], path: str, name: str) -> None:
    deadline = time.monotonic() + 30
    while not os.path.exists(path):
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit(f"{name} did not start")
        time.sleep(0.05)
    wait_for_listener(path)


def start_daemon(
    workdir: str,
    audit_sys: bool,
    synchronous: str,
    memory_socket: str | None,
    frames_per_round: int | None = None,
    *,
    extra: str = "",
) -> tuple[subprocess.Popen[bytes], str]:
    """``csp-web serve`` on a socket under ``workdir`` (made if need be), and that socket;
    ``extra`` is YAML for sections the bench's own settings leave alone (``tasks``, ``web``)."""
    os.makedirs(workdir, exist_ok=True)
    socket_path = os.path.join(workdir, "s", "csp.sock")
    config = os.path.join(workdir, "bench.yaml")
    memory = f"memory: {{socket_path: {memory_socket}}}\n" if memory_socket else ""
    with open(config, "w") as file:
        file.write(
            f"daemon: {{state_dir: {workdir}/state, log_level: warning}}\n"
            "socket: {max_connections: 2000, max_connections_per_uid: 2000}\n"
            "connection: {max_in_flight: 256"
            + (f", frames_per_round: {frames_per_round}" if frames_per_round else "")
            + "}\n"
            f"audit: {{sys_ops: {str(audit_sys).lower()}}}\n"
            f"outbox: {{synchronous: {synchronous}}}\n" + memory + extra
        )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "csp_web",
            "serve",
            "--config",
            config,
            "--socket",
            socket_path,
            "--no-stdin",
        ],
    )
    wait_for_socket(proc, socket_path, "daemon")
    return proc, socket_path


def cpu_s(pid: int) -> float:
    """The daemon's user+system CPU seconds so far: per-frame cost that a busy machine's
    other load does not inflate, unlike wall-clock rates."""
    with open(f"/proc/{pid}/stat") as file:
        fields = file.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as file:
        for line in file:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def read_replies(
    stream: trio.SocketStream, codec: Connection, count: int, out: list[Reply] | None = None
) -> None:
    """Read ``count`` replies from ``stream`` (kept in ``out`` when given)."""
    got = 0
    while got < count:
        event = codec.next_event()
        if isinstance(event, Reply):
            got += 1
            if out is not None:
                out.append(event)
            continue
        if event is CLOSED:
            raise SystemExit("daemon closed the connection")
        assert event is NEED_DATA
        codec.receive_data(await stream.receive_some(1 << 16))


async def ping_loop(path: str, rounds: int, out: list[float]) -> None:
    stream = await trio.open_unix_socket(path)
    codec = Connection()
    async with stream:
        for _ in range(rounds):
            start = time.perf_counter()
            await stream.send_all(PING)
            await read_replies(stream, codec, 1)
            out.append((time.perf_counter() - start) * 1000)


def percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return f"p50 {p50:.3f} ms, p99 {p99:.3f} ms ({len(ordered)} pings)"


async def pipelined(path: str, frames: int) -> float:
    stream = await trio.open_unix_socket(path)
    codec = Connection()
    async with stream, trio.open_nursery() as nursery:
        start = time.perf_counter()
        nursery.start_soon(stream.send_all, PING * frames)
        await read_replies(stream, codec, frames)
        return frames / (time.perf_counter() - start)


async def idle_connections(path: str, count: int, pid: int) -> float:
    streams = []
    for _ in range(count):
        # One ping on each makes sure the daemon accepted and serves every connection.
        stream = await trio.open_unix_socket(path)
        await stream.send_all(PING)
        await read_replies(stream, Connection(), 1)
        streams.append(stream)
    await trio.sleep(0.5)
    rss = rss_mb(pid)
    for stream in streams:
        await stream.aclose()
    return rss


async def outbox_figures(path: str) -> dict[str, int]:
    """The daemon's OUTBOX stats line: depth, delivered, rejected, refused."""
    stream = await trio.open_unix_socket(path)
    codec = Connection()
    async with stream:
        await stream.send_all(b"TASK REQ:stats IN:SYS OUT:STATS\n\n")
        while not isinstance(event := codec.next_event(), Reply):
            assert event is NEED_DATA
            codec.receive_data(await stream.receive_some(1 << 16))
    line = event.get("OUTBOX") or ""
    pairs = (item.partition(":") for item in line.split(","))
    return {key: int(value) for key, _, value in pairs if value.isdigit()}


async def pipeline_for(path: str, seconds: float, window: int, counted: list[int]) -> None:
    """Keep ``window`` pings in flight on one connection until ``seconds`` have passed."""
    stream = await trio.open_unix_socket(path)
    codec = Connection()
    async with stream:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            await stream.send_all(PING * window)
            await read_replies(stream, codec, window)
            counted[0] += window


async def sustained(path: str, seconds: float) -> None:
    """Replies/s under 10 pipelining connections, and audit records delivered/s meanwhile."""
    before = await outbox_figures(path)
    counted = [0]
    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(10):
            nursery.start_soon(pipeline_for, path, seconds, 64, counted)
    elapsed = time.perf_counter() - started
    after = await outbox_figures(path)
    delivered = after["delivered"] - before["delivered"]
    replies_s, delivered_s = counted[0] / elapsed, delivered / elapsed
    print(
        f"sustained, 10 connections x 64 pipelined pings, {elapsed:.1f} s: "
        f"{replies_s:,.0f} replies/s; audits delivered {delivered_s:,.0f}/s; "
        f"depth {before['depth']} -> {after['depth']}; refused {after['refused']}"
    )
    drain_started = time.perf_counter()
    with trio.move_on_after(120):
        while (await outbox_figures(path))["depth"] > 0:
            await trio.sleep(0.05)
    left = (await outbox_figures(path))["depth"]
    # Writes in flight at the window's end (delivery_window batches of batch_size: 4 x 256 by
    # default) are not a backlog; a depth past that is.
    verdict = "keeps up" if after["depth"] - before["depth"] <= 1024 else "falls behind"
    print(
        f"  then drained in {time.perf_counter() - drain_started:.2f} s (depth left {left}): "
        f"delivery {verdict}"
    )


async def pipelined_figures(path: str, pid: int) -> tuple[float, float]:
    """Pings pipelined on one connection: the best rate of 3 x 20,000 frames, and the
    server's CPU per frame over the three."""
    cpu_before = cpu_s(pid)
    rates = [await pipelined(path, 20_000) for _ in range(3)]
    return max(rates), (cpu_s(pid) - cpu_before) / 60_000 * 1e6


async def serve_echo(path: str) -> None:
    """The anchor: a Trio server on ``path`` that parses CSP frames with the same sans-IO
    codec and answers each with one OK, a read's replies in one send: the floor under the
    daemon's per-frame cost (no dispatch, no audit, no stats)."""
    pong = serialize(Reply(Status.OK, (("SCOPE", "public"), ("DATA", "PONG"))))

    async def answer(stream: trio.SocketStream) -> None:
        codec = Connection()
        while data := await stream.receive_some(1 << 16):
            codec.receive_data(data)
            count = 0
            while codec.next_event() not in (NEED_DATA, CLOSED):
                count += 1
            await stream.send_all(pong * count)

    sock = trio.socket.socket(trio.socket.AF_UNIX)
    await sock.bind(path)
    sock.listen()
    await trio.serve_listeners(answer, [trio.SocketListener(sock)])


def start_echo(workdir: str) -> tuple[subprocess.Popen[bytes], str]:
    path = os.path.join(workdir, "echo.sock")
    proc = subprocess.Popen([sys.executable, __file__, "--echo", path])
    wait_for_socket(proc, path, "echo anchor")
    return proc, path


def measure_line(measure: str, value: str, anchor: str, ratio: float, goal: str) -> str:
    """One row of the benches' summary table: measure, csp-web, anchor, ratio, goal."""
    return "\t".join((measure, value, anchor, f"{ratio:.2f}", goal))


def loadavg() -> str:
    with open("/proc/loadavg") as file:
        return " ".join(file.read().split()[:3])


async def ping_p50(path: str) -> float:
    await ping_loop(path, 500, [])  # warm-up
    samples: list[float] = []
    await ping_loop(path, 5000, samples)
    return statistics.median(samples)


async def quick_rows(path: str, pid: int, echo_path: str, echo_pid: int) -> list[str]:
    """The figures ``--quick`` measures, each against the echo anchor in the same run."""
    p50, echo_p50 = await ping_p50(path), await ping_p50(echo_path)
    rate, cpu_us = await pipelined_figures(path, pid)
    echo_rate, echo_cpu_us = await pipelined_figures(echo_path, echo_pid)
    return [
        measure_line(
            "ping p50, 1 client",
            f"{p50:.3f} ms",
            f"{echo_p50:.3f} ms echo",
            p50 / echo_p50,
            "<= 0.3 ms",
        ),
        measure_line(
            "pipelined pings, audited",
            f"{rate:,.0f}/s",
            f"{echo_rate:,.0f}/s echo",
            rate / echo_rate,
            ">= 30,000/s",
        ),
        measure_line(
            "daemon CPU per pipelined ping",
            f"{cpu_us:.1f} us",
            f"{echo_cpu_us:.1f} us echo",
            cpu_us / echo_cpu_us,
            "<= 30 us",
        ),
    ]


async def run(path: str, pid: int, seconds: float) -> None:
    """The figures beyond ``--quick``: 64 clients, RSS, sustained audited load."""
    await trio.sleep(0.5)
    idle = rss_mb(pid)
    many: list[float] = []
    async with trio.open_nursery() as nursery:
        for _ in range(64):
            nursery.start_soon(ping_loop, path, 200, many)
    print(f"ping, 64 clients:  {percentiles(many)}")
    print(f"RSS idle: {idle:.1f} MB")
    loaded = await idle_connections(path, 1000, pid)
    print(f"RSS with 1,000 idle connections: {loaded:.1f} MB (+{loaded - idle:.1f} MB)")
    await sustained(path, seconds)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-audit-sys", action="store_true")
    parser.add_argument("--synchronous", choices=("full", "normal"), default="normal")
    parser.add_argument("--memory-sink", choices=("embedded", "external"), default="embedded")
    parser.add_argument("--seconds", type=float, default=5.0, help="sustained load duration")
    parser.add_argument(
        "--frames-per-round", type=int, help="the daemon's connection.frames_per_round (L-10)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="only the 1-client ping and the pipelined figures"
    )
    parser.add_argument("--echo", help=argparse.SUPPRESS)  # the anchor's process
    args = parser.parse_args()
    if args.echo:
        trio.run(serve_echo, args.echo)
        return
    print(f"# load average before: {loadavg()}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="csp-bench-", dir="/tmp") as workdir:
        sink, memory_socket = None, None
        if args.memory_sink == "external":
            sink, memory_socket = start_memory_sink(workdir)
        proc, path = start_daemon(
            workdir, not args.no_audit_sys, args.synchronous, memory_socket, args.frames_per_round
        )
        echo: subprocess.Popen[bytes] | None = None
        try:
            echo, echo_path = start_echo(workdir)
            print(f"# memory sink: {args.memory_sink}, {os.cpu_count()} cpus", file=sys.stderr)
            rows = trio.run(quick_rows, path, proc.pid, echo_path, echo.pid)
            if not args.quick:
                trio.run(run, path, proc.pid, args.seconds)
        finally:
            for child in (proc, echo, sink):
                if child is not None:
                    child.terminate()
                    child.wait(30)
    for row in rows:
        print(row)
    print(f"# load average after: {loadavg()}", file=sys.stderr)
    flag = " --no-audit-sys" if args.no_audit_sys else ""
    flag += " --quick" if args.quick else ""
    flag += f" --frames-per-round {args.frames_per_round}" if args.frames_per_round else ""
    print(
        f"reproduce: python bench/daemon.py --synchronous {args.synchronous}{flag} "
        f"--memory-sink {args.memory_sink} --seconds {args.seconds:g}"
    )


if __name__ == "__main__":
    main()
