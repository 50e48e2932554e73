"""The tool specialist: sandboxed exec, MCP tool calls and cron under IN:SHELL and IN:TOOL.

``TOOL`` is the value the composition root (csp_web.app.catalog) lists.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from functools import partial

from csp_web.config import Config, SectionSpec
from csp_web.core.api.ops import Op
from csp_web.core.api.ports import CounterFamily, StatsLine, StorageChecks
from csp_web.core.api.specialist import Background, Commit, Specialist
from csp_web.cron import WallClock, open_cron, system_now
from csp_web.infra.counters import cache_counters
from csp_web.infra.redis_link import RedisLink

from . import ops_cron, ops_exec, ops_mcp
from .config import SECTION, ToolConfig, tool_section
from .ops_exec import open_exec_services, prepare_exec_reload
from .services import ToolServices, open_mcp_host

OPS: tuple[Op[ToolServices], ...] = (*ops_exec.OPS, *ops_mcp.OPS, *ops_cron.OPS)


@asynccontextmanager
async def open_tool_services(
    section: ToolConfig,
    config: Config,
    *,
    now_wall: WallClock = system_now,
    link: RedisLink | None = None,
) -> AsyncIterator[ToolServices]:
    """Open cron, then exec, then MCP; closed in reverse. Cron first: a bad cron.json fails
    start-up as ``CronStoreError`` itself, before any nursery could wrap it. The MCP SDK is
    imported only when a server is configured, at start or by a reload. ``link`` (redis.url)
    shares cron's job table and run claims and the exec result cache with the fleet."""
    async with (
        open_cron(config, now_wall=now_wall, link=link) as cron,
        open_exec_services(config, link=link) as exec_services,
        open_mcp_host(section.mcp) as mcp,
    ):
        yield ToolServices(exec_services, mcp, cron)


def _reload(tool: ToolServices, section: ToolConfig, config: Config) -> Commit:
    """Check the new exec policy and MCP servers, then apply both."""
    commits = [prepare_exec_reload(tool, config)]
    if tool.mcp is not None:
        commits.append(tool.mcp.prepare_reload(config))

    def commit() -> None:
        for each in commits:
            each()

    return commit


def _background(tool: ToolServices) -> tuple[Background, ...]:
    return () if tool.cron is None else (tool.cron.serve,)


def _stats_lines(tool: ToolServices) -> Mapping[str, StatsLine]:
    lines: dict[str, StatsLine] = {}
    if tool.exec is not None:
        sandbox = tool.exec.sandbox
        lines.update(SANDBOX=sandbox.kind, EXEC_LIMITS=sandbox.limits)
        lines["EXEC_PROTECTED"] = partial(_protected, tool)  # read at each REQ:stats (reload)
    if tool.mcp is not None:
        lines["MCP"] = tool.mcp.stats_lines  # read at each REQ:stats
    return lines


def _counters(tool: ToolServices) -> tuple[CounterFamily, ...]:
    # exec is swapped whole by a reload (its cache and counts too): read it at each scrape.
    return cache_counters("exec", lambda: None if tool.exec is None else tool.exec.cache)


def _storage(tool: ToolServices) -> StorageChecks:
    def cache_full() -> bool:  # exec is swapped whole by a reload: read it at each check
        return tool.exec is not None and tool.exec.cache.storage_full

    return {"cache": cache_full}


def _protected(tool: ToolServices) -> str:
    """The paths commands may not change or create, as the running exec policy has them:
    one JSON list (a line each would bury the rest of the reply under thirty)."""
    paths = () if tool.exec is None else tool.exec.config.protected_paths
    return json.dumps(list(paths), separators=(",", ":"))


def make_tool(
    *, now_wall: WallClock = system_now, link: RedisLink | None = None
) -> Specialist[ToolConfig, ToolServices]:
    """The tool specialist; ``now_wall`` is cron's wall clock (tests drive it); ``link`` the
    fleet's shared state (``csp_web.app.compose`` opens it when redis.url is set)."""
    return Specialist(
        name="tool",
        ops=OPS,
        slots=lambda slots: slots.tool,
        section=tool_section,
        own_section=SectionSpec(SECTION, ToolConfig),  # config.py: tool.exec, .cron, .mcp
        reloadable=(
            "tool.exec",  # the exec policy: allow-lists, patterns, shell, env, limits, workspaces
            "tool.mcp",  # servers added, removed, changed (McpPool.prepare_reload), budgets
        ),
        # The sandbox was probed with these: fixed for the daemon's life.
        restart_only=(
            "tool.exec.bwrap_program",
            "tool.exec.require_bwrap",
            "tool.exec.run_as_uid",
            "tool.exec.run_as_gid",
            "tool.exec.masked_paths",
            "tool.exec.search_path",
        ),
        open_services=partial(open_tool_services, now_wall=now_wall, link=link),
        background=_background,
        stats_lines=_stats_lines,
        storage=_storage,
        reload=_reload,
        counters=_counters,
    )


TOOL = make_tool()
