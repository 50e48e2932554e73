"""``csp-web health``, run as a probe would run it (a subprocess), against a healthy daemon, a
degraded one (its Memory Specialist gone; Redis down) and none; and its judgement of each
``REQ:stats`` line that says a part is not well."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest
import trio

from csp_web.cli.health import judge
from csp_web.client.trio_client import open_client
from csp_web.config import Config, RedisConfig
from protocol import Reply, Status, Task
from tests.conftest import Sink, start_daemon

CSP_WEB = os.path.join(os.path.dirname(sys.executable), "csp-web")
STATS = Task("stats", "SYS", "STATS")


async def health(socket_path: str) -> subprocess.CompletedProcess[str]:
    argv = [CSP_WEB, "health", "--socket", socket_path, "--timeout", "10"]
    done = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False)
    return subprocess.CompletedProcess(
        argv, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


async def wait_stats(socket_path: str, field: str, wanted: str) -> None:
    """Until the daemon's REQ:stats has ``field`` containing ``wanted`` (bounded by callers)."""
    async with open_client(socket_path) as client:
        while wanted not in ((await client.call(STATS)).get(field) or ""):
            await trio.sleep(0.05)


@pytest.mark.slow  # a daemon with every specialist, and csp-web in a subprocess
async def test_health_of_a_healthy_daemon_is_exit_0(
    nursery: trio.Nursery, config: Config, sink: Sink, sock_dir: str
) -> None:
    path = os.path.join(sock_dir, "csp.sock")
    await start_daemon(nursery, config, path, specialists=True)
    with trio.fail_after(60):
        await wait_stats(path, "OUTBOX", "connected:true")
        done = await health(path)
    assert (done.returncode, done.stdout, done.stderr) == (0, "healthy\n", "")


@pytest.mark.slow  # a daemon with every specialist, and csp-web in a subprocess
async def test_health_of_a_daemon_whose_memory_specialist_is_gone_is_degraded(
    nursery: trio.Nursery, config: Config, sink: Sink, sock_dir: str
) -> None:
    path = os.path.join(sock_dir, "csp.sock")
    await start_daemon(nursery, config, path, specialists=True)
    with trio.fail_after(60):
        await wait_stats(path, "OUTBOX", "connected:true")
        await sink.stop()
        await wait_stats(path, "OUTBOX", "connected:false")
        done = await health(path)
    assert done.returncode == 1
    assert done.stdout.startswith("degraded: memory specialist unreachable (outbox depth ")
    assert done.stdout.count("\n") == 1


@pytest.mark.slow
async def test_health_of_a_daemon_whose_redis_is_down_is_degraded(
    nursery: trio.Nursery, config: Config, sink: Sink, sock_dir: str
) -> None:
    closed = trio.socket.socket()  # a port nothing listens on: Redis down from the start
    await closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    config = dataclasses.replace(config, redis=RedisConfig(url=f"redis://127.0.0.1:{port}/0"))
    path = os.path.join(sock_dir, "csp.sock")
    await start_daemon(nursery, config, path, specialists=True)
    with trio.fail_after(60):
        await wait_stats(path, "REDIS", '"state":"down"')
        done = await health(path)
    assert done.returncode == 1
    assert "redis down (" in done.stdout


async def test_health_with_no_daemon_is_unreachable_exit_3(sock_dir: str) -> None:
    path = os.path.join(sock_dir, "none.sock")
    with trio.fail_after(60):
        done = await health(path)
    assert done.returncode == 3
    assert done.stdout.startswith(f"unreachable: {path}: ")
    assert done.stdout.count("\n") == 1


def test_health_without_a_socket_and_no_daemon_to_find_is_unreachable_exit_3(
    tmp_path: os.PathLike[str],
) -> None:
    """No --socket, no socket.path, and no running daemon recorded one in the state dir: the
    probe's unreachable line (it was a usage error, exit 2, even with a daemon running)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CSP_WEB")}
    env.pop("XDG_RUNTIME_DIR", None)
    env["XDG_STATE_HOME"] = os.fspath(tmp_path)
    done = subprocess.run(
        [CSP_WEB, "health"], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert (done.returncode, done.stderr) == (3, "")
    assert done.stdout == (
        f"unreachable: no running daemon found (looked at the lock file in {tmp_path}/csp-web);"
        " pass --socket PATH or set socket.path\n"
    )


def _stats(*fields: tuple[str, str], status: Status = Status.OK) -> Reply:
    return Reply(status, (("SCOPE", "[sys]"), ("DATA", "uptime_s:1"), *fields))


def test_a_full_disk_is_degraded_naming_the_stores() -> None:
    assert judge(_stats(("STORAGE", "full:cache,outbox"))) == ["storage_full:cache,outbox"]
    assert judge(_stats(("STORAGE", "full:none"))) == []


def test_a_failed_mcp_server_and_redis_down_are_each_a_reason() -> None:
    reply = _stats(
        ("STORAGE", "full:none"),
        ("REDIS", '{"state":"down","events":"lost","calls":3,"error":"refused"}'),
        ("MCP", '{"server":"toy","state":"running"}'),
        ("MCP", '{"server":"bad","state":"failed"}'),
    )
    assert judge(reply) == ["redis down (refused)", "mcp server bad failed"]


def test_a_failed_stats_reply_is_degraded_with_its_error() -> None:
    reply = _stats(("ERROR", "shutting_down:daemon is stopping"), status=Status.FAIL)
    assert judge(reply) == ["stats failed: shutting_down:daemon is stopping"]
