"""One daemon owns a state directory: ``hold_state_dir`` keeps an exclusive lock on it for the
daemon's life, so two daemons never fire the same cron run or write back each other's jobs.

The lock file also says where the holder can be reached: its pid on the first line and, for a
daemon that serves a socket, the socket's path on the second (``served_socket``), so a client
command run by the same user (``csp-web nodes approve``) finds the running daemon without
being told its socket."""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

from csp_web.core.api.storage import is_storage_full

log = logging.getLogger(__name__)

LOCK_FILE = "daemon.lock"
# A pid line and a socket path (under 108 bytes, sun_path's size): more is not ours to read.
MAX_LOCK_BYTES = 4096


class StateDirBusy(Exception):
    """Another process holds the state directory's lock (``pid`` None: it wrote none yet)."""

    def __init__(self, state_dir: str, pid: int | None) -> None:
        super().__init__(state_dir, pid)
        self.state_dir = state_dir
        self.pid = pid

    def __str__(self) -> str:
        holder = f"pid {self.pid}" if self.pid is not None else "a process that wrote no pid"
        return (
            f"state dir {self.state_dir} is in use by another csp-web daemon ({holder});"
            " give each daemon its own daemon.state_dir"
        )


@contextmanager
def hold_state_dir(state_dir: str, *, socket_path: str | None = None) -> Iterator[str]:
    """Hold an exclusive lock on ``state_dir`` (made 0700 if missing) until the block ends;
    yields the lock file's path. Raises StateDirBusy naming the holder's pid, OSError when
    the directory cannot be used. ``socket_path``, the socket the holder serves, is recorded
    beside its pid while the block runs.

    The lock is an flock on ``<state_dir>/daemon.lock``, taken without waiting: the kernel
    drops it when its holder exits however it exits (kill -9 included), so a stale file never
    blocks a start. The descriptor is close-on-exec: commands and MCP servers never inherit it.
    """
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    path = os.path.join(state_dir, LOCK_FILE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StateDirBusy(state_dir, _lock_holder(fd)) from None
        served = None if socket_path is None else os.path.abspath(socket_path)
        _write_holder(fd, state_dir, served)
        try:
            yield path
        finally:  # a stopped daemon is no longer reached there
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)


def _write_holder(fd: int, state_dir: str, socket_path: str | None) -> None:
    """Write our pid, and the socket we serve, into the held lock file: they only name the
    holder (StateDirBusy, ``served_socket``), so a full disk (SPEC O-6) leaves it empty
    rather than stopping the start."""
    os.ftruncate(fd, 0)
    lines = [str(os.getpid())] if socket_path is None else [str(os.getpid()), socket_path]
    try:
        os.pwrite(fd, "".join(f"{line}\n" for line in lines).encode(), 0)
    except OSError as exc:
        if not is_storage_full(exc):
            raise
        log.warning("state dir %s: disk full, the lock file names no pid", state_dir)


def _lock_holder(fd: int) -> int | None:
    text = os.pread(fd, 32, 0).decode("ascii", "replace").partition("\n")[0].strip()
    return int(text) if text.isdigit() else None


def served_socket(state_dir: str) -> str | None:
    """The socket the daemon holding ``state_dir`` said it serves, or None: no lock file, a
    holder that serves none, or one that has stopped. Never locks: a daemon starting now is
    never refused because a client looked. A daemon killed with SIGKILL leaves its line: the
    caller's connect then fails as it would for any socket nobody serves."""
    try:
        with open(os.path.join(state_dir, LOCK_FILE), "rb") as file:
            head = file.read(MAX_LOCK_BYTES)
    except OSError:  # none yet, or unreadable: no daemon we can name
        return None
    lines = head.decode("utf-8", "replace").split("\n")
    return lines[1] if len(lines) > 2 and lines[1].startswith("/") else None
