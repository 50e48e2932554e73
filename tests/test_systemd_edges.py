"""systemd's side when what it passes is odd: a supervisor gone away, a notification address
that is no socket, two passed sockets, a LISTEN_FDS naming a descriptor that is not there.
None of them may crash the daemon or send it anywhere but where the variables say."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from csp_web.client.trio_client import open_client
from csp_web.core.transports import systemd
from protocol import Status, Task
from tests.test_systemd import _LAUNCHER, Notifications, _listening_socket, _write_config


@pytest.fixture
def fresh_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """The module reads the variables once per process; forget that reading around a test."""
    for name in ("LISTEN_PID", "LISTEN_FDS", "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
        monkeypatch.delenv(name, raising=False)
    systemd._environment.cache_clear()
    yield monkeypatch
    systemd._environment.cache_clear()


def test_notify_to_a_supervisor_gone_away_is_false_and_raises_nothing(
    fresh_environment: pytest.MonkeyPatch, sock_dir: str
) -> None:
    path = os.path.join(sock_dir, "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind(path)
    # The file is left behind by a receiver that is gone: ECONNREFUSED, then without the file.
    fresh_environment.setenv("NOTIFY_SOCKET", path)
    assert systemd.notify("READY=1") is False
    os.unlink(path)
    assert systemd.notify("STOPPING=1") is False


@pytest.mark.parametrize("address", ["", "notify.sock", "~/notify"])
def test_notify_sends_nothing_to_an_address_that_is_neither_a_path_nor_abstract(
    fresh_environment: pytest.MonkeyPatch, sock_dir: str, address: str
) -> None:
    """A relative name would be resolved against whatever the working directory is."""
    fresh_environment.chdir(sock_dir)
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind("notify.sock")
        receiver.setblocking(False)
        fresh_environment.setenv("NOTIFY_SOCKET", address)
        assert systemd.notify("READY=1") is False
        with pytest.raises(BlockingIOError):
            receiver.recv(100)


async def test_two_passed_sockets_serve_the_first_and_say_so(tmp_path: Path, sock_dir: str) -> None:
    """A .socket unit with two ListenStream= lines: csp-web listens on one socket."""
    path = os.path.join(sock_dir, "csp.sock")
    listener = _listening_socket(path)
    notifications = Notifications(os.path.join(sock_dir, "notify"))
    await notifications.sock.bind(notifications.path)
    env = {**os.environ, "LISTEN_FDS": "2", "NOTIFY_SOCKET": notifications.path}
    command = [sys.executable, "-c", _LAUNCHER, str(listener.fileno()), "serve", "--no-stdin"]
    command += ["--config", _write_config(tmp_path)]
    process = await trio.lowlevel.open_process(
        command, env=env, pass_fds=(listener.fileno(),), stderr=subprocess.PIPE
    )
    listener.close()
    try:
        with notifications.sock:
            await notifications.wait_for("READY=1")
            async with open_client(path) as client:
                reply = await client.call(Task("ping", "SYS", "PONG", None, (("ID", "two"),)))
            assert reply.status is Status.OK
            process.send_signal(signal.SIGTERM)
            with trio.fail_after(60):
                assert await process.wait() == 0
        assert process.stderr is not None
        log = (await process.stderr.receive_some(1 << 20)).decode()
    finally:
        process.kill()
        await process.wait()
    assert "systemd passed 2 sockets; serving the first only" in log


async def test_listen_fds_naming_a_descriptor_that_is_not_a_socket_is_ignored(
    tmp_path: Path,
) -> None:
    """LISTEN_FDS=1 for us, but descriptor 3 is a regular file: the daemon logs it and,
    having no socket to serve, refuses --no-stdin with exit 2 rather than adopting fd 3."""
    with open(tmp_path / "not-a-socket", "wb") as not_a_socket:
        command = [sys.executable, "-c", _LAUNCHER, str(not_a_socket.fileno()), "serve"]
        command += ["--no-stdin", "--config", _write_config(tmp_path)]
        with trio.fail_after(60):
            done = await trio.run_process(
                command,
                env={**os.environ, "LISTEN_FDS": "1"},
                pass_fds=(not_a_socket.fileno(),),
                capture_stderr=True,
                check=False,
            )
    stderr = done.stderr.decode()
    assert done.returncode == 2
    assert "ignoring the socket systemd passed: Socket operation on non-socket" in stderr
    assert "csp-web: --no-stdin needs --socket or socket.path" in stderr


async def test_a_passed_abstract_namespace_socket_is_not_taken_for_a_path(
    tmp_path: Path,
) -> None:
    """ListenStream=@name: the socket has no file, so --no-stdin has no path to serve."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as abstract:
        abstract.bind(f"\0csp-web-test-{os.getpid()}")
        abstract.listen(1)
        command = [sys.executable, "-c", _LAUNCHER, str(abstract.fileno()), "serve"]
        command += ["--no-stdin", "--config", _write_config(tmp_path)]
        with trio.fail_after(60):
            done = await trio.run_process(
                command,
                env={**os.environ, "LISTEN_FDS": "1"},
                pass_fds=(abstract.fileno(),),
                capture_stderr=True,
                check=False,
            )
    assert done.returncode == 2
    assert done.stderr.decode().splitlines() == [
        "csp-web: --no-stdin needs --socket or socket.path"
    ]
