"""``REQ:list IN:MEMORY OUT:PATHS``: the stored paths under a PREFIX, a page at a time (SPEC M-9).

    TASK REQ:list IN:MEMORY OUT:PATHS
    PREFIX notes/
    MAX_RESULTS 2

    STATUS OK
    SCOPE [memory]
    DATA paths:2
    PATH notes/a.md
    PATH notes/b.md
    NEXT_START notes/c.md

A page holds at most MAX_RESULTS paths (100 unless asked, ``MAX_RESULTS_CAP`` at most) and
at most ``PAGE_BYTES`` of PATH lines, in code point order; NEXT_START, when more remain, is
the first path left out: sent back as START it gives the next page.
"""

from __future__ import annotations

import json
import sys
import unicodedata
from dataclasses import dataclass

from csp_web.core.api.errors import FieldError
from csp_web.core.api.fields import FieldSpec
from csp_web.sink.store import SinkStore, check_path
from protocol import ErrorCode

MAX_PATH_CHARS = 1024  # a write's PATH cap (the sink's write fields)
# S3's ListObjectsV2 pages 1,000 keys at most; 100 by default keeps a shell listing short.
MAX_RESULTS_DEFAULT = 100
MAX_RESULTS_CAP = 1000
# Half of a frame's cap (SPEC L-2, 1 MiB), as a read's content is bounded (M-7): 1,000 paths
# of 1,024 escaped characters would be some 6 MB, past what a client reads in one frame.
PAGE_BYTES = 512 * 1024

FIELDS = (
    FieldSpec("PREFIX", max_chars=MAX_PATH_CHARS, doc="the paths' start (default: every path)"),
    FieldSpec("START", max_chars=MAX_PATH_CHARS, doc="the first path of the page: NEXT_START"),
    FieldSpec(
        "MAX_RESULTS",
        "int",
        default=MAX_RESULTS_DEFAULT,
        minimum=1,
        maximum=MAX_RESULTS_CAP,
        doc="paths on the page",
    ),
)

# Control characters (C0, DEL, C1), format characters (bidi overrides, zero-width ones) and
# the line and paragraph separators: none belongs in a path asked for, and each can hide or
# reorder what a terminal or a log shows.
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})


@dataclass(frozen=True)
class Page:
    """The paths of one page, and the first path left out (None: none is)."""

    paths: tuple[str, ...]
    next_start: str | None


def check_prefix(prefix: str) -> str:
    """``prefix`` if it can start a stored path: empty (every path), or whole parts and a
    last part that may be partial or empty (``notes/``), without ``..``, ``.``, a leading
    ``/``, a part starting with ``.`` or a control character. Raises OpError(invalid_field)."""
    if any(unicodedata.category(char) in _REFUSED_CATEGORIES for char in prefix):
        raise FieldError(ErrorCode.INVALID_FIELD, "PREFIX holds a control character")
    if prefix:
        check_path(prefix.removesuffix("/"), "PREFIX")
    return prefix


def check_start(start: str) -> str:
    """``start`` if it has a stored path's form (NEXT_START's); raises OpError(invalid_field).
    Control characters pass: a stored path may hold them, and NEXT_START names it."""
    return check_path(start, "START")


def list_page(
    store: SinkStore, prefix: str, start: str | None, limit: int, max_bytes: int = PAGE_BYTES
) -> Page:
    """The page of paths under ``prefix`` from ``start`` on: at most ``limit`` paths and
    ``max_bytes`` of PATH lines (one path at least)."""
    low = max(prefix, start or "")
    candidates = store.paths(low, prefix_end(prefix), limit + 1)
    taken: list[str] = []
    used = 0
    for path in candidates:
        cost = line_bytes(path)
        if len(taken) == limit or (taken and used + cost > max_bytes):
            return Page(tuple(taken), path)
        taken.append(path)
        used += cost
    return Page(tuple(taken), None)


def line_bytes(path: str) -> int:
    """An upper bound of the bytes of ``path``'s PATH line: its value written as an ASCII
    JSON string (no encoding of it is longer), the key, the space and the newline."""
    return len("PATH ") + len(json.dumps(path)) + 1


def prefix_end(prefix: str) -> str | None:
    """The least string above every string that starts with ``prefix`` (None: no string is
    above them all). Trailing U+10FFFF cannot be stepped past: the character before it is."""
    stripped = prefix.rstrip(chr(sys.maxunicode))
    if not stripped:
        return None
    after = ord(stripped[-1]) + 1
    if 0xD800 <= after <= 0xDFFF:  # surrogates are not characters a path holds
        after = 0xE000
    return stripped[:-1] + chr(after)
