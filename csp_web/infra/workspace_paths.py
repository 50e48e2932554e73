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
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from dataclasses import dataclass

from csp_web.core.api.errors import OpError
from protocol import ErrorCode

_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
_KERNEL = ("/proc", "/sys", "/dev")  # never a workspace file, whatever a root resolves to


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


def open_directory(place: WorkspacePath) -> int:
    """A descriptor (O_PATH) of ``place``'s directory, reached from its root without following
    a symlink; the caller closes it. A missing directory is invalid_field, anything else that
    stops the walk (a symlink, no permission) permission_denied."""
    fd = os.open(place.root, _DIR_FLAGS)
    try:
        for part in os.path.relpath(place.directory, place.root).split(os.sep):
            if part in ("", "."):
                continue
            inner = os.open(part, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
    except OSError as exc:
        os.close(fd)
        if exc.errno == errno.ENOENT:
            raise OpError(ErrorCode.INVALID_FIELD, "PATH's directory does not exist") from None
        if exc.errno == errno.ENAMETOOLONG:
            raise place.too_long() from None
        raise place.denied() from None
    return fd


def _masked(target: str, root: str, masked: Sequence[str]) -> bool:
    """``target`` (its directory resolved) lies under a mask that lies inside ``root``."""
    for mask in masked:
        real = os.path.realpath(mask)
        if _within(real, root) and _within(target, real):
            return True
    return False


def _within(path: str, root: str) -> bool:
    return os.path.commonpath([path, root]) == root
