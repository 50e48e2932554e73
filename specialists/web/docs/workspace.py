"""Writing a fileKey's content to a file (seed 004's writeFile), under the exec workspace roots.

The path is checked and its directory opened as for every op that touches a workspace file
(``csp_web.infra.workspace_paths``: roots, exec's masked paths and the daemon's own files,
/proc, /sys, /dev, no symlink on the way). No open here can wait (a FIFO put at PATH once
held ``openat`` for good, in a thread nothing can cancel) or write through what someone else
put there:

- without OVERWRITE, PATH is made ``O_CREAT|O_EXCL|O_NOFOLLOW``: whatever is there already (a
  file, a FIFO, a link, a directory) is ``file_exists``, and what is opened is a new regular
  file; a failed write removes it (if the name still holds it);
- with OVERWRITE, an existing PATH must be a regular file the daemon may write: a symlink is
  ``permission_denied``, a directory or any other non-file (FIFO, device, socket)
  ``invalid_field``. The content goes to a new temporary file in the same directory, which
  takes the old file's permission bits (and its owner, where the daemon may give it), and is
  renamed onto PATH: a reader sees the old content or the new, and another hard link to the
  old file (one outside the root) keeps the old content. The temporary name is in a
  directory a sandboxed command may write, so it is only ever renamed, never linked or
  opened again (a link follows a symlink swapped in for it: a root daemon would link any
  file of its disk into the root), and PATH must hold the very file written afterwards,
  else the write is refused (``permission_denied``: PATH changed while it was written).

A new file is ``FILE_MODE`` less the umask. Content past ``cabinet.max_file_bytes`` is
``too_large``; a name longer than the file system allows is ``invalid_field``; a full disk or
quota is ``storage_full:workspace``. A daemon killed mid-write may leave one
``.csp-web-write-*.tmp`` file behind.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat

from csp_web.core.api.errors import OpError, StorageFull
from csp_web.core.api.storage import is_storage_full
from csp_web.infra.workspace_paths import WorkspacePath, open_directory
from protocol import ErrorCode

FILE_MODE = 0o644
# O_EXCL opens only a file it makes: never a FIFO, device or link someone put there. O_NONBLOCK
# is moot then; it is there so that no open here could ever wait.
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def write_file(target: WorkspacePath, data: bytes, *, max_bytes: int, overwrite: bool) -> str:
    """Write ``data`` at ``target``; returns the file's real path. Blocking: run it in a
    thread. Raises OpError: TOO_LARGE, FILE_EXISTS, INVALID_FIELD, PERMISSION_DENIED,
    STORAGE_FULL."""
    if len(data) > max_bytes:
        detail = f"{len(data)} bytes; cabinet.max_file_bytes is {max_bytes}"
        raise OpError(ErrorCode.TOO_LARGE, detail)
    fd = open_directory(target)
    try:
        _write_at(fd, target, data, overwrite=overwrite)
    except OSError as exc:
        raise _refusal(exc, target) from exc
    finally:
        os.close(fd)
    return target.path


def _write_at(dir_fd: int, target: WorkspacePath, data: bytes, *, overwrite: bool) -> None:
    if overwrite:
        _replace_at(dir_fd, target, data)
    else:
        _create_at(dir_fd, target, data)


def _create_at(dir_fd: int, target: WorkspacePath, data: bytes) -> None:
    fd = os.open(target.name, _NEW_FLAGS, FILE_MODE, dir_fd=dir_fd)
    try:
        _write_all(fd, data)
    except BaseException:
        if _holds(dir_fd, target.name, fd):  # not what someone put there since
            with contextlib.suppress(OSError):
                os.unlink(target.name, dir_fd=dir_fd)
        raise
    finally:
        os.close(fd)


def _replace_at(dir_fd: int, target: WorkspacePath, data: bytes) -> None:
    old = _replaceable(dir_fd, target)
    temp = f".csp-web-write-{secrets.token_hex(8)}.tmp"  # short: PATH's name may be 255 bytes
    fd = os.open(temp, _NEW_FLAGS, FILE_MODE, dir_fd=dir_fd)
    placed = False
    try:
        if old is not None:
            _take_mode_and_owner(fd, old)
        _write_all(fd, data)
        os.replace(temp, target.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        placed = True
        if not _holds(dir_fd, target.name, fd):  # the temporary name was swapped meanwhile
            raise OpError(ErrorCode.PERMISSION_DENIED, "PATH changed while it was written")
    finally:
        if not placed and _holds(dir_fd, temp, fd):
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=dir_fd)
        os.close(fd)


def _holds(dir_fd: int, name: str, fd: int) -> bool:
    """Whether ``name`` (not followed) is the file open as ``fd``."""
    try:
        now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    mine = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino)


def _replaceable(dir_fd: int, target: WorkspacePath) -> os.stat_result | None:
    """The existing file OVERWRITE replaces (None when there is none), or the refusal: a
    symlink, a non-file, or a file the daemon could not have opened for writing. Renaming
    does not follow what the check saw, so a swap after it changes only which name goes."""
    try:
        old = os.stat(target.name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(old.st_mode):
        raise target.denied()
    if stat.S_ISDIR(old.st_mode):
        raise OpError(ErrorCode.INVALID_FIELD, "PATH names a directory")
    if not stat.S_ISREG(old.st_mode):
        raise OpError(ErrorCode.INVALID_FIELD, "PATH is not a regular file")
    if not os.access(target.name, os.W_OK, dir_fd=dir_fd, effective_ids=True):
        raise target.denied()  # as opening it O_WRONLY was before
    return old


def _take_mode_and_owner(fd: int, old: os.stat_result) -> None:
    """Keep what overwriting in place kept: the permission bits (not set-id ones) and, where
    the daemon may give it (root, or its own file), the owner."""
    os.fchmod(fd, stat.S_IMODE(old.st_mode) & 0o777)
    if (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid()):
        with contextlib.suppress(PermissionError):
            os.fchown(fd, old.st_uid, old.st_gid)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _refusal(exc: OSError, target: WorkspacePath) -> OpError:
    """The reply for an OSError of the write (the seam's table)."""
    if is_storage_full(exc):
        return StorageFull("workspace")
    if exc.errno == errno.EEXIST:
        return OpError(ErrorCode.FILE_EXISTS, target.shown)
    if exc.errno == errno.EISDIR:  # a directory put at PATH after the check
        return OpError(ErrorCode.INVALID_FIELD, "PATH names a directory")
    if exc.errno == errno.ENAMETOOLONG:
        return target.too_long()
    return target.denied()  # EACCES, EPERM, EROFS and the like
