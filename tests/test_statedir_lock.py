"""One daemon per state directory (issue 8.6): a second ``csp-web serve`` on it exits 2.

Real processes: the first daemon holds the lock, the second is refused with one line naming
the directory and the holder's pid, and kill -9 of the holder frees the directory at once.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
import trio

from csp_web.client.trio_client import open_client
from csp_web.core.daemon.statedir import LOCK_FILE, StateDirBusy, hold_state_dir
from protocol import Status, Task

CSP_WEB = shutil.which("csp-web") or "csp-web"
PROCESS_TIMEOUT_S = 30  # a bound for hangs, far above the second or so a start takes


def _env(xdg: str) -> dict[str, str]:
    """No config at all: the state dir is the default one, $XDG_STATE_HOME/csp-web."""
    env = {k: v for k, v in os.environ.items() if k != "CSP_WEB_CONFIG"}
    env["XDG_STATE_HOME"] = xdg
    return env


async def _start(socket_path: str, env: dict[str, str], log_path: str) -> trio.Process:
    """``csp-web serve --socket --no-stdin``, returned once it answers a ping."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        process = await trio.lowlevel.open_process(
            [CSP_WEB, "serve", "--socket", socket_path, "--no-stdin"],
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            env=env,
        )
    finally:
        os.close(fd)
    with trio.fail_after(PROCESS_TIMEOUT_S):
        while True:  # a process: nothing to wait on but its socket (polled, bounded)
            assert process.poll() is None, Path(log_path).read_text()
            try:
                async with open_client(socket_path) as client:
                    reply = await client.call(Task("ping", "SYS", "PONG"), timeout_s=10)
            except OSError:
                await trio.sleep(0.02)
            else:
                assert reply.status is Status.OK
                return process


async def _stop(process: trio.Process, signum: int) -> int:
    try:
        process.send_signal(signum)
        with trio.fail_after(PROCESS_TIMEOUT_S):
            return await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_a_second_daemon_on_the_same_state_dir_exits_2_naming_the_dir_and_holder(
    tmp_path: Path, sock_dir: str
) -> None:
    env = _env(str(tmp_path / "xdg"))
    state_dir = str(tmp_path / "xdg" / "csp-web")
    first = await _start(os.path.join(sock_dir, "a.sock"), env, str(tmp_path / "first.log"))
    try:
        with trio.fail_after(PROCESS_TIMEOUT_S):
            second = await trio.run_process(
                [CSP_WEB, "serve", "--socket", os.path.join(sock_dir, "b.sock"), "--no-stdin"],
                stdin=subprocess.DEVNULL,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                env=env,
            )
        assert second.returncode == 2
        assert second.stdout == b""
        assert second.stderr.decode() == (
            f"csp-web: state dir {state_dir} is in use by another csp-web daemon"
            f" (pid {first.pid}); give each daemon its own daemon.state_dir\n"
        )
        assert not os.path.exists(os.path.join(sock_dir, "b.sock"))  # it opened nothing
        async with open_client(os.path.join(sock_dir, "a.sock")) as client:  # the first goes on
            assert (await client.call(Task("ping", "SYS", "PONG"), timeout_s=10)).status is (
                Status.OK
            )
    finally:
        assert await _stop(first, signal.SIGTERM) == 0


async def test_kill_9_of_the_holder_frees_the_state_dir_for_the_next_daemon(
    tmp_path: Path, sock_dir: str
) -> None:
    env = _env(str(tmp_path / "xdg"))
    first_socket, second_socket = (os.path.join(sock_dir, name) for name in ("a.sock", "b.sock"))
    first = await _start(first_socket, env, str(tmp_path / "first.log"))
    assert await _stop(first, signal.SIGKILL) == -signal.SIGKILL
    lock_path = tmp_path / "xdg" / "csp-web" / LOCK_FILE
    # The file stays (the lock went with its holder), naming the holder and its socket.
    assert lock_path.read_text() == f"{first.pid}\n{first_socket}\n"
    second = await _start(second_socket, env, str(tmp_path / "second.log"))
    assert lock_path.read_text() == f"{second.pid}\n{second_socket}\n"
    assert await _stop(second, signal.SIGTERM) == 0
    assert lock_path.read_text() == ""  # a daemon that stopped names no socket


def test_the_lock_is_exclusive_until_released(tmp_path: Path) -> None:
    state_dir = str(tmp_path / "new" / "state")
    with hold_state_dir(state_dir) as path:
        assert os.stat(os.path.dirname(path)).st_mode & 0o777 == 0o700
        with pytest.raises(StateDirBusy) as caught, hold_state_dir(state_dir):
            pass
        assert (caught.value.state_dir, caught.value.pid) == (state_dir, os.getpid())
    with hold_state_dir(state_dir):  # released: taken again
        pass


def test_a_holder_that_wrote_no_pid_yet_is_still_named(tmp_path: Path) -> None:
    with hold_state_dir(str(tmp_path)) as path:
        Path(path).write_text("")
        with pytest.raises(StateDirBusy) as caught, hold_state_dir(str(tmp_path)):
            pass
    assert caught.value.pid is None
    assert "a process that wrote no pid" in str(caught.value)
