"""One daemon owns a state directory: ``hold_state_dir`` keeps an exclusive lock on it for the
daemon's life, so two daemons never fire the same cron run or write back each other's jobs."""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

from csp_web.core.api.storage import is_storage_full

log = logging.getLogger(__name__)

LOCK_FILE = "daemon.lock"


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
def hold_state_dir(state_dir: str) -> Iterator[str]:
    """Hold an exclusive lock on ``state_dir`` (made 0700 if missing) until the block ends;
    yields the lock file's path. Raises StateDirBusy naming the holder's pid, OSError when
    the directory cannot be used.

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
        _write_pid(fd, state_dir)
        yield path
    finally:
        os.close(fd)


def _write_pid(fd: int, state_dir: str) -> None:
    """Write our pid into the held lock file: it only names the holder in StateDirBusy, so a
    full disk (SPEC O-6) leaves it empty rather than stopping the start."""
    os.ftruncate(fd, 0)
    try:
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError as exc:
        if not is_storage_full(exc):
            raise
        log.warning("state dir %s: disk full, the lock file names no pid", state_dir)


def _lock_holder(fd: int) -> int | None:
    text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None
