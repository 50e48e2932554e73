"""A real redis-server for tests: on a Unix socket in a private directory, no persistence.

    server = RedisServer(directory); server.start(); ...; server.pause() / resume() / stop()

``start`` waits for the server's own "Ready to accept connections" line (no polling).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

import redis

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


class RedisServer:
    def __init__(self, directory: str, *, extra: tuple[str, ...] = ()) -> None:
        self.directory = directory
        self.socket = os.path.join(directory, "redis.sock")
        self.url = f"unix://{self.socket}"
        self.extra = extra
        self.process: subprocess.Popen[bytes] | None = None
        self._drain: threading.Thread | None = None

    def start(self) -> None:
        args = [
            REDIS_SERVER,
            "--port", "0",
            "--unixsocket", self.socket,
            "--unixsocketperm", "700",
            "--save", "",
            "--appendonly", "no",
            "--dir", self.directory,
            "--notify-keyspace-events", "",
            *self.extra,
        ]  # fmt: skip
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert self.process.stdout is not None
        seen = []
        for line in self.process.stdout:
            seen.append(line)
            if b"eady to accept connections" in line:
                # Drain the rest so a chatty server never blocks on a full pipe.
                self._drain = threading.Thread(target=drain_quietly, args=(self.process.stdout,))
                self._drain.daemon = True
                self._drain.start()
                return
        raise RuntimeError(f"redis-server did not start: {b''.join(seen[-5:])!r}")

    def pause(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.send_signal(signal.SIGCONT)
        self.process.kill()
        self.process.wait()
        if self._drain is not None:
            self._drain.join()  # at EOF: the server is gone
            self._drain = None
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    @contextmanager
    def client(self) -> Iterator[redis.Redis]:
        """A plain redis-py client of the server for the block: what a test reads or plants."""
        client = redis.Redis(unix_socket_path=self.socket)
        try:
            yield client
        finally:
            client.close()

    def json_at(self, key: str) -> Any:
        """The JSON value stored at ``key``, or None when there is none."""
        with self.client() as client:
            raw = client.get(key)
        return None if raw is None else json.loads(raw)


def drain_quietly(stream: IO[bytes]) -> None:
    try:
        for _ in stream:
            pass
    except (OSError, ValueError):
        pass
