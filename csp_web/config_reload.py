"""What a running daemon may take from a changed configuration file (SIGHUP), and what not.

A reload never half-applies: the new file is loaded strictly, every service checks its part
(``Services.extras["reloaders"]``), and only then does anything change. Settings listed in
``RELOADABLE`` are read per task (through ``Services.config``) or rebuilt by a service's
reload hook (the guard's one ``GuardSettings``, the MCP pool's servers, the socket gate's
allow-list); every other changed setting is kept at its running value and reported as needing
a restart: the socket's path and budgets, the state directory and its files, connection
budgets and specialist slots that running tasks hold, the sandbox the daemon probed at start,
the robots cache's user agent, TTL and size.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .config import Config

# Dotted paths (a path covers everything under it) a reload applies.
RELOADABLE = (
    "socket.allowed_uids",  # judged at each accept; connections of a removed uid are closed
    "tasks.default_timeout_ms",
    "tasks.max_timeout_ms",
    "web.fetch",  # caps and its rate limit
    "web.search",  # providers, order, rate limits, result counts
    "web.apis",  # endpoints, credentials' variable names, rate limits
    "web.summarize",
    "web.docs",  # board, cabinet, research, Firecrawl: read per task (csp_web/config_docs.py)
    "web.guard",  # allow-lists, ports, caps, timeouts: the client and backend read one reference
    "tool.exec",  # the exec policy: allow-lists, patterns, shell, env, limits, workspaces
    "tool.mcp",  # servers added, removed, changed (McpPool.prepare_reload), budgets
)
# Under a reloadable path, still fixed for the daemon's life: the sandbox was probed with them.
RESTART_ONLY = (
    # The robots cache was built for one user agent, TTL and size.
    "web.guard.user_agent",
    "web.guard.robots_ttl_s",
    "web.guard.robots_cache_entries",
    "tool.exec.bwrap_program",
    "tool.exec.require_bwrap",
    "tool.exec.run_as_uid",
    "tool.exec.run_as_gid",
    "tool.exec.masked_paths",
    "tool.exec.search_path",
)

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


def plan_reload(running: Config, new: Config) -> ReloadPlan:
    """Split what differs between ``running`` and ``new`` into what a reload applies and what
    needs a restart."""
    applied, kept = [], []
    config = running
    for path in changed_paths(running, new):
        if _covered(path, RELOADABLE) and not _covered(path, RESTART_ONLY):
            config = _with(config, path.split("."), _get(new, path.split(".")))
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
    such as the search providers, counts as one setting)."""
    if dataclasses.is_dataclass(old) and type(old) is type(new):
        paths: list[str] = []
        for item in dataclasses.fields(old):
            path = f"{prefix}.{item.name}" if prefix else item.name
            paths += changed_paths(getattr(old, item.name), getattr(new, item.name), path)
        return paths
    return [] if old == new else [prefix]


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
