"""The tool specialist's own section (``tool``): exec, cron, MCP. ``tool.browser`` inside it is
the browser specialist's own section (specialists/browser/config.py), read at that key.

Each part declares what the core must know through the section hooks of csp_web.config:
exec's shell and bwrap and each MCP server's files (``ReadsInputs``), the cron store's folder
(``OwnsPaths``), the workspace roots (``OpensWorkspaces``) and that none of them overlaps
the daemon's own paths (``ChecksConfig``)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from csp_web.config import Config, daemon_inputs, expand_protected, section_of
from csp_web.cron.config import CronConfig
from specialists.tool.exec._access import RunAs, may_write
from specialists.tool.exec.config import ExecConfig, overlaps
from specialists.tool.mcp.config import McpConfig

SECTION = "tool"


@dataclass(frozen=True)
class ToolConfig:
    exec: ExecConfig = field(default_factory=ExecConfig)
    cron: CronConfig = field(default_factory=CronConfig)
    mcp: McpConfig = field(default_factory=McpConfig)


def tool_section(config: Config) -> ToolConfig:
    """The tool's own section of ``config`` (its defaults if the file has none)."""
    return section_of(config, SECTION, ToolConfig)


def protected_paths(config: Config) -> tuple[str, ...]:
    """``tool.exec.protected_paths`` (``~`` expanded) and every daemon input, deduplicated."""
    own = tool_section(config).exec.protected_paths
    return expand_protected((*own, *daemon_inputs(config)))


def workspace_unwritable(config: Config, *, euid: int | None = None) -> list[str]:
    """What to say of each workspace root commands cannot write to: a root daemon (``euid``,
    this process's by default) runs them as ``run_as_uid``/``run_as_gid``, so a root must be
    that user's to write. None for a daemon that is not root: commands run as it.
    check-config notes each, and the daemon warns of each at start."""
    if (os.geteuid() if euid is None else euid) != 0:
        return []
    exec_config = tool_section(config).exec
    run_as = RunAs(exec_config.run_as_uid, exec_config.run_as_gid)
    return [
        f"{root} is not writable by uid {run_as.uid}, which commands run as under a root"
        f" daemon: chown {run_as.uid}:{run_as.gid} {root}"
        for root in exec_config.workspace_roots
        if not may_write(root, run_as)
    ]


def workspace_overlaps(config: Config) -> list[tuple[str, str]]:
    """(workspace root, protected path) for each protected path a root holds or lies in:
    commands may not change it there (check-config reports each)."""
    pairs = []
    for root in tool_section(config).exec.workspace_roots:
        real = os.path.realpath(root)
        for path in protected_paths(config):
            if overlaps(real, os.path.realpath(path.rstrip("/") or "/")):
                pairs.append((root, path))
    return pairs
