"""Protected paths inside a writable working directory: read-only, and held absent when missing.

The working directory is the one writable host directory in the sandbox. A protected path in
it (``tool.exec.protected_paths`` and every file the daemon reads as configuration or runs) is
bound read-only onto itself, and so is a working directory inside one. Three ways around a
plain read-only bind are closed here:

- Renaming a writable parent (``mv ~/.config ~/.c.old && mkdir ~/.config``) would move the
  protected file away and let a new one take its name. Every directory between the working
  directory and a protected path is bound onto itself, writable: a mount point cannot be
  renamed or removed (EBUSY), and what lies in it stays writable.
- A path that does not exist yet cannot carry a mount. The daemon makes an empty file or
  directory there (a placeholder), the sandbox binds it read-only, and the daemon removes it
  after the command if it is still its own and empty. While any command holds it, it stays.
- A symlink inside the working directory on the way to a protected path could be replaced,
  and a mount lands on a link's target, never on the link. Such a command is refused
  (PERMISSION_DENIED naming the link) rather than run with a path it could redirect.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass

from ._access import RunAs, may_search
from ._errors import denied

_MAX_LINKS = 40  # Linux's MAXSYMLINKS: past it the path does not resolve at all


@dataclass(frozen=True, slots=True)
class Placeholder:
    """A missing path the daemon creates before the command and removes after."""

    path: str
    directory: bool


@dataclass(frozen=True, slots=True)
class Layout:
    """How the working directory's protected paths are mounted (bubblewrap applies it).

    ``anchors`` are bound onto themselves writable (so cannot be renamed), ``readonly`` onto
    themselves read-only, both in the order given; ``placeholders`` must exist while the
    command runs (``hold_placeholders``); ``working_dir_readonly``: the working directory
    itself lies in a protected path.
    """

    anchors: tuple[str, ...] = ()
    readonly: tuple[str, ...] = ()
    placeholders: tuple[Placeholder, ...] = ()
    working_dir_readonly: bool = False

    @property
    def empty(self) -> bool:
        return not (self.anchors or self.readonly or self.working_dir_readonly)

    def mounts(self) -> list[tuple[str, str]]:
        """(bwrap option, path) pairs, outer paths before the paths inside them."""
        ops = [("--bind", path) for path in self.anchors]
        ops += [("--ro-bind", path) for path in self.readonly]
        return sorted(ops, key=lambda op: op[1].count("/"))


@dataclass(slots=True)
class _Walk:
    """The entries inside the working directory that resolving one path passes through."""

    passed: list[str]
    missing: list[str]  # the tail of ``passed`` that does not exist yet
    resolved: str
    # The walk stopped early: at a file where a directory on the way should be (nothing
    # below it can exist while it stays, so what was passed is anchored: a mount point
    # cannot be swapped for a directory), or at a folder the sandbox user cannot search.
    blocked: bool = False


def plan_layout(
    working_dir: str,
    protected: Sequence[str],
    masked: Sequence[str] = (),
    *,
    run_as: RunAs | None = None,
) -> Layout:
    """The layout protecting ``protected`` (absolute; a trailing slash names a directory)
    inside ``working_dir`` (a realpath); the directories on the way to each ``masked`` path
    are anchored too, so a mask cannot be renamed out from under its path.

    Raises PERMISSION_DENIED naming a symlink inside ``working_dir`` that lies on the way to
    (or is) a protected or masked path.
    """
    anchors: dict[str, None] = {}
    readonly: dict[str, None] = {}
    placeholders: dict[str, bool] = {}
    working_dir_readonly = False
    entries = _Entries()
    for entry in protected:
        directory = entry.endswith("/")
        walk = _walk(entry.rstrip("/") or "/", working_dir, run_as, entries)
        if walk is None:
            continue
        if walk.blocked:
            anchors.update(dict.fromkeys(walk.passed))
            continue
        if _inside(working_dir, walk.resolved):
            working_dir_readonly = True
            continue
        if not walk.passed:
            continue
        *between, final = walk.passed
        anchors.update(dict.fromkeys(between))
        if final == walk.resolved:
            readonly[final] = None
        else:  # passed on the way out again (a link outside names ``final/..``)
            anchors[final] = None
        for path in walk.missing:
            placeholders[path] = directory or path != final
    for entry in masked:
        walk = _walk(entry, working_dir, run_as, entries)
        if walk is not None:
            anchors.update(dict.fromkeys(p for p in walk.passed[:-1] if p not in walk.missing))
    return _layout(anchors, readonly, placeholders, working_dir_readonly)


def _layout(
    anchors: dict[str, None],
    readonly: dict[str, None],
    placeholders: dict[str, bool],
    working_dir_readonly: bool,
) -> Layout:
    """Drop what a read-only bind already covers: an anchor or bind inside one would lay a
    writable (or redundant) mount back over it."""
    outer = [path for path in readonly if not any(_strictly_inside(path, o) for o in readonly)]
    kept_anchors = [
        a for a in anchors if a not in readonly and not any(_inside(a, o) for o in outer)
    ]
    needed = {*outer, *kept_anchors}
    return Layout(
        anchors=tuple(kept_anchors),
        readonly=tuple(outer),
        placeholders=tuple(
            Placeholder(path, directory)
            for path, directory in sorted(placeholders.items(), key=lambda p: p[0].count("/"))
            if path in needed
        ),
        working_dir_readonly=working_dir_readonly,
    )


class _Entries:
    """What ``lstat`` said of each path, asked once per plan.

    The walks of one plan pass the same directories again and again (every default
    protected path lies in ``~``, a few in ``~/.config``): asking each once cut a plan of
    the defaults from 98 ``stat`` and ``lstat`` calls to 25, and ``prepare_command`` from
    about 1.4 to 1.05 ms of CPU (load 11, 2 shared cores).
    """

    def __init__(self) -> None:
        self._seen: dict[str, os.stat_result | None] = {}

    def lstat(self, path: str) -> os.stat_result | None:
        """``os.lstat(path)``, or None where it fails (absent, or not searchable)."""
        if path not in self._seen:
            try:
                self._seen[path] = os.lstat(path)
            except OSError:
                self._seen[path] = None
        return self._seen[path]


def _walk(path: str, working_dir: str, run_as: RunAs | None, entries: _Entries) -> _Walk | None:
    """Resolve ``path`` as the kernel would, noting each entry inside ``working_dir`` it
    passes. None when it does not resolve (a loop, an unreadable link outside). It stops,
    ``blocked``, at a folder ``run_as`` may not search: the command cannot reach below it,
    and bubblewrap (running as that uid) could not mount there."""
    pending = [part for part in path.split("/") if part]
    current, links = "/", 0
    passed: list[str] = []
    missing: list[str] = []
    while pending:
        part = pending.pop(0)
        if part in (".", ""):
            continue
        if part == "..":
            current = os.path.dirname(current)
            continue
        following = os.path.join(current, part)
        inside = _strictly_inside(following, working_dir)
        if inside and not missing and not may_search(current, run_as):
            return _Walk(passed, [], current, blocked=True)
        found = None if missing else entries.lstat(following)
        if found is None or is_held(following):
            missing.append(following)
        elif stat.S_ISLNK(found.st_mode):
            if inside:
                raise denied(following)
            links += 1
            try:
                target = os.readlink(following)
            except OSError:
                return None
            if links > _MAX_LINKS:
                return None
            current = "/" if os.path.isabs(target) else current
            pending = [p for p in target.split("/") if p] + pending
            continue
        if inside:
            passed.append(following)
        elif missing:
            missing.pop()  # outside the working directory: the read-only host keeps it absent
        current = following
        # Not a link here (followed above), so lstat's type is the entry's own.
        if pending and not missing and (found is None or not stat.S_ISDIR(found.st_mode)):
            return _Walk(passed, [], current, blocked=True)
    return _Walk(passed, [p for p in missing if p in passed], current)


def _inside(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _strictly_inside(path: str, directory: str) -> bool:
    return path != directory and _inside(path, directory)


# Placeholders this daemon made and how many running commands hold each: a second command
# holding the same one keeps it (and its mount in the first command) in place until both end.
_held: dict[str, tuple[tuple[int, int], int]] = {}


def is_held(path: str) -> bool:
    """True when ``path`` is a placeholder some running command holds."""
    held = _held.get(path)
    return held is not None and _identity(path) == held[0]


def take_placeholders(layout: Layout, *, chown: bool) -> list[str]:
    """Make each missing placeholder of ``layout`` (with ``chown``, a root daemon's, owned as
    its folder is: a made parent is as writable to the command as its own parent, no more);
    the paths now held, for ``release_placeholders`` once the sandbox is reaped. Blocking file
    work: the runner calls it in a worker thread (``PLACEHOLDER_THREAD``).

    Raises PERMISSION_DENIED naming a placeholder's path that became a symlink meanwhile
    (what was taken before it is released first).
    """
    taken: list[str] = []
    try:
        for placeholder in layout.placeholders:
            if _take(placeholder, chown=chown):
                taken.append(placeholder.path)
    except BaseException:
        release_placeholders(taken)
        raise
    return taken


def release_placeholders(taken: Sequence[str]) -> None:
    """Remove each of ``taken`` that no other command holds, if it is still the one made and
    still empty. Blocking file work, as ``take_placeholders``."""
    for path in reversed(taken):
        _release(path)


def _take(placeholder: Placeholder, *, chown: bool) -> bool:
    """True when the placeholder is now held (made, or shared); False when a real entry
    appeared at its path since the plan (it is then bound as it is)."""
    path = placeholder.path
    if is_held(path):
        held, holders = _held[path]
        _held[path] = (held, holders + 1)
        return True
    if os.path.lexists(path):
        if os.path.islink(path):
            raise denied(path)
        return False
    try:
        if placeholder.directory:
            os.mkdir(path, 0o755)
        else:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
            os.close(os.open(path, flags, 0o644))
        if chown:
            folder = os.stat(os.path.dirname(path))
            os.lchown(path, folder.st_uid, folder.st_gid)
    except OSError:
        raise denied(path) from None
    made = _identity(path)
    if made is None:  # gone already: nothing of ours to remove later
        raise denied(path)
    _held[path] = (made, 1)
    return True


def _release(path: str) -> None:
    identity, holders = _held[path]
    if holders > 1:
        _held[path] = (identity, holders - 1)
        return
    del _held[path]
    try:
        info = os.lstat(path)
    except OSError:
        return
    if (info.st_dev, info.st_ino) != identity:
        return
    with contextlib.suppress(OSError):  # not empty: someone's real files now live there
        if stat.S_ISDIR(info.st_mode):
            os.rmdir(path)
        elif stat.S_ISREG(info.st_mode) and info.st_size == 0:
            os.unlink(path)


def _identity(path: str) -> tuple[int, int] | None:
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino
