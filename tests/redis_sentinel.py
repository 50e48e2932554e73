"""A real Redis Sentinel set-up for tests: a master, a replica and a sentinel on loopback.

    group = SentinelGroup(directory); group.start(); ...; group.failover(); group.stop()

The sentinel watches ``MASTER`` with quorum 1, ``down-after-milliseconds`` 1000 and
``failover-timeout`` 3000, so a failover takes a few seconds. ``start`` returns once the
replica is in sync and the sentinel knows it (a failover needs a replica it can promote).
After a failover the old master becomes the new one's replica when the sentinel next looks
at it (its INFO period, ten seconds): writes that wait for a replica (run claims) wait for
that. (With two replicas and WAIT 1, a claim only the replica left behind held was lost at
a failover and run twice: ``sentinel.replica_acks`` counts every replica, docs/scaling.md.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import redis

from tests.redis_cluster import free_ports
from tests.redis_server import REDIS_SERVER, drain_quietly

MASTER = "csp-master"
START_S = 30.0


class SentinelGroup:
    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.ports: dict[str, int] = {}
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def sentinel_address(self) -> str:
        return f"127.0.0.1:{self.ports['sentinel']}"

    def start(self) -> None:
        master, replica, sentinel = free_ports(3)
        self.ports = {"master": master, "replica": replica, "sentinel": sentinel}
        self._server("master", master)
        self._server("replica", replica, "--replicaof", "127.0.0.1", str(master))
        self._sentinel(sentinel, master)
        self._until(self._ready, "the replica in sync and known to the sentinel")

    def _server(self, name: str, port: int, *extra: str) -> None:
        folder = os.path.join(self.directory, name)
        os.makedirs(folder)
        args = [
            REDIS_SERVER,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", folder,
            *extra,
        ]  # fmt: skip
        self._spawn(name, args)

    def _sentinel(self, port: int, master: int) -> None:
        # The sentinel rewrites its file (what it learns): one of its own, in the folder.
        path = os.path.join(self.directory, "sentinel.conf")
        with open(path, "w", encoding="utf-8") as file:
            file.write(
                f"port {port}\nbind 127.0.0.1\ndir {self.directory}\n"
                f"sentinel monitor {MASTER} 127.0.0.1 {master} 1\n"
                f"sentinel down-after-milliseconds {MASTER} 1000\n"
                f"sentinel failover-timeout {MASTER} 3000\n"
            )
        self._spawn("sentinel", [REDIS_SERVER, path, "--sentinel"])

    def _spawn(self, name: str, args: list[str]) -> None:
        process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert process.stdout is not None
        self.processes[name] = process
        for line in process.stdout:
            if b"eady to accept connections" in line or b"Sentinel ID is" in line:
                threading.Thread(target=drain_quietly, args=(process.stdout,), daemon=True).start()
                return
        raise RuntimeError(f"redis {name} did not start")

    def _ready(self) -> bool:
        with redis.Redis(port=self.ports["replica"]) as replica:
            if replica.info("replication").get("master_link_status") != "up":
                return False
        with redis.Redis(port=self.ports["sentinel"]) as sentinel:
            return bool(sentinel.sentinel_slaves(MASTER))

    def _until(self, check: object, what: str) -> None:
        deadline = time.monotonic() + START_S
        while not check():  # type: ignore[operator]
            if time.monotonic() > deadline:
                raise RuntimeError(f"sentinel group: not {what} in {START_S:g} s")
            time.sleep(0.05)

    def master_port(self) -> int:
        """The port of the master the sentinel names now."""
        with redis.Redis(port=self.ports["sentinel"]) as sentinel:
            _, port = sentinel.sentinel_get_master_addr_by_name(MASTER)
        return int(port)

    def failover(self) -> int:
        """Promote the replica (``SENTINEL FAILOVER``) and return the new master's port once
        the sentinel names it and it accepts writes."""
        old = self.master_port()
        with redis.Redis(port=self.ports["sentinel"]) as sentinel:
            sentinel.execute_command("SENTINEL", "FAILOVER", MASTER)
        self._until(lambda: self.master_port() != old, "failed over")
        new = self.master_port()
        self._until(lambda: self._writable(new), "writable after the failover")
        return new

    def rejoin(self) -> None:
        """Make the server that is not the master the master's replica now, as the sentinel
        does when it next looks at it (a loaded host's sentinel may sit in TILT for minutes)."""
        master = self.master_port()
        for port in self.ports.values():
            if port not in (master, self.ports["sentinel"]):
                with redis.Redis(port=port) as client:
                    client.execute_command("REPLICAOF", "127.0.0.1", master)

    def _writable(self, port: int) -> bool:
        with redis.Redis(port=port) as client:
            return bool(client.info("replication").get("role") == "master")

    def pause(self, name: str) -> None:
        """Stop ``name`` (SIGSTOP) until ``resume``: its sockets stay open, it answers nothing."""
        self.processes[name].send_signal(signal.SIGSTOP)

    def resume(self, name: str) -> None:
        self.processes[name].send_signal(signal.SIGCONT)

    def flush(self) -> None:
        """Empty the master (the replica follows)."""
        with redis.Redis(port=self.master_port()) as client:
            client.flushall()
            client.execute_command("WAIT", 1, 2000)

    def stop(self) -> None:
        for process in self.processes.values():
            process.send_signal(signal.SIGCONT)
            process.kill()
            process.wait()
            if process.stdout is not None:
                process.stdout.close()
        self.processes = {}
