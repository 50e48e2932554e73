"""A real Redis Cluster for tests: three masters on loopback, no replicas, no persistence.

    cluster = RedisCluster3(directory); cluster.start(); ...; cluster.url; cluster.stop()

Each node listens on a free TCP port whose cluster-bus port (+10000) is free too; ``start``
waits for every node's "Ready to accept connections" line, joins them with ``redis-cli
--cluster create`` and returns once every node reports ``cluster_state:ok``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time

import redis

from tests.redis_server import REDIS_SERVER, drain_quietly

REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"
BUS_OFFSET = 10000  # Redis Cluster's bus port is the client port + 10000
START_S = 30.0


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int) -> list[int]:
    """``count`` client ports whose bus ports are free too (from the kernel's choice)."""
    ports: list[int] = []
    while len(ports) < count:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port + BUS_OFFSET < 65536 and _free(port + BUS_OFFSET) and port not in ports:
            ports.append(port)
    return ports


class RedisCluster3:
    def __init__(self, directory: str, *, extra: tuple[str, ...] = ()) -> None:
        self.directory = directory
        self.extra = extra
        self.ports: list[int] = []
        self.processes: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.ports[0]}"

    def start(self) -> None:
        self.ports = free_ports(3)
        for port in self.ports:
            self.processes.append(self._node(port))
        nodes = [f"127.0.0.1:{port}" for port in self.ports]
        subprocess.run(
            [REDIS_CLI, "--cluster", "create", *nodes, "--cluster-replicas", "0", "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=START_S,
        )
        deadline = time.monotonic() + START_S
        for port in self.ports:
            with redis.Redis(port=port) as client:
                while b"cluster_state:ok" not in client.execute_command("CLUSTER", "INFO"):
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"cluster node {port} not ok in {START_S:g} s")
                    time.sleep(0.05)

    def _node(self, port: int) -> subprocess.Popen[bytes]:
        folder = os.path.join(self.directory, str(port))
        os.makedirs(folder)
        args = [
            REDIS_SERVER,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--save", "",
            "--appendonly", "no",
            "--dir", folder,
            *self.extra,
        ]  # fmt: skip
        process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert process.stdout is not None
        for line in process.stdout:
            if b"eady to accept connections" in line:
                # Drain the rest so a chatty node never blocks on a full pipe.
                threading.Thread(target=drain_quietly, args=(process.stdout,), daemon=True).start()
                return process
        raise RuntimeError(f"redis-server did not start on port {port}")

    def flush(self) -> None:
        """Empty every node (between tests sharing one cluster)."""
        for port in self.ports:
            with redis.Redis(port=port) as client:
                client.flushall()

    def stop(self) -> None:
        for process in self.processes:
            process.kill()
            process.wait()
            if process.stdout is not None:
                process.stdout.close()
        self.processes = []
