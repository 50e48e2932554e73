"""Writing a fileKey's content to a file (seed 004's writeFile), under the exec workspace roots.

The same roots and the same order of checks as exec's WORKING_DIR: no root configured is
``not_available``; a relative path or one holding NUL is ``invalid_field``; a path whose
directory resolves outside every root is ``permission_denied``, decided before anything about
its existence is told. The directory is then opened one component at a time from its root
without following any symlink, and the file is created in it by descriptor with
``O_NOFOLLOW``: a symlink swapped in after the check cannot lead the write out of the root.
An existing file is ``file_exists`` unless OVERWRITE; content past ``cabinet.max_file_bytes``
is ``too_large``.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from dataclasses import dataclass

from csp_web.core.api.errors import OpError
from protocol import ErrorCode

_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
FILE_MODE = 0o644


@dataclass(frozen=True)
class Target:
    """A checked place to write: the root it is under, its directory's real path, the name."""

    root: str
    directory: str
    name: str
    shown: str  # the path as given, for errors

    @property
    def path(self) -> str:
        return os.path.join(self.directory, self.name)


def check_target(roots: Sequence[str], path: str) -> Target:
    """Where ``path`` would be written; raises OpError: NOT_AVAILABLE (no root),
    INVALID_FIELD (relative, NUL, no file name), PERMISSION_DENIED (outside every root)."""
    real_roots = [os.path.realpath(root) for root in roots]
    if not real_roots:
        raise OpError(ErrorCode.NOT_AVAILABLE, "write_file: no tool.exec.workspace_roots")
    if not os.path.isabs(path) or "\0" in path:
        raise OpError(ErrorCode.INVALID_FIELD, "PATH must be an absolute path")
    directory, name = os.path.split(path)
    if name in ("", ".", ".."):
        raise OpError(ErrorCode.INVALID_FIELD, "PATH must name a file")
    real_dir = os.path.realpath(directory)
    root = max((r for r in real_roots if _within(real_dir, r)), key=len, default=None)
    if root is None:
        raise OpError(ErrorCode.PERMISSION_DENIED, path)
    return Target(root, real_dir, name, path)


def write_file(target: Target, data: bytes, *, max_bytes: int, overwrite: bool) -> str:
    """Write ``data`` at ``target``; returns the file's real path. Blocking: run it in a
    thread. Raises OpError: TOO_LARGE, FILE_EXISTS, INVALID_FIELD, PERMISSION_DENIED."""
    if len(data) > max_bytes:
        detail = f"{len(data)} bytes; cabinet.max_file_bytes is {max_bytes}"
        raise OpError(ErrorCode.TOO_LARGE, detail)
    fd = _open_dir(target.root, target.directory, target.shown)
    try:
        _write_at(fd, target.name, data, overwrite=overwrite, shown=target.shown)
    finally:
        os.close(fd)
    return target.path


def _open_dir(root: str, real_dir: str, shown: str) -> int:
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in os.path.relpath(real_dir, root).split(os.sep):
            if part in ("", "."):
                continue
            inner = os.open(part, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
    except OSError as exc:
        os.close(fd)
        if exc.errno == errno.ENOENT:
            raise OpError(ErrorCode.INVALID_FIELD, "PATH's directory does not exist") from None
        raise OpError(ErrorCode.PERMISSION_DENIED, shown) from None
    return fd


def _write_at(dir_fd: int, name: str, data: bytes, *, overwrite: bool, shown: str) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    flags |= os.O_TRUNC if overwrite else os.O_EXCL
    try:
        fd = os.open(name, flags, FILE_MODE, dir_fd=dir_fd)
    except FileExistsError:
        raise OpError(ErrorCode.FILE_EXISTS, shown) from None
    except IsADirectoryError:
        raise OpError(ErrorCode.INVALID_FIELD, "PATH names a directory") from None
    except OSError as exc:  # ELOOP: the name is a symlink; EACCES and the like
        raise OpError(ErrorCode.PERMISSION_DENIED, shown) from exc
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _within(path: str, root: str) -> bool:
    return os.path.commonpath([path, root]) == root
