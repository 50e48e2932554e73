"""Captures on disk, kept under two bounds: the browser's screenshots and snapshots, the
nodes' photos and clips. One folder per store (0700), files 0600 with random names.

A file is written whole under a temporary name and renamed, so a path in a reply always
names a complete file. After each write the folder is trimmed: files older than
``max_age_s`` go, then the oldest until the total fits ``max_bytes``; the file just written
stays, whatever its size. Only names the store writes (``<stem>-<24 hex>.<extension>``, one of
its extensions) are trimmed: a folder a user points a store at keeps whatever else is there.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import time
from collections.abc import Iterable

import trio

from csp_web.core.api.errors import StorageFull
from csp_web.core.api.storage import storage_seam

_TAIL_BYTES = 12  # 24 hex digits: a name nobody guesses, and one a user's file hardly has


class MediaStore:
    """One media folder; made (0700) on first write. ``storage_full``: the last write found
    the disk full (SPEC O-6); ``removed``: files trimmed so far."""

    def __init__(
        self,
        directory: str,
        *,
        max_bytes: int,
        max_age_s: float,
        extensions: Iterable[str] = ("png",),
    ) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.extensions = frozenset(extensions)
        alternatives = "|".join(sorted(map(re.escape, self.extensions)))
        self._ours = re.compile(rf".+-[0-9a-f]{{{2 * _TAIL_BYTES}}}\.(?:{alternatives})")
        self.removed = 0
        self.storage_full = False

    def _ensure(self) -> None:
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        os.chmod(self.directory, 0o700)

    def save_sync(self, stem: str, data: bytes, *, extension: str = "png") -> str:
        """Write ``data`` as ``<stem>-<random>.<extension>``; returns its absolute path, then
        trims the folder. Raises StorageFull("media") when the disk is full, leaving no
        partial file behind; ValueError for an extension the store does not trim."""
        if extension not in self.extensions:
            raise ValueError(f"media: .{extension} is not one of {sorted(self.extensions)}")
        name = f"{stem}-{secrets.token_hex(_TAIL_BYTES)}.{extension}"
        path = os.path.join(os.path.abspath(self.directory), name)
        tmp = f"{path}.tmp"
        try:
            with storage_seam("media"):
                self._ensure()
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
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

    async def save(self, stem: str, data: bytes, *, extension: str = "png") -> str:
        """``save_sync`` in a worker thread."""
        return await trio.to_thread.run_sync(
            lambda: self.save_sync(stem, data, extension=extension)
        )

    def trim_sync(self, *, keep: str | None = None, now: float | None = None) -> None:
        """Apply the age bound, then the size bound (oldest first) to the files the store
        wrote; never removes ``keep``."""
        entries = []
        for entry in os.scandir(self.directory):
            if entry.is_file(follow_symlinks=False) and self._ours.fullmatch(entry.name):
                stat = entry.stat(follow_symlinks=False)
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
