"""The job file: one JSON document, replaced atomically on every change.

A write goes to a fresh 0600 temporary file beside the target, is fsynced, and takes the
target's name with ``os.replace`` (then the directory is fsynced), so a crash leaves either the
old file or the new one, never a torn one. Reading is strict: a file that does not parse is an
error naming its path, not an empty job list that the next write would make permanent.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import trio

VERSION = 1


class CronStoreError(ValueError):
    """The job file exists but cannot be read as a job list (``csp-web serve`` reports a
    ValueError at start-up as "cannot serve" and exits)."""


class CronStore:
    """The file at ``path``; ``save`` calls are serialised so the last change is the last write."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = trio.Lock()

    def load(self) -> list[dict[str, Any]]:
        """The stored jobs as JSON objects; [] when there is no file. Raises CronStoreError."""
        try:
            with open(self.path, encoding="utf-8") as file:
                document = json.load(file)
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            raise CronStoreError(f"{self.path}: {exc}") from exc
        if not isinstance(document, dict) or document.get("version") != VERSION:
            raise CronStoreError(f"{self.path}: not a version {VERSION} cron job file")
        jobs = document.get("jobs")
        if not isinstance(jobs, list) or not all(isinstance(job, dict) for job in jobs):
            raise CronStoreError(f"{self.path}: 'jobs' is not a list of objects")
        return jobs

    async def save(self, snapshot: Any) -> None:
        """Write the jobs ``snapshot()`` returns, taken once earlier saves are done."""
        async with self._lock:
            text = json.dumps({"version": VERSION, "jobs": snapshot()}, indent=1)
            await trio.to_thread.run_sync(write_atomic, self.path, text)


def write_atomic(path: str, text: str) -> None:
    """Replace ``path`` with ``text`` (mode 0600) so readers see the old or the new whole file."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".cron-", suffix=".tmp", dir=directory)  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
