"""systemd integration without systemd: the daemon is started the way systemd starts it (the
documented environment variables, the listening socket as fd 3, a notification socket) and
must serve the passed socket, report READY/STOPPING, ping the watchdog and leave the socket
file to systemd (sd_listen_fds(3), sd_notify(3))."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from csp_web.client.trio_client import open_client
from csp_web.core.transports import systemd
from protocol import Status, Task

# Starts csp-web as systemd would: the passed socket moved to fd 3, LISTEN_PID our own pid
# (known only once the process exists, so set by the process itself before exec).
_LAUNCHER = (
    "import os, sys; os.dup2(int(sys.argv[1]), 3); "
    "os.environ['LISTEN_PID'] = str(os.getpid()); "
    "os.execv(sys.executable, [sys.executable, '-m', 'csp_web', *sys.argv[2:]])"
)


@pytest.fixture
def fresh_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """The module reads the variables once per process; forget that reading around a test."""
    for name in ("LISTEN_PID", "LISTEN_FDS", "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
        monkeypatch.delenv(name, raising=False)
    systemd._environment.cache_clear()
    systemd.inherited_unix_listener.cache_clear()
    yield monkeypatch
    systemd._environment.cache_clear()
    systemd.inherited_unix_listener.cache_clear()


def _listening_socket(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    os.chmod(path, 0o600)
    sock.listen(16)
    return sock


def _write_config(directory: Path, socket_path: str | None = None) -> str:
    lines = [f"daemon:\n  state_dir: {directory / 'state'}\n  grace_period_s: 2"]
    if socket_path is not None:
        lines.append(f"socket:\n  path: {socket_path}")
    config = directory / "config.yaml"
    config.write_text("\n".join(lines) + "\n")
    return str(config)


class Notifications:
    """The notification socket systemd would listen on."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)

    async def next(self) -> str:
        with trio.fail_after(60):
            return (await self.sock.recv(4096)).decode()

    async def wait_for(self, key: str) -> str:
        while key not in (message := await self.next()).split("\n"):
            pass
        return message


@asynccontextmanager
async def _activated_daemon(
    tmp_path: Path, sock_dir: str, *, config_socket: str | None = None, watchdog_us: int = 0
) -> AsyncIterator[tuple[trio.Process, Notifications, str]]:
    socket_path = os.path.join(sock_dir, "csp.sock")
    listener = _listening_socket(socket_path)
    notifications = Notifications(os.path.join(sock_dir, "notify"))
    await notifications.sock.bind(notifications.path)
    env = {**os.environ, "LISTEN_FDS": "1", "LISTEN_FDNAMES": "csp"}
    env["NOTIFY_SOCKET"] = notifications.path
    if watchdog_us:
        env["WATCHDOG_USEC"] = str(watchdog_us)
    command = [sys.executable, "-c", _LAUNCHER, str(listener.fileno()), "serve", "--no-stdin"]
    command += ["--config", _write_config(tmp_path, config_socket)]
    process = await trio.lowlevel.open_process(
        command, env=env, pass_fds=(listener.fileno(),), stderr=subprocess.PIPE
    )
    listener.close()  # the daemon holds its own copy, as under systemd
    try:
        with notifications.sock:
            yield process, notifications, socket_path
    finally:
        process.kill()
        await process.wait()


async def test_the_daemon_serves_the_socket_systemd_passed_and_leaves_its_file(
    tmp_path: Path, sock_dir: str
) -> None:
    async with _activated_daemon(tmp_path, sock_dir) as (process, notifications, path):
        ready = await notifications.wait_for("READY=1")
        assert f"STATUS=serving (socket {path}, stdin False)" in ready.split("\n")
        async with open_client(path) as client:
            reply = await client.call(Task("ping", "SYS", "PONG", None, (("ID", "sd-1"),)))
        assert reply.status is Status.OK
        process.send_signal(signal.SIGTERM)
        await notifications.wait_for("STOPPING=1")
        with trio.fail_after(60):
            assert await process.wait() == 0
        assert process.stderr is not None
        log = (await process.stderr.receive_some(1 << 20)).decode()
    assert "serving the socket systemd passed" in log
    assert os.path.exists(path), "the socket file is systemd's: it must outlive the daemon"


async def test_a_configured_socket_path_other_than_the_passed_one_exits_2(
    tmp_path: Path, sock_dir: str
) -> None:
    other = os.path.join(sock_dir, "other.sock")
    async with _activated_daemon(tmp_path, sock_dir, config_socket=other) as (process, _, path):
        with trio.fail_after(60):
            assert await process.wait() == 2
        assert process.stderr is not None
        stderr = (await process.stderr.receive_some(1 << 20)).decode()
    assert f"csp-web: cannot serve: systemd passed the socket {path}, not {other}" in stderr


async def test_the_watchdog_is_pinged_every_half_period(tmp_path: Path, sock_dir: str) -> None:
    async with _activated_daemon(tmp_path, sock_dir, watchdog_us=200_000) as (process, note, _):
        await note.wait_for("READY=1")
        for _ in range(3):
            await note.wait_for("WATCHDOG=1")
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(60):
            assert await process.wait() == 0


