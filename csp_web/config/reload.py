"""What a running daemon may take from a changed configuration file (SIGHUP), and what not.

A reload never half-applies: the new file is loaded strictly, every specialist checks its
part (``Specialist.reload``), and only then does anything change. Settings listed in
``RELOADABLE`` are read per task (through ``Services.config``) or rebuilt by a service's
reload hook (the guard's one ``GuardSettings``, the MCP pool's servers, the socket gate's
allow-list); every other changed setting is kept at its running value and reported as needing
a restart: the socket's path and budgets, the state directory and its files, connection
budgets and specialist slots that running tasks hold, the sandbox the daemon probed at start,
the robots cache's user agent, TTL and size.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from csp_web.config.root import Config, with_section

# Dotted paths (a path covers everything under it) a reload applies: the core's own. Each
# specialist adds its own (``Specialist.reloadable`` and ``restart_only``: web.*, tool.*).
RELOADABLE = (
    "socket.allowed_uids",  # judged at each accept; connections of a removed uid are closed
    "tasks.default_timeout_ms",
    "tasks.max_timeout_ms",
    "tasks.cancel_on_disconnect",  # read at each hang-up
    "budgets.per_uid",  # read at each unbudgeted frame
)
# Under a reloadable path, still fixed for the daemon's life (none of the core's own).
RESTART_ONLY: tuple[str, ...] = ()

# A service's reload hook: check the new Config (ValueError names what is wrong) and return
# the function that applies it; nothing may change before every hook has checked.
Reloader = Callable[[Config], Callable[[], None]]


@dataclass(frozen=True)
class ReloadPlan:
    """``config``: the settings to run with (new where reloadable, the running ones
    elsewhere); ``applied`` and ``needs_restart``: the changed dotted paths of each kind."""

    config: Config
    applied: tuple[str, ...]
    needs_restart: tuple[str, ...]


def plan_reload(
    running: Config,
    new: Config,
    reloadable: tuple[str, ...] = RELOADABLE,
    restart_only: tuple[str, ...] = RESTART_ONLY,
) -> ReloadPlan:
    """Split what differs between ``running`` and ``new`` into what a reload applies (under
    ``reloadable``, not under ``restart_only``) and what needs a restart."""
    applied, kept = [], []
    config = running
    for path in changed_paths(running, new):
        if _covered(path, reloadable) and not _covered(path, restart_only):
            config = _with_setting(config, new, path.split("."))
            applied.append(path)
        else:
            kept.append(path)
    return ReloadPlan(config, tuple(applied), tuple(kept))


def apply_reload(plan: ReloadPlan, reloaders: Sequence[Reloader]) -> None:
    """Check ``plan.config`` with every reloader, then apply each; ValueError from a check
    means nothing was applied."""
    commits = [reloader(plan.config) for reloader in reloaders]
    for commit in commits:
        commit()


def changed_paths(old: object, new: object, prefix: str = "") -> list[str]:
    """The dotted paths where two configurations differ, down to single settings (a mapping,
    such as the search providers, counts as one setting, and so does a section whose class
    says ``RELOAD_AS_ONE``: the slot pools). A specialist's own section (``Config.sections``)
    is compared at its top-level key, as if it were a field of the root."""
    whole = getattr(type(old), "RELOAD_AS_ONE", False)
    if dataclasses.is_dataclass(old) and type(old) is type(new) and not whole:
        paths: list[str] = []
        for item in dataclasses.fields(old):
            if item.metadata.get("internal", False):  # sections (above), the file's name
                continue
            path = f"{prefix}.{item.name}" if prefix else item.name
            paths += changed_paths(getattr(old, item.name), getattr(new, item.name), path)
        if isinstance(old, Config) and isinstance(new, Config):
            paths += _own_section_changes(old, new)
        return paths
    return [] if old == new else [prefix]


def _own_section_changes(old: Config, new: Config) -> list[str]:
    """The changed paths inside the specialists' own sections, each under its key; a section
    the file leaves out is its defaults, as ``section_of`` reads it."""
    mine, theirs = dict(old.sections), dict(new.sections)
    paths: list[str] = []
    for key in dict.fromkeys([*mine, *theirs]):
        before, after = mine.get(key), theirs.get(key)
        before = type(after)() if before is None else before
        after = type(before)() if after is None else after
        paths += changed_paths(before, after, key)
    return paths


def _with_setting(config: Config, new: Config, parts: list[str]) -> Config:
    """``config`` with the setting at ``parts`` taken from ``new``, be it in a field of the
    root or in a specialist's own section (kept in ``Config.sections`` by its key)."""
    own = [
        key for key in dict([*config.sections, *new.sections]) if _covered(".".join(parts), (key,))
    ]
    if not own:
        return typing.cast(Config, _with(config, parts, _get(new, parts)))
    key = max(own, key=len)  # the innermost: tool.browser's own section, not tool's
    rest = parts[len(key.split(".")) :]
    mine, theirs = dict(config.sections).get(key), dict(new.sections).get(key)
    mine = type(theirs)() if mine is None else mine
    theirs = type(mine)() if theirs is None else theirs
    return with_section(config, key, _with(mine, rest, _get(theirs, rest)))


def _covered(path: str, prefixes: tuple[str, ...]) -> bool:
    return any(path == p or path.startswith(p + ".") for p in prefixes)


def _get(obj: Any, parts: list[str]) -> Any:
    for part in parts:
        obj = getattr(obj, part)
    return obj


def _with(obj: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    head, rest = parts[0], parts[1:]
    return dataclasses.replace(obj, **{head: _with(getattr(obj, head), rest, value)})
