"""Writing a fileKey's content to a file (seed 004's writeFile), under the exec workspace roots.

The path is checked and its directory opened as for every op that touches a workspace file
(``csp_web.infra.workspace_paths``: roots, exec's masked paths and the daemon's own files,
/proc, /sys, /dev, no symlink on the way), and the file is created in it by descriptor with
``O_NOFOLLOW``: a symlink swapped in after the check cannot lead the write out of the root.
An existing file is ``file_exists`` unless OVERWRITE; content past ``cabinet.max_file_bytes``
is ``too_large``.
"""

from __future__ import annotations

import os

from csp_web.core.api.errors import OpError
from csp_web.infra.workspace_paths import WorkspacePath, open_directory
from protocol import ErrorCode

FILE_MODE = 0o644


def write_file(target: WorkspacePath, data: bytes, *, max_bytes: int, overwrite: bool) -> str:
    """Write ``data`` at ``target``; returns the file's real path. Blocking: run it in a
    thread. Raises OpError: TOO_LARGE, FILE_EXISTS, INVALID_FIELD, PERMISSION_DENIED."""
    if len(data) > max_bytes:
        detail = f"{len(data)} bytes; cabinet.max_file_bytes is {max_bytes}"
        raise OpError(ErrorCode.TOO_LARGE, detail)
    fd = open_directory(target)
    try:
        _write_at(fd, target, data, overwrite=overwrite)
    finally:
        os.close(fd)
    return target.path


def _write_at(dir_fd: int, target: WorkspacePath, data: bytes, *, overwrite: bool) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    flags |= os.O_TRUNC if overwrite else os.O_EXCL
    try:
        fd = os.open(target.name, flags, FILE_MODE, dir_fd=dir_fd)
    except FileExistsError:
        raise OpError(ErrorCode.FILE_EXISTS, target.shown) from None
    except IsADirectoryError:
        raise OpError(ErrorCode.INVALID_FIELD, "PATH names a directory") from None
    except OSError as exc:  # ELOOP: the name is a symlink; EACCES and the like
        raise target.denied() from exc
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