async def test_sighup_reports_reloading_then_ready(tmp_path: Path, sock_dir: str) -> None:
    """Type=notify-reload: RELOADING=1 with MONOTONIC_USEC, then READY=1 when applied."""
    async with _activated_daemon(tmp_path, sock_dir) as (process, notifications, _):
        await notifications.wait_for("READY=1")
        process.send_signal(signal.SIGHUP)
        reloading = await notifications.wait_for("RELOADING=1")
        assert any(part.startswith("MONOTONIC_USEC=") for part in reloading.split("\n"))
        await notifications.wait_for("READY=1")
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(60):
            assert await process.wait() == 0


def test_notify_reaches_an_abstract_socket(fresh_environment: pytest.MonkeyPatch) -> None:
    name = f"csp-web-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind("\0" + name)
        fresh_environment.setenv("NOTIFY_SOCKET", "@" + name)
        assert systemd.notify("READY=1")
        assert receiver.recv(100) == b"READY=1"
    assert "NOTIFY_SOCKET" not in os.environ, "children must not inherit it"


def test_without_systemd_every_call_is_a_no_op(fresh_environment: pytest.MonkeyPatch) -> None:
    assert systemd.notify("READY=1") is False
    assert systemd.inherited_unix_listener() is None
    assert systemd.watchdog_interval_s() is None


@pytest.mark.parametrize(
    ("usec", "pid", "expected"),
    [
        ("2000000", None, 1.0),
        ("2000000", "self", 1.0),
        ("2000000", "1", None),  # another process's watchdog
        ("0", None, None),
        ("soon", None, None),
        ("２000000", "self", None),  # int() reads fullwidth digits; the wire parser does not
        ("-2000000", "self", None),
    ],
)
def test_the_watchdog_interval_is_half_the_period_set_for_this_process(
    fresh_environment: pytest.MonkeyPatch, usec: str, pid: str | None, expected: float | None
) -> None:
    fresh_environment.setenv("WATCHDOG_USEC", usec)
    if pid is not None:
        fresh_environment.setenv("WATCHDOG_PID", str(os.getpid()) if pid == "self" else pid)
    assert systemd.watchdog_interval_s() == expected


@pytest.mark.parametrize(
    ("listen_pid", "listen_fds"),
    [("1", "1"), ("self", "0"), ("self", "many"), ("self", "１"), (None, "1")],
)
def test_sockets_meant_for_another_process_or_none_are_not_taken(
    fresh_environment: pytest.MonkeyPatch, listen_pid: str | None, listen_fds: str
) -> None:
    if listen_pid is not None:
        fresh_environment.setenv(
            "LISTEN_PID", str(os.getpid()) if listen_pid == "self" else listen_pid
        )
    fresh_environment.setenv("LISTEN_FDS", listen_fds)
    assert systemd.inherited_unix_listener() is None


async def test_a_passed_descriptor_that_is_not_a_listening_unix_socket_is_not_served(
    tmp_path: Path,
) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as not_a_listener:
        env = {**os.environ, "LISTEN_FDS": "1"}
        command = [sys.executable, "-c", _LAUNCHER, str(not_a_listener.fileno()), "serve"]
        command += ["--no-stdin", "--config", _write_config(tmp_path)]
        with trio.fail_after(60):
            done = await trio.run_process(
                command,
                env=env,
                pass_fds=(not_a_listener.fileno(),),
                capture_stderr=True,
                check=False,
            )
    stderr = done.stderr.decode()
    assert done.returncode == 2
    assert "ignoring the socket systemd passed: not a listening Unix stream socket" in stderr
    assert "csp-web: --no-stdin needs --socket or socket.path" in stderr


def _unit(name: str) -> dict[str, str]:
    path = Path(__file__).resolve().parent.parent / "deploy" / "systemd" / name
    entries = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {key: value for key, value in entries if not key.startswith("#")}


def test_the_shipped_units_and_config_agree() -> None:
    """deploy/systemd: the config loads, names the socket unit's path and the service's state
    directory, and ExecStart is a valid `serve` command line reading that config."""
    from csp_web.app.catalog import load_config
    from csp_web.app.main import _parser

    repo = Path(__file__).resolve().parent.parent
    config = load_config(str(repo / "deploy" / "systemd" / "config.yaml"))
    socket_unit, service = _unit("csp-web.socket"), _unit("csp-web.service")
    assert config.socket.path == socket_unit["ListenStream"]
    assert config.daemon.state_dir == "/var/lib/" + service["StateDirectory"]
    assert service["Type"] == "notify"  # systemd 252 has no notify-reload
    assert service["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert service["SuccessExitStatus"] == "4"
    assert service["KillMode"] == "mixed"  # SIGTERM for the daemon, not its exec commands
    _, *argv = service["ExecStart"].split()
    args = _parser().parse_args(argv)
    assert (args.command, args.no_stdin, args.config) == ("serve", True, "/etc/csp-web/config.yaml")
