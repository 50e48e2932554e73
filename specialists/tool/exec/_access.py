"""Whether the sandbox user may search a directory or execute a file, asked before spawning.

When the daemon is root, ``os.access`` answers for root (who may execute anything with any x
bit), so the mode bits are read for the uid/gid the command will run as. Only the classic
owner/group/other bits are read: a POSIX ACL that grants more is not seen, one that grants
less is caught by the kernel at exec time (the command then fails with 126).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RunAs:
    """The unprivileged identity commands take when the daemon is root."""

    uid: int
    gid: int


def may_execute(path: str, run_as: RunAs | None) -> bool:
    """True if ``path`` is a regular file that ``run_as`` (None: this process) may execute."""
    if run_as is None:
        return os.path.isfile(path) and os.access(path, os.X_OK)
    real = os.path.realpath(path)
    try:
        info = os.stat(real)
    except OSError:
        return False
    return (
        stat.S_ISREG(info.st_mode)
        and _grants_x(info, run_as)
        and may_search(os.path.dirname(real), run_as)
    )


def may_search(directory: str, run_as: RunAs | None) -> bool:
    """True if ``run_as`` may reach ``directory`` and enter it (x on it and every ancestor)."""
    if run_as is None:
        return os.path.isdir(directory) and os.access(directory, os.X_OK)
    real = os.path.realpath(directory)
    for path in (real, *_ancestors(real)):
        try:
            info = os.stat(path)
        except OSError:
            return False
        if not stat.S_ISDIR(info.st_mode) or not _grants_x(info, run_as):
            return False
    return True


def may_write(directory: str, run_as: RunAs) -> bool:
    """True if ``run_as`` may enter ``directory`` and make files in it (its own bits only:
    w and x for the class ``run_as`` falls in)."""
    try:
        info = os.stat(directory)
    except OSError:
        return False
    if info.st_uid == run_as.uid:
        wanted = stat.S_IWUSR | stat.S_IXUSR
    elif info.st_gid == run_as.gid:
        wanted = stat.S_IWGRP | stat.S_IXGRP
    else:
        wanted = stat.S_IWOTH | stat.S_IXOTH
    return stat.S_ISDIR(info.st_mode) and info.st_mode & wanted == wanted


def _ancestors(path: str) -> list[str]:
    parents = []
    while path != os.path.dirname(path):
        path = os.path.dirname(path)
        parents.append(path)
    return parents


def _grants_x(info: os.stat_result, run_as: RunAs) -> bool:
    if info.st_uid == run_as.uid:
        return bool(info.st_mode & stat.S_IXUSR)
    if info.st_gid == run_as.gid:  # supplementary groups are cleared on the switch
        return bool(info.st_mode & stat.S_IXGRP)
    return bool(info.st_mode & stat.S_IXOTH)
