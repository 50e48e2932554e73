"""Paired-node benchmarks against `csp-web serve` in its own process, nodes over loopback TLS.

- round trip of a trivial action (`location_get` from a fixed position, no subprocess) on a
  reference node (`csp-web node run`, its own process): the client's round trip, the node's
  own work (its WORK_MS, relayed as NODE_TIME) and the daemon's added latency, i.e. round
  trip minus the node's work per sample (client socket hop, dispatch, audit, TLS hop to the
  node and back), p50 and p99;
- daemon RSS before and with 100 idle paired nodes (in this process: each one TLS link that
  paired through the real exchange, then heartbeats only).

Goal (issue 11): added latency p50 <= 5 ms. The daemon's config raises `nodes.pair_attempts`
so one address may pair 100 nodes in a minute (the default allows 5).

    python bench/nodes.py [--rounds 500] [--idle 100]
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
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from csp_web.client.trio_client import Client, open_client
from protocol import CLOSED, NEED_DATA, Connection, Reply, Status, Task, serialize
from specialists.node.transports import pinned_client_context

REPO = Path(__file__).resolve().parent.parent


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def read_line(
    stream: trio.abc.ReceiveStream, needle: str, buffer: list[bytes | bytearray]
) -> str:
    while True:
        text = b"".join(buffer).decode("utf-8", "replace")
        for line in text.splitlines():
            if needle in line:
                buffer.clear()
                return line
        data = await stream.receive_some(65536)
        if not data:
            raise RuntimeError(f"EOF before {needle!r}: {text[-2000:]}")
        buffer.append(data)


def nodes_task(**fields: str) -> Task:
    return Task("nodes", "SYS", "NODES", None, tuple(fields.items()))


async def tls_address(client: Client) -> tuple[str, int, str]:
    reply = await client.call(nodes_task(ACTION="list"))
    address, fingerprint = (reply.get("TLS") or "").split(" sha256:")
    host, port = address.rsplit(":", 1)
    return host, int(port), fingerprint


class IdleNode:
    """A node that pairs over TLS with the real frames, then only answers and heartbeats."""

    def __init__(self, stream: trio.SSLStream[trio.SocketStream]) -> None:
        self.stream = stream
        self.codec = Connection()

    async def frame(self) -> Task | Reply:
        while True:
            event = self.codec.next_event()
            if event is CLOSED:
                raise RuntimeError("link closed")
            if event is not NEED_DATA:
                assert isinstance(event, Task | Reply)
                return event
            self.codec.receive_data(await self.stream.receive_some(65536))

    async def pair(self, name: str, client: Client) -> None:
        fields = (("ID", "n-1"), ("NAME", name), ("PLATFORM", "bench"))
        await self.stream.send_all(serialize(Task("pair", "NODE", "PAIR_CODE", None, fields)))
        reply = await self.frame()
        code = (reply.get("DATA") or "").removeprefix("code:")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.call, nodes_task(ACTION="approve", CODE=code))
            paired = await self.frame()
            ok = Reply(
                Status.OK, (("ID", paired.id or ""), ("SCOPE", "[node]"), ("DATA", "stored"))
            )
            await self.stream.send_all(serialize(ok))

    async def idle(self) -> None:
        beat = 0
        while True:
            await trio.sleep(10)
            beat += 1
            task = Task("heartbeat", "NODE", "ACK", None, (("ID", f"h-{beat}"),))
            await self.stream.send_all(serialize(task))
            await self.frame()


async def round_trips(client: Client, rounds: int) -> tuple[list[float], list[float], list[float]]:
    task = Task(
        "node", "TOOL", "NODE_RESULT", None, (("ACTION", "location_get"), ("NODE", "bench0"))
    )
    total, work, daemon = [], [], []
    for _ in range(rounds):
        started = time.perf_counter()
        reply = await client.call(task)
        total.append((time.perf_counter() - started) * 1000)
        assert reply.status is Status.OK, reply
        work.append(float(reply.get("NODE_TIME") or 0))
        daemon.append(float(reply.get("EXEC_TIME") or 0))
    return total, work, daemon


async def baseline(client: Client, rounds: int, task: Task) -> list[float]:
    """The same client's round trip for an op that does not leave the daemon."""
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        await client.call(task)
        times.append((time.perf_counter() - started) * 1000)
    return times


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main(rounds: int, idle: int) -> None:
    with tempfile.TemporaryDirectory(prefix="csp-bench-nodes-", dir="/tmp") as directory:
        config = os.path.join(directory, "config.yaml")
        settings = {
            "daemon": {"state_dir": os.path.join(directory, "state"), "log_level": "error"},
            "socket": {"path": os.path.join(directory, "csp.sock")},
            "nodes": {"tls": {"enabled": True, "port": 0}, "pair_attempts": idle + 10},
        }
        Path(config).write_text(yaml.safe_dump(settings))
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        cmd = [sys.executable, "-m", "csp_web", "serve", "--no-stdin", "--config", config]
        daemon = await trio.lowlevel.open_process(cmd, env=env)
        try:
            async with trio.open_nursery() as nursery:
                await _measure(directory, daemon, env, rounds, idle, nursery)
                nursery.cancel_scope.cancel()
        finally:
            daemon.terminate()
            await daemon.wait()


