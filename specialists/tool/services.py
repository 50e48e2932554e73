"""What the tool ops share, typed: the exec engine, the MCP host and the cron service.

TOOL (``specialists.tool``) opens them in that order of need (cron first: a bad cron.json
fails start-up as ``CronStoreError`` itself; the MCP pool's nursery last) and binds them to
every tool handler as its third argument. A field left None (a test composing one part)
answers its ops ``not_available`` / ``mcp_unavailable``, as an unconfigured part does.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from csp_web.config import Config
from csp_web.core.api import extras
from csp_web.cron import CronService
from csp_web.infra.redis_cache import ResponseCache
from specialists.tool.config import tool_section
from specialists.tool.exec.config import ExecConfig
from specialists.tool.mcp.config import McpConfig

from .exec import ExecNetwork, Sandbox

if TYPE_CHECKING:
    from .mcp import McpPool

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExecServices:
    """The probed sandbox, the effective exec config, the result cache and the network."""

    config: ExecConfig
    sandbox: Sandbox
    cache: ResponseCache
    network: ExecNetwork | None = None  # the guard proxy that network rules' lanes open on


class McpHost:
    """Where the MCP pool lives (``ToolServices.mcp``); its sessions run in ``nursery``."""

    def __init__(self, nursery: trio.Nursery) -> None:
        self.pool: McpPool | None = None
        self._nursery = nursery

    def open_pool(self, config: McpConfig) -> None:
        if not extras.installed("mcp"):  # REQ:mcp answers not_available:mcp (ops_mcp)
            log.warning("tool.mcp names servers but %s", extras.install_hint("mcp"))
            return
        from .mcp import McpPool  # the SDK loads here, with the first configured server

        self.pool = McpPool(config, self._nursery)

    def prepare_reload(self, config: Config) -> Callable[[], None]:
        """The reload hook (``csp_web.config.reload``) for ``tool.mcp``: the pool applies it
        (``McpPool.prepare_reload``); the first configured server opens the pool, the SDK
        being imported here, before anything changes."""
        mcp = tool_section(config).mcp
        if self.pool is not None:
            apply = self.pool.prepare_reload(mcp)

            def reload_pool() -> None:
                apply()

            return reload_pool
        if not mcp.servers:
            return lambda: None
        if not extras.installed("mcp"):
            return lambda: self.open_pool(mcp)  # says why no pool opens
        from .mcp import McpPool

        def commit() -> None:
            self.pool = McpPool(mcp, self._nursery)
            log.info("MCP servers reloaded: added %s", ", ".join(mcp.servers))

        return commit

    def stats_lines(self) -> tuple[str, ...]:
        """The MCP lines of ``REQ:stats``: one per server (none without a pool)."""
        return () if self.pool is None else self.pool.stats_lines()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()


@asynccontextmanager
async def open_mcp_host(config: McpConfig) -> AsyncIterator[McpHost]:
    """An ``McpHost``, its pool opened now when ``config`` names a server; on exit (also by
    cancellation) every session closes and every server process is reaped."""
    try:
        async with trio.open_nursery() as nursery:
            host = McpHost(nursery)
            if config.servers:
                host.open_pool(config)
            try:
                yield host
            finally:
                host.close()
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The sessions raise nothing but Cancelled: a group can only wrap the body's error.
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


@dataclass
class ToolServices:
    """The tool specialist's services; ``exec`` is swapped whole by a reload."""

    exec: ExecServices | None
    mcp: McpHost | None
    cron: CronService | None
