"""The diskcache ``Disk`` the daemon uses: JSON in, JSON out, never pickle (CVE-2025-69872).

diskcache's ``JSONDisk`` writes JSON, but reads whatever a row says it holds: a row set to
mode 4 (``MODE_PICKLE``), or a key with ``raw = 0``, is unpickled, so anyone who can write to
the cache database can run code in the daemon when that entry is read. A row's ``filename`` is
trusted too: joined to the directory, an absolute or ``..`` name would be read into a reply or
deleted. ``SafeJSONDisk`` refuses all three: such a row raises ``UnsafeCacheRow``, which the
cache turns into a logged miss that drops the row (cache.py); a removal of such a name is
skipped.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import diskcache

log = logging.getLogger(__name__)

MODE_PICKLE = 4  # diskcache.core.MODE_PICKLE
# The only names ``Disk.filename`` makes: two hex sub-folders and 28 hex digits.
_FILE_NAME = re.compile(r"[0-9a-f]{2}/[0-9a-f]{2}/[0-9a-f]{28}\.val")


class UnsafeCacheRow(Exception):
    """A cache row this Disk never writes: a pickle, or a file outside the cache directory.

    Not an OSError: diskcache reads an OSError from ``fetch`` as "file already deleted" and
    swallows it, and the row would stay for the next read."""


class SafeJSONDisk(diskcache.JSONDisk):  # type: ignore[misc]
    """``JSONDisk`` that never unpickles a value or a key, nor follows a foreign file name."""

    def get(self, key: Any, raw: bool) -> Any:
        if not raw:  # JSONDisk.put always stores keys raw (compressed JSON bytes)
            raise UnsafeCacheRow("a cache key stored as a pickle")
        return super().get(key, raw)

    def fetch(self, mode: int, filename: str | None, value: Any, read: bool) -> Any:
        if mode == MODE_PICKLE:
            raise UnsafeCacheRow("a cache value stored as a pickle")
        if filename is not None and not _FILE_NAME.fullmatch(filename):
            raise UnsafeCacheRow(f"a cache value in a file not its own: {filename!r}")
        return super().fetch(mode, filename, value, read)

    def remove(self, file_path: str) -> None:
        if not _FILE_NAME.fullmatch(file_path):
            log.warning("cache row names a file not its own, left alone: %r", file_path)
            return
        super().remove(file_path)
