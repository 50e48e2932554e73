"""Reading a file under the exec workspace roots for ``ACTION upload PATH``.

The path is checked and its directory opened as for every op that touches a workspace file
(``csp_web.infra.workspace_paths``: roots, masks, /proc, /sys, /dev, no symlink on the way).
The file is opened in it with ``O_NOFOLLOW`` (a symlink, even one pointing inside, is
``permission_denied``) and ``O_NONBLOCK`` (a FIFO cannot hold the open); only a regular file
is read (a directory, device or FIFO is ``invalid_field``, as is a name too long), and no
more than ``max_bytes`` of it (``too_large``).

A daemon running as root reads with the rights of exec's sandbox uid (``reader_of``): the
upload sends the page only what ``exec cat`` of the path could print; anything else is
``permission_denied``, judged on the opened descriptors (``workspace_paths.Identity``).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence

from csp_web.config import Config, workspace_identity
from csp_web.core.api.errors import OpError
from csp_web.infra.workspace_paths import Identity, WorkspacePath, check_path, open_directory
from protocol import ErrorCode

_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_SCOPE = ("browser",)


def reader_of(config: Config) -> Identity | None:
    """Whose rights an upload reads with: exec's sandbox uid and gid when the daemon runs as
    root (as its commands do, ``tool.exec.run_as_uid``), else None: the daemon's own, which
    are then no more than a command's."""
    if os.geteuid() != 0:
        return None
    identity = workspace_identity(config)
    return None if identity is None else Identity(*identity)


def read_workspace_file(
    roots: Sequence[str],
    path: str,
    *,
    max_bytes: int,
    masked: Sequence[str] = (),
    reader: Identity | None = None,
) -> bytes:
    """The bytes of the regular file at ``path`` under one of ``roots``, not under one of
    ``masked``, that ``reader`` (None: this process) may read. Blocking: run it in a thread.
    Raises OpError as the module says."""
    place = check_path(roots, path, masked=masked, user="upload PATH", scope=_SCOPE)
    fd = open_directory(place, reader=reader)
    try:
        return _read_at(fd, place, max_bytes, reader)
    finally:
        os.close(fd)


def _read_at(dir_fd: int, place: WorkspacePath, max_bytes: int, reader: Identity | None) -> bytes:
    try:
        fd = os.open(place.name, _FILE_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise OpError(ErrorCode.INVALID_FIELD, "PATH does not exist") from None
    except OSError as exc:  # ELOOP: the name is a symlink; EACCES, ENXIO and the like
        if exc.errno == errno.ENAMETOOLONG:
            raise place.too_long() from None
        raise place.denied() from None
    try:
        info = os.fstat(fd)  # the file opened, not whatever the name means by now
        if not stat.S_ISREG(info.st_mode):
            raise OpError(ErrorCode.INVALID_FIELD, "PATH is not a regular file")
        if reader is not None and not reader.may_read(info):
            raise place.denied()
        return _read_capped(fd, max_bytes)
    finally:
        os.close(fd)


def _read_capped(fd: int, max_bytes: int) -> bytes:
    """At most ``max_bytes`` of ``fd``; one more (the file is larger, or grew) is too_large."""
    chunks: list[bytes] = []
    left = max_bytes + 1
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        detail = f"PATH over {max_bytes} bytes (tool.browser.max_upload_bytes)"
        raise OpError(ErrorCode.TOO_LARGE, detail, scope=_SCOPE)
    return data
