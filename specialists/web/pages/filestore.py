"""The ``FileStore`` port (csp_web.core.api.ports) on web's fileKeys: files (the browser's
downloads, next) kept under a fileKey beside the page snapshots, for ``cache.fetch_ttl_s`` as
they are.

    key = await store.put(body, url=url, name="report.pdf", content_type="application/pdf")
    stored = await store.get(key)

A file's key has a page key's shape (``fk_`` and 16 base32 characters, here of SHA-256 over
the URL and the bytes) in a cache namespace of its own, ``file``: a page's key never reads a
file's snapshot, nor the reverse. The bytes are kept as base64 in the cache's JSON (the cache
never pickles); a snapshot whose bytes no longer hash to its key reads as unknown.

A put either keeps the file or raises: ``too_large`` (``over:<n>``) for a file whose stored
form passes a third of ``cache.size_limit_bytes`` (a larger one would evict most of what
the cache holds, pages and other files alike; a third keeps a 50 MiB download, the
browser's default cap, in the default 256 MiB cache), ``storage_full`` when the cache's write
found its disk full (the cache itself skips such a write silently: for a page that is only
a lost optimisation, for a file it is the only copy).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Any

from csp_web.core.api.errors import OpError, StorageFull
from csp_web.core.api.ports import StoredFile
from protocol import ErrorCode

from .filekeys import check
from .services import PagesServices

NAMESPACE = "file"
SNAPSHOT_VERSION = 1  # bump when the stored shape changes: older snapshots then read as unknown


class CacheFileStore:
    """Files in ``services``' response cache (disk, or the fleet's Redis with redis.url)."""

    def __init__(self, services: PagesServices) -> None:
        self._services = services

    async def put(self, body: bytes, *, url: str, name: str, content_type: str) -> str:
        """See ``csp_web.core.api.ports.FileStore.put``. Raises too_large past
        ``max_file_bytes``, StorageFull("cache") when the write was not kept."""
        limit = max_file_bytes(self._services.config.cache.size_limit_bytes)
        if len(body) > limit:
            raise OpError(ErrorCode.TOO_LARGE, f"over:{limit}")
        key = file_key(url, body)
        value = {
            "v": SNAPSHOT_VERSION,
            "url": url,
            "name": name,
            "content_type": content_type,
            "body": base64.b64encode(body).decode("ascii"),
        }
        ttl_s = self._services.config.cache.fetch_ttl_s
        cache = self._services.cache
        await cache.set(NAMESPACE, key, value, ttl_s=ttl_s)
        if cache.storage_full:  # set skipped the disk: nothing durable holds the file
            raise StorageFull("cache")
        return key

    async def get(self, key: str) -> StoredFile:
        """See ``csp_web.core.api.ports.FileStore.get``."""
        check(key)
        stored = _from_snapshot(key, await self._services.cache.get(NAMESPACE, key))
        if stored is None or file_key(stored.url, stored.body) != key:
            raise OpError(ErrorCode.UNKNOWN_FILE_KEY, key, fields=(("FILE_KEY", key),))
        return stored


def max_file_bytes(size_limit_bytes: int) -> int:
    """The largest file kept: one whose base64 (4 characters per 3 bytes) fits in a
    third of the cache, less 1 KiB for the rest of its row."""
    return max(0, (size_limit_bytes // 3 - 1024) // 4 * 3)


def file_key(url: str, body: bytes) -> str:
    """The fileKey of ``body`` read from ``url``."""
    digest = hashlib.sha256(url.encode() + b"\0" + body).digest()
    return "fk_" + base64.b32encode(digest).decode("ascii")[:16].lower()


def _from_snapshot(key: str, data: Any) -> StoredFile | None:
    if not isinstance(data, dict) or data.get("v") != SNAPSHOT_VERSION:
        return None
    texts = [data.get(name) for name in ("url", "name", "content_type", "body")]
    if not all(isinstance(text, str) for text in texts):
        return None
    url, name, content_type, body = (str(text) for text in texts)
    try:
        raw = base64.b64decode(body, validate=True)
    except binascii.Error:
        return None
    return StoredFile(key, url, name, content_type, raw)
