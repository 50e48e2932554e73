"""Real processes for the node tests: a ``csp-web serve`` daemon, reference nodes, Xvfb, a
private D-Bus session bus with the stand-in notification server. Readiness is read from each
child's own output (no polling); every child is killed on exit if still running."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import trio
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
WAIT_S = 60.0  # generous: the machine is shared and a child imports the whole daemon


class Child:
    """A child process whose output (stderr, or stdout) is read line by line."""

    def __init__(self, process: trio.Process, stream: trio.abc.ReceiveStream | None) -> None:
        self.process = process
        self.stream = stream
        self.buffer = b""
        self.lines: list[str] = []

    async def wait_for(self, pattern: str) -> re.Match[str]:
        """The first line from now on matching ``pattern``; AssertionError at EOF."""
        regex = re.compile(pattern)
        assert self.stream is not None, "this child's output is not read"
        with trio.fail_after(WAIT_S):
            while True:
                while b"\n" in self.buffer:
                    raw, self.buffer = self.buffer.split(b"\n", 1)
                    line = raw.decode("utf-8", "replace")
                    self.lines.append(line)
                    if match := regex.search(line):
                        return match
                data = await self.stream.receive_some(65536)
                if not data:
                    raise AssertionError(f"EOF before {pattern!r}: {self.lines[-20:]}")
                self.buffer += data

    async def wait(self) -> int:
        with trio.fail_after(WAIT_S):
            return await self.process.wait()

    def kill_group(self) -> None:
        """SIGKILL the child and whatever it started (it leads its own session)."""
        if self.process.returncode is None:
            os.killpg(self.process.pid, signal.SIGKILL)


@asynccontextmanager
async def child(
    argv: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    read: str = "stderr",
    pass_fds: Sequence[int] = (),
) -> AsyncIterator[Child]:
    stdout = subprocess.PIPE if read == "stdout" else subprocess.DEVNULL
    stderr = subprocess.PIPE if read == "stderr" else subprocess.DEVNULL
    process = await trio.lowlevel.open_process(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        env={**os.environ, "PYTHONPATH": REPO, **(env or {})},
        start_new_session=True,
        pass_fds=pass_fds,
    )
    stream = process.stdout if read == "stdout" else process.stderr
    try:
        yield Child(process, stream)
    finally:
        if process.returncode is None:
            os.killpg(process.pid, signal.SIGKILL)
        with trio.CancelScope(shield=True), trio.move_on_after(10):
            await process.wait()
        if stream is not None:
            await stream.aclose()


def csp_web(*args: str) -> list[str]:
    return [sys.executable, "-m", "csp_web", *args]


def write_config(directory: str, nodes: dict[str, object]) -> str:
    """A config with state, client socket and node socket under ``directory``."""
    settings = {
        "daemon": {"state_dir": os.path.join(directory, "state")},
        "socket": {"path": os.path.join(directory, "run", "csp.sock")},
        "nodes": {"socket_path": os.path.join(directory, "run", "nodes.sock"), **nodes},
    }
    path = os.path.join(directory, "config.yaml")
    with open(path, "w", encoding="utf-8") as file:
        yaml.safe_dump(settings, file)
    return path


@asynccontextmanager
async def daemon_process(config_path: str) -> AsyncIterator[Child]:
    async with child(csp_web("serve", "--no-stdin", "--config", config_path)) as proc:
        await proc.wait_for(r"csp-web \S+ ready")
        yield proc


async def run_cli(
    *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """``csp-web args``; ``env`` (default: this process's) with PYTHONPATH set."""
    with trio.fail_after(WAIT_S):
        return await trio.run_process(
            csp_web(*args),
            check=False,
            capture_stdout=True,
            capture_stderr=True,
            env={**(os.environ if env is None else env), "PYTHONPATH": REPO},
        )


@asynccontextmanager
async def xvfb() -> AsyncIterator[str]:
    """A virtual X display; yields its name (``:N``) once Xvfb says it is ready."""
    read_end, write_end = os.pipe()
    try:
        argv = [
            "Xvfb",
            "-displayfd",
            str(write_end),
            "-nolisten",
            "tcp",
            "-screen",
            "0",
            "320x240x24",
        ]
        async with child(argv, read="none", pass_fds=(write_end,)) as proc:
            os.close(write_end)
            write_end = -1
            stream = trio.lowlevel.FdStream(read_end)
            read_end = -1
            reader = Child(proc.process, stream)
            match = await reader.wait_for(r"^(\d+)$")
            yield f":{match[1]}"
            await stream.aclose()
    finally:
        for fd in (read_end, write_end):
            if fd >= 0:
                os.close(fd)


@asynccontextmanager
async def session_bus(directory: str) -> AsyncIterator[str]:
    """A private D-Bus session bus; yields its address."""
    address = f"unix:path={os.path.join(directory, 'bus')}"
    argv = ["dbus-daemon", "--session", "--nofork", "--nopidfile", "--print-address=1"]
    async with child([*argv, f"--address={address}"], read="stdout") as bus:
        match = await bus.wait_for(r"^(unix:\S+)$")
        yield match[1]
