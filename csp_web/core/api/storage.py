"""A full disk, told apart from other storage errors at each seam that writes (SPEC O-6).

SQLite says ``SQLITE_FULL`` ("database or disk is full") when a write finds no space, the OS
``ENOSPC`` or ``EDQUOT`` (a quota). Each store's writes run inside ``storage_seam(which)``,
which turns those into ``StorageFull(which)``, so the reply layer answers
``FAIL storage_full:<which>`` and the daemon carries on; any other error passes unchanged.
"""

from __future__ import annotations

import errno
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from csp_web.core.api.errors import StorageFull

_SQLITE_FULL = 13  # the primary code: the low byte of any extended one
_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_storage_full(exc: BaseException) -> bool:
    """Whether ``exc`` says a disk or quota is full."""
    if isinstance(exc, StorageFull):
        return True
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        return code is not None and code & 0xFF == _SQLITE_FULL
    return isinstance(exc, OSError) and exc.errno in _NO_SPACE


@contextmanager
def storage_seam(which: str) -> Iterator[None]:
    """Raise ``StorageFull(which)`` in place of a full-disk error from the block."""
    try:
        yield
    except (sqlite3.Error, OSError) as exc:
        if is_storage_full(exc):
            raise StorageFull(which) from exc
        raise
