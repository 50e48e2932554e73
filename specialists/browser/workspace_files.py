"""Reading a file under the exec workspace roots for ``ACTION upload PATH``.

The same roots and order of checks as exec's WORKING_DIR and web's write_file (the browser
may import neither: specialists meet only through core): no root configured is
``not_available``; a relative path or one holding NUL is ``invalid_field``; a path under
/proc, or whose directory resolves outside every root or into /proc, /sys or /dev, or a
file under one of exec's masked paths (``masked``: ``csp_web.config.masked_paths``, the
daemon's own paths among them) that lies inside its root is ``permission_denied``, decided
before anything about its existence is told. A mask enclosing the root is not one: as in
exec's sandbox, the root's bind brings what is under it back. The directory is then opened
one component at a time from its root without following a symlink, and the file in it with
``O_NOFOLLOW`` (a symlink, even one pointing inside, is ``permission_denied``: one swapped
in after the check cannot lead the read out) and ``O_NONBLOCK`` (a FIFO cannot hold the
open); only a regular file is read (a directory, device or FIFO is ``invalid_field``), and
no more than ``max_bytes`` of it (``too_large``).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence

from csp_web.core.api.errors import OpError
from protocol import ErrorCode

_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_SCOPE = ("browser",)
_KERNEL = ("/proc", "/sys", "/dev")  # never a workspace file, whatever a root resolves to


def read_workspace_file(
    roots: Sequence[str], path: str, *, max_bytes: int, masked: Sequence[str] = ()
) -> bytes:
    """The bytes of the regular file at ``path`` under one of ``roots``, not under one of
    ``masked``. Blocking: run it in a thread. Raises OpError as the module says."""
    directory, name = _check(roots, path, masked)
    fd = _open_dir(directory[0], directory[1], path)
    try:
        return _read_at(fd, name, path, max_bytes)
    finally:
        os.close(fd)


def _check(roots: Sequence[str], path: str, masked: Sequence[str]) -> tuple[tuple[str, str], str]:
    """((root, real directory), file name) of ``path``, or the refusals above."""
    real_roots = [os.path.realpath(root) for root in roots]
    if not real_roots:
        raise OpError(ErrorCode.NOT_AVAILABLE, "upload PATH: no tool.exec.workspace_roots")
    if not os.path.isabs(path) or "\0" in path:
        raise OpError(ErrorCode.INVALID_FIELD, "PATH must be an absolute path")
    directory, name = os.path.split(os.path.normpath(path))
    if name in ("", ".", "..") or _within(os.path.normpath(path), "/proc"):
        raise OpError(ErrorCode.PERMISSION_DENIED, path, scope=_SCOPE)
    real_dir = os.path.realpath(directory)
    root = max((r for r in real_roots if _within(real_dir, r)), key=len, default=None)
    if root is None or any(_within(real_dir, kernel) for kernel in _KERNEL):
        raise OpError(ErrorCode.PERMISSION_DENIED, path, scope=_SCOPE)
    if _masked(os.path.join(real_dir, name), root, masked):
        raise OpError(ErrorCode.PERMISSION_DENIED, path, scope=_SCOPE)
    return (root, real_dir), name


def _masked(target: str, root: str, masked: Sequence[str]) -> bool:
    """``target`` (its directory resolved) lies under a mask that lies inside ``root``."""
    for mask in masked:
        real = os.path.realpath(mask)
        if _within(real, root) and _within(target, real):
            return True
    return False


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
        raise OpError(ErrorCode.PERMISSION_DENIED, shown, scope=_SCOPE) from None
    return fd


def _read_at(dir_fd: int, name: str, shown: str, max_bytes: int) -> bytes:
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise OpError(ErrorCode.INVALID_FIELD, "PATH does not exist") from None
    except OSError:  # ELOOP: the name is a symlink; EACCES, ENXIO and the like
        raise OpError(ErrorCode.PERMISSION_DENIED, shown, scope=_SCOPE) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OpError(ErrorCode.INVALID_FIELD, "PATH is not a regular file")
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


def _within(path: str, root: str) -> bool:
    return os.path.commonpath([path, root]) == root
