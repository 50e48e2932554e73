"""``csp-web serve`` started with its state dir on a disk that is already full: it starts,
answers ping and stats, refuses what must persist with ``storage_full``, and once space
returns serves and keeps everything it acknowledges, with no restart."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
import trio
import yaml

from csp_web.client.trio_client import Client, open_client
from protocol import Reply, Status, Task
from tests.conftest import audit_ids, wait_until
from tests.storage.conftest import Tmpfs

pytestmark = pytest.mark.slow

CSP_WEB = shutil.which("csp-web") or "csp-web"
WAIT_S = 30.0


def _write(task_id: str) -> Task:
    fields = (("ID", task_id), ("FROM", "client"), ("TYPE", "note"), ("PATH", "notes/a.log"))
    return Task("write", "MEMORY", "ACK", None, (*fields, ("DATA", "hello")))


def _storage(reply: Reply) -> str:
    (line,) = [value for key, value in reply.fields if key == "STORAGE"]
    return line


async def _stats(client: Client) -> str:
    return _storage(await client.call(Task("stats", "SYS", "STATS"), timeout_s=WAIT_S))


async def _serve(config: str, socket_path: str, log: str) -> trio.Process:
    """The daemon, returned once it answers a ping on ``socket_path``."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        process = await trio.lowlevel.open_process(
            [CSP_WEB, "serve", "--config", config, "--socket", socket_path, "--no-stdin"],
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            env={k: v for k, v in os.environ.items() if k != "CSP_WEB_CONFIG"},
        )
    finally:
        os.close(fd)
    while True:
        assert process.poll() is None, Path(log).read_text()
        try:
            async with open_client(socket_path) as client:
                await client.call(Task("ping", "SYS", "PONG"), timeout_s=WAIT_S)
        except OSError:
            await trio.sleep(0.02)
        else:
            return process


async def test_a_daemon_started_on_a_full_disk_serves_refuses_storage_full_and_recovers(
    tmpfs: Tmpfs, tmp_path: Path, sock_dir: str
) -> None:
    state = os.path.join(tmpfs.path, "state")
    config = tmp_path / "config.yaml"
    daemon = {"state_dir": state, "grace_period_s": 5.0}
    memory = {"backoff_initial_s": 0.01, "backoff_max_s": 0.05}
    config.write_text(yaml.safe_dump({"daemon": daemon, "memory": memory}))
    tmpfs.fill()
    log = str(tmp_path / "daemon.log")
    with trio.fail_after(WAIT_S):
        process = await _serve(str(config), os.path.join(sock_dir, "d.sock"), log)
        try:
            async with open_client(os.path.join(sock_dir, "d.sock")) as client:
                refused = await client.call(_write("note-full"), timeout_s=WAIT_S)
                assert (refused.status, refused.get("ERROR")) == (
                    Status.FAIL,
                    "storage_full:outbox",
                )
                assert "outbox" in (await _stats(client)).split(":", 1)[1].split(",")
                tmpfs.free()
                stored = await client.call(_write("note-ok"), timeout_s=WAIT_S)
                assert (stored.status, stored.get("DATA")) == (Status.OK, "stored"), stored
                read = Task(
                    "read", "MEMORY", "CONTENT", None, (("ID", "read-ok"), ("PATH", "notes/a.log"))
                )
                got = await client.call(read, timeout_s=WAIT_S)
                assert (got.status, got.get("DATA")) == (Status.OK, "hello\n")
                full = (await _stats(client)).split(":", 1)[1].split(",")
                assert {"outbox", "memory"}.isdisjoint(full)
        finally:
            process.send_signal(signal.SIGTERM)
            assert await process.wait() == 0, Path(log).read_text()
    memory_dir = os.path.join(state, "memory")
    await wait_until(lambda: {"note-ok", "read-ok"} <= audit_ids(memory_dir), timeout_s=WAIT_S)
    assert "Traceback" not in Path(log).read_text()
