"""The PNG files a reply names, as MCP image content (SDK-free).

A browser screenshot (``SCREENSHOT_REF``) or canvas snapshot (``SNAPSHOT_REF``) is written
by the daemon under its state directory and named by path; an MCP client wants the picture
itself, so the face reads each file a known field names and passes it on base64-encoded,
beside the path. Any op whose reply carries one of these fields gets the same, so a new
browser action that saves a PNG needs no change here.
"""

from __future__ import annotations

import base64
import logging
import os
import stat
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import trio

log = logging.getLogger(__name__)

# Reply fields that name a PNG the daemon saved (browser screenshot, canvas snapshot).
PNG_FIELDS = ("SCREENSHOT_REF", "SNAPSHOT_REF")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# The browser's own cap on a screenshot (browser.max_screenshot_bytes, 8 MiB) with room to
# spare: a bigger file is not one the daemon made, and is named by path only.
MAX_IMAGE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Image:
    """One image for the result: base64 ``data`` and its ``mime_type``."""

    data: str
    mime_type: str = "image/png"


async def images_of(structured: Mapping[str, Any], declared: Collection[str]) -> list[Image]:
    """The PNGs the fields of ``structured`` name, in field order, for the PNG fields its op
    ``declared`` (a field an op relays from elsewhere is never read as a path); a path that
    is not a readable PNG of at most MAX_IMAGE_BYTES is skipped (logged): the result still
    names it."""
    paths: list[str] = []
    for name in (name for name in PNG_FIELDS if name in declared):
        value = structured.get(name)
        paths += value if isinstance(value, list) else [value] if isinstance(value, str) else []
    images = []
    for path in paths:
        data = await trio.to_thread.run_sync(read_png, path)
        if data is not None:
            images.append(Image(base64.b64encode(data).decode("ascii")))
    return images


def read_png(path: str) -> bytes | None:
    """The PNG at ``path``, or None (logged) when it is no regular file (a symlink is not
    followed, a FIFO not waited on), is larger than MAX_IMAGE_BYTES, cannot be read, or does
    not start with the PNG signature."""
    try:
        data = _read_regular(path)
    except OSError as exc:
        log.warning("image %s not attached: %s", path, exc.strerror or exc)
        return None
    if data is None or not data.startswith(PNG_SIGNATURE):
        log.warning(
            "image %s not attached: not a PNG file of at most %d bytes", path, MAX_IMAGE_BYTES
        )
        return None
    return data


def _read_regular(path: str) -> bytes | None:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_IMAGE_BYTES:
            return None
        chunks, size = [], 0
        while size <= MAX_IMAGE_BYTES and (chunk := os.read(fd, 1 << 20)):
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks) if size <= MAX_IMAGE_BYTES else None