async def _measure(
    directory: str,
    daemon: trio.Process,
    env: dict[str, str],
    rounds: int,
    idle: int,
    nursery: trio.Nursery,
) -> None:
    socket_path = os.path.join(directory, "csp.sock")
    for _ in range(600):  # the daemon process imports everything before it listens
        if os.path.exists(socket_path):
            break
        await trio.sleep(0.05)
    async with open_client(socket_path) as client:
        host, port, fingerprint = await tls_address(client)
        token = os.path.join(directory, "bench0.token")
        node_cmd = [sys.executable, "-m", "csp_web", "node", "run", "--connect", f"{host}:{port}"]
        node_cmd += ["--name", "bench0", "--token-file", token, "--fingerprint", fingerprint]
        node_cmd += ["--location", "41.0,29.0,5"]
        node = await trio.lowlevel.open_process(node_cmd, stderr=subprocess.PIPE, env=env)
        assert node.stderr is not None
        try:
            code = (await read_line(node.stderr, "pairing code:", [])).split()[2]
            await client.call(nodes_task(ACTION="approve", CODE=code))
            await read_line(node.stderr, "paired; token stored", [])
            await round_trips(client, 50)  # warm-up
            total, work, daemon_ms = await round_trips(client, rounds)
            audited = await baseline(client, rounds, nodes_task(ACTION="list"))
            ping = await baseline(client, rounds, Task("ping", "SYS", "PONG"))
        finally:
            node.terminate()
            await node.wait()
        added = [t - w for t, w in zip(total, work, strict=True)]
        print(f"node round trip over loopback TLS, {rounds} rounds of location_get (fixed):")
        print(f"  client round trip   p50 {pct(total, 0.5):.3f} ms  p99 {pct(total, 0.99):.3f} ms")
        print(f"  node's own work     p50 {pct(work, 0.5):.3f} ms")
        print(f"  daemon's EXEC_TIME  p50 {statistics.median(daemon_ms):.0f} ms (whole ms)")
        print(f"  daemon added        p50 {pct(added, 0.5):.3f} ms  p99 {pct(added, 0.99):.3f} ms")
        print("  baselines on the same connection, no node hop:")
        print(f"    REQ:ping (not audited)      p50 {pct(ping, 0.5):.3f} ms")
        print(f"    REQ:nodes list (audited)    p50 {pct(audited, 0.5):.3f} ms")
        print(f"  load average during the run: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")
        before = rss_mb(daemon.pid)
        for n in range(idle):
            tcp = await trio.open_tcp_stream(host, port)
            stream = trio.SSLStream(tcp, pinned_client_context(), server_hostname=None)
            bench_node = IdleNode(stream)
            await bench_node.pair(f"idle{n}", client)
            nursery.start_soon(bench_node.idle)
        listed = await client.call(nodes_task(ACTION="list"))
        connected = sum('"connected":true' in line for line in listed.get_all("NODE"))
        await trio.sleep(1)
        after = rss_mb(daemon.pid)
        print(f"daemon RSS: {before:.1f} MB, with {connected} idle paired nodes {after:.1f} MB")
        per_node_kib = (after - before) * 1024 / max(idle, 1)
        print(f"  growth {after - before:.1f} MB, {per_node_kib:.1f} KiB per node")
    print(f"reproduce: python bench/nodes.py --rounds {rounds} --idle {idle}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--idle", type=int, default=100)
    args = parser.parse_args()
    trio.run(main, args.rounds, args.idle)
