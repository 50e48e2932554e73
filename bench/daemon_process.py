"""A csp-web daemon in its own process for the benches: ``python -m csp_web serve`` on a
temporary config and Unix socket, as a user runs it, so that a figure is a user's round trip
and the daemon's CPU can be read from /proc apart from the client's."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = REPO_ROOT / "csp_web" / "default_config.yaml"
START_S = 60.0  # generous: the machine is shared and the daemon imports every specialist


@dataclass(frozen=True)
class DaemonProcess:
    pid: int
    socket_path: str


def default_has(section: str, key: str) -> bool:
    """Whether the shipped config has ``section.key`` (``web.workers`` arrives with issue 26's
    worker pool: a bench sets it only where the daemon knows it)."""
    tree = yaml.safe_load(DEFAULT_CONFIG.read_text())
    return key in (tree.get(section) or {})


@contextmanager
def running_daemon(workdir: str, settings: dict[str, Any]) -> Iterator[DaemonProcess]:
    """``csp-web serve`` on ``settings`` (a partial config, merged over the defaults), serving
    ``workdir/csp.sock`` only, its log in ``workdir/daemon.log``; ready when yielded, stopped
    (SIGTERM, then SIGKILL of its process group) on exit."""
    config_path = os.path.join(workdir, "bench.yaml")
    with open(config_path, "w") as file:
        yaml.safe_dump(settings, file)
    socket_path = os.path.join(workdir, "csp.sock")
    command = [sys.executable, "-m", "csp_web", "serve", "--config", config_path]
    with open(os.path.join(workdir, "daemon.log"), "wb") as log:
        proc = subprocess.Popen(
            [*command, "--socket", socket_path, "--no-stdin"],
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,  # its worker processes stop with it
        )
    try:
        wait_for_socket(proc, socket_path, os.path.join(workdir, "daemon.log"))
        yield DaemonProcess(proc.pid, socket_path)
    finally:
        stop(proc)


def wait_for_socket(proc: subprocess.Popen[bytes], path: str, log_path: str) -> None:
    deadline = time.monotonic() + START_S
    while not os.path.exists(path):
        if time.monotonic() > deadline or proc.poll() is not None:
            with open(log_path, errors="replace") as log:
                tail = log.read()[-2000:]
            raise SystemExit(f"the daemon did not start:\n{tail}")
        time.sleep(0.05)
    wait_for_listener(path)


def wait_for_listener(path: str) -> None:
    """Until ``path`` accepts a connection: its file exists once bound, before listen()
    (scripts/bench hit ECONNREFUSED in bench/workers.py, then in bench/overload.py)."""
    deadline = time.monotonic() + START_S
    while True:
        with socket.socket(socket.AF_UNIX) as probe:
            try:
                probe.connect(path)
                return
            except ConnectionRefusedError:
                if time.monotonic() > deadline:
                    raise
        time.sleep(0.05)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    with suppress(subprocess.TimeoutExpired):
        proc.wait(30)
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # whatever it left behind
    proc.wait()


def _stat_fields(path: str) -> list[str]:
    with open(path) as file:
        return file.read().rpartition(")")[2].split()


def cpu_s(pid: int, tid: int | None = None) -> float:
    """User+system CPU seconds of process ``pid`` (all its threads), or of its thread ``tid``
    alone: per-op cost that other load on a shared machine does not inflate, unlike wall time."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    fields = _stat_fields(path)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of ``pid``, its children that it reaped, and its live descendants: the
    daemon with its worker processes."""
    ticks = 0
    for child in [pid, *descendants(pid)]:
        try:
            fields = _stat_fields(f"/proc/{child}/stat")
        except OSError:  # it ended meanwhile: its parent's reaped-children fields will hold it
            continue
        ticks += int(fields[11]) + int(fields[12])
        ticks += int(fields[13]) + int(fields[14])  # cutime, cstime: reaped children
    return ticks / os.sysconf("SC_CLK_TCK")


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid``, read from /proc/*/stat's parent field."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            parent = int(_stat_fields(f"/proc/{entry}/stat")[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(parent, []).append(int(entry))
    found, frontier = [], [pid]
    while frontier:
        children = parents.get(frontier.pop(), [])
        found += children
        frontier += children
    return found
