"""Screenshots and snapshots on disk: ``<state_dir>/media`` (0700), random names, retention.

A file is written whole under a temporary name and renamed, so a path in a reply always
names a complete PNG. After each write the folder is trimmed: files older than
``max_age_s`` go, then the oldest until the total fits ``max_bytes``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time

import trio

from csp_web.core.api.errors import StorageFull
from csp_web.core.api.storage import storage_seam


class MediaStore:
    """The media folder; made (0700) on first use."""

    def __init__(self, directory: str, *, max_bytes: int, max_age_s: float) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.removed = 0
        self.storage_full = False  # the last save found the disk full (SPEC O-6)

    def _ensure(self) -> None:
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        os.chmod(self.directory, 0o700)

    def save_sync(self, prefix: str, data: bytes) -> str:
        """Write ``data`` as ``<prefix>-<random>.png``; returns its absolute path. Raises
        StorageFull("media") when the disk is full, leaving no partial file behind."""
        name = f"{prefix}-{secrets.token_hex(12)}.png"
        path = os.path.join(os.path.abspath(self.directory), name)
        tmp = f"{path}.tmp"
        try:
            with storage_seam("media"):
                self._ensure()
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as file:
                    file.write(data)
                os.replace(tmp, path)
        except StorageFull:
            self.storage_full = True
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        self.storage_full = False
        self.trim_sync(keep=path)
        return path

    async def save(self, prefix: str, data: bytes) -> str:
        return await trio.to_thread.run_sync(self.save_sync, prefix, data)

    def trim_sync(self, *, keep: str | None = None, now: float | None = None) -> None:
        """Apply the age bound, then the size bound (oldest first); never removes ``keep``."""
        entries = []
        for entry in os.scandir(self.directory):
            if entry.is_file() and entry.name.endswith(".png"):
                stat = entry.stat()
                entries.append((stat.st_mtime, stat.st_size, entry.path))
        entries.sort()
        cutoff = (now if now is not None else time.time()) - self.max_age_s
        total = sum(size for _, size, _ in entries)
        for mtime, size, path in entries:
            if path == keep:
                continue
            if mtime < cutoff or total > self.max_bytes:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                total -= size
                self.removed += 1
