"""A file under the exec workspace roots, for an op that reads or writes one outside the
sandbox (browser ``upload PATH``, web ``write_file``): one set of checks, in one order.

- no root configured (``tool.exec.workspace_roots``) is ``not_available``;
- a relative path, one holding NUL, or one naming no file (``/ws/``, ``/ws/..``) is
  ``invalid_field``;
- a path under /proc, a directory that resolves outside every root or into /proc, /sys or
  /dev, or a file under one of exec's masked paths (``csp_web.config.masked_paths``: what a
  command cannot see, the daemon's own files among them) that lies inside its root is
  ``permission_denied``: decided before anything about the file's existence is told. A mask
  enclosing the root is not one: as in exec's sandbox, the root's bind brings what is under
  it back.

``open_directory`` then opens the checked directory one component at a time from its root
without following a symlink, so a symlink swapped in after the check cannot lead the caller
out. The caller opens the file in it by descriptor with ``O_NOFOLLOW`` and ``O_NONBLOCK`` (a
FIFO must not hold the open) and refuses what ``fstat`` says is not a regular file, or never
opens the client's name at all (web ``write_file`` writes a new file and renames it there).

With a ``reader`` (the uid and gid a root daemon's commands run as, exec's ``run_as_uid``),
what is read is only what that reader could read: each directory of the walk, the root's own
included, must grant it search, and the caller's opened file read (``Identity.may_read``),
by the owner, group or other bits of the class it falls in, as read by ``fstat`` on the
descriptors themselves (no path is looked up twice). Only those classic bits are read, as
exec's own pre-spawn checks do: a POSIX ACL granting more is not seen (refused here).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass

from csp_web.core.api.errors import OpError
from protocol import ErrorCode

_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
_KERNEL = ("/proc", "/sys", "/dev")  # never a workspace file, whatever a root resolves to


@dataclass(frozen=True)
class Identity:
    """Whose rights a workspace file is read with: a uid and gid without supplementary
    groups (exec clears them when it switches to them)."""

    uid: int
    gid: int

    def may_read(self, info: os.stat_result) -> bool:
        """Whether the mode bits in ``info`` let this identity read the file."""
        return self._grants(info, stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH)

    def may_search(self, info: os.stat_result) -> bool:
        """Whether the mode bits in ``info`` let this identity enter the directory."""
        return self._grants(info, stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH)

    def _grants(self, info: os.stat_result, owner: int, group: int, other: int) -> bool:
        if info.st_uid == self.uid:  # the owner's bits alone, even if the group's grant more
            return bool(info.st_mode & owner)
        if info.st_gid == self.gid:
            return bool(info.st_mode & group)
        return bool(info.st_mode & other)


@dataclass(frozen=True)
class WorkspacePath:
    """A checked file place: the root it is under, its directory's real path, its name."""

    root: str
    directory: str
    name: str
    shown: str  # the path as given, for errors
    scope: tuple[str, ...] = ()  # the SCOPE of the refusals that name it

    @property
    def path(self) -> str:
        return os.path.join(self.directory, self.name)

    def denied(self) -> OpError:
        return OpError(ErrorCode.PERMISSION_DENIED, self.shown, scope=self.scope)

    def too_long(self) -> OpError:
        """ENAMETOOLONG: the client's mistake, not a permission (a name past 255 bytes)."""
        return OpError(ErrorCode.INVALID_FIELD, "PATH has a name too long for its file system")


def check_path(
    roots: Sequence[str],
    path: str,
    *,
    masked: Sequence[str],
    user: str,
    scope: tuple[str, ...] = (),
) -> WorkspacePath:
    """Where ``path`` lies, or the refusals the module lists (``user`` names the op in the
    not_available detail). Reads the filesystem (realpath): run it in a thread if it may block."""
    real_roots = [os.path.realpath(root) for root in roots]
    if not real_roots:
        raise OpError(ErrorCode.NOT_AVAILABLE, f"{user}: no tool.exec.workspace_roots")
    if not os.path.isabs(path) or "\0" in path:
        raise OpError(ErrorCode.INVALID_FIELD, "PATH must be an absolute path")
    directory, name = os.path.split(path)
    if name in ("", ".", ".."):
        raise OpError(ErrorCode.INVALID_FIELD, "PATH must name a file")
    real_dir = os.path.realpath(directory)
    root = max((r for r in real_roots if _within(real_dir, r)), key=len, default=None)
    place = WorkspacePath(root or "", real_dir, name, path, scope)
    if root is None or _within(os.path.normpath(path), "/proc"):
        raise place.denied()
    if any(_within(real_dir, kernel) for kernel in _KERNEL):
        raise place.denied()
    if _masked(place.path, root, masked):
        raise place.denied()
    return place


def open_directory(place: WorkspacePath, *, reader: Identity | None = None) -> int:
    """A descriptor (O_PATH) of ``place``'s directory, reached from its root without following
    a symlink; the caller closes it. A missing directory is invalid_field, anything else that
    stops the walk (a symlink, no permission, a directory ``reader`` may not search: the
    module says) permission_denied."""
    fd = os.open(place.root, _DIR_FLAGS)
    try:
        _check_search(fd, place, reader)
        for part in os.path.relpath(place.directory, place.root).split(os.sep):
            if part in ("", "."):
                continue
            inner = os.open(part, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
            _check_search(fd, place, reader)
    except OSError as exc:
        os.close(fd)
        if exc.errno == errno.ENOENT:
            raise OpError(ErrorCode.INVALID_FIELD, "PATH's directory does not exist") from None
        if exc.errno == errno.ENAMETOOLONG:
            raise place.too_long() from None
        raise place.denied() from None
    except OpError:
        os.close(fd)
        raise
    return fd


def _check_search(fd: int, place: WorkspacePath, reader: Identity | None) -> None:
    if reader is not None and not reader.may_search(os.fstat(fd)):
        raise place.denied()


def _masked(target: str, root: str, masked: Sequence[str]) -> bool:
    """``target`` (its directory resolved) lies under a mask that lies inside ``root``."""
    for mask in masked:
        real = os.path.realpath(mask)
        if _within(real, root) and _within(target, real):
            return True
    return False


def _within(path: str, root: str) -> bool:
    return os.path.commonpath([path, root]) == root
