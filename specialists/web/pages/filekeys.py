"""fileKeys: a short, stable handle for one fetched content snapshot (seed 004's fetchUrl).

    key = file_key(page)            # "fk_" + 16 base32 characters of SHA-256(url, content)
    await hold(services, key, page) # the snapshot, under the fetch cache's TTL
    page = await held(services, key)

The key is derived from the final URL and the page's content, so the same content at the same
URL always gets the same key, and changed content a new one. The snapshot is kept in the cache
namespace ``filekey`` as long as fetched pages are (``cache.fetch_ttl_s``; one handed out by a
fetch lives half of that at least), so START paging and later ops read exactly what the fetch
read, even when the page has changed since.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
from typing import Any

from csp_web.core.api.errors import OpError
from protocol import ErrorCode, Field, Status

from .loading import Page, from_snapshot, to_snapshot
from .services import PagesServices

NAMESPACE = "filekey"
PATTERN = re.compile(r"fk_[a-z2-7]{16}")
CHARS_PER_TOKEN = 4  # seed 000: "Max 2000 tokens per fetch (~8000 chars)"


def content_of(page: Page) -> str:
    """The page's main view: Markdown for HTML and documents, the decoded body for JSON and
    text."""
    return page.markdown if page.kind in ("html", "document") else page.text


def file_key(page: Page) -> str:
    """The fileKey of ``page``'s snapshot: ``fk_`` and 16 lower-case base32 characters."""
    digest = hashlib.sha256(f"{page.url}\0{content_of(page)}".encode()).digest()
    # 16 base32 characters are the digest's first 80 bits, 10 bytes: base64's pure-Python
    # b32encode of those alone takes 6.6 us, of the whole digest 16 (issue 26).
    return "fk_" + base64.b32encode(digest[:10]).decode("ascii").lower()


def token_estimate(text: str) -> int:
    """About how many model tokens ``text`` is: one per four characters, rounded up."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def window(content: str, start: int, max_chars: int) -> tuple[str, list[Field], Status]:
    """``max_chars`` of ``content`` from ``start``, the fields that say where it lies, and OK,
    or PARTIAL with NEXT_START and REMAINING_CHARS when more follows (fetch and read_file)."""
    end = min(len(content), start + max_chars)
    text = content[start:end]
    fields: list[Field] = [
        ("CONTENT_LENGTH", str(len(content))),
        ("TOKENS", str(token_estimate(text))),
        ("TRUNCATED", "true" if end < len(content) else "false"),
    ]
    if end == len(content):
        return text, fields, Status.OK
    fields += [("NEXT_START", str(end)), ("REMAINING_CHARS", str(len(content) - end))]
    return text, fields, Status.PARTIAL


async def hold(services: PagesServices, key: str, page: Page) -> None:
    """Keep ``page`` under ``key`` for ``cache.fetch_ttl_s``: written when the cache's memory
    tier does not already hold this snapshot for half of that or more (``cache.keep``), so a
    fetch answered from the cache writes nothing, and a fileKey it hands out lives
    ``cache.fetch_ttl_s / 2`` at least."""
    ttl_s = services.config.cache.fetch_ttl_s
    await services.cache.keep(NAMESPACE, key, to_snapshot(page), ttl_s=ttl_s)


def holds(services: PagesServices, key: str, snapshot: dict[str, Any]) -> bool:
    """Whether ``hold`` of the page whose ``to_snapshot`` is ``snapshot`` would write nothing
    now: the memory tier holds it under ``key`` for long enough (a peek, for fetch's hot
    route, which keeps each page's snapshot)."""
    ttl_s = services.config.cache.fetch_ttl_s
    return services.cache.holds(NAMESPACE, key, snapshot, ttl_s=ttl_s)


async def held(services: PagesServices, key: str) -> Page:
    """The snapshot ``key`` names; raises OpError(INVALID_FIELD) for a malformed key and
    OpError(UNKNOWN_FILE_KEY) for one not held (expired, or never fetched here)."""
    check(key)
    page = from_snapshot(await services.cache.get(NAMESPACE, key))
    if page is None or file_key(page) != key:
        raise OpError(ErrorCode.UNKNOWN_FILE_KEY, key, fields=(("FILE_KEY", key),))
    return page


def check(key: str) -> None:
    """Raise OpError(INVALID_FIELD) unless ``key`` has a fileKey's shape."""
    if not PATTERN.fullmatch(key):
        raise OpError(ErrorCode.INVALID_FIELD, "FILE_KEY must be fk_ and 16 of [a-z2-7]")
