"""The specialists: web and tool handlers, composed with the daemon's op table."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from csp_web.config import Config
from csp_web.registry import Op


@asynccontextmanager
async def open_specialists(config: Config) -> AsyncIterator[tuple[list[Op], dict[str, Any]]]:
    """Every specialist op, and the shared services they use (all closed on exit)."""
    from .tool import tool_ops
    from .tool.mcp import open_mcp_pool
    from .tool.ops_exec import open_exec_services
    from .web import web_ops
    from .web.services import open_web_services

    async with (
        open_web_services(config) as web,
        open_exec_services(config) as exec_services,
        open_mcp_pool(config.tool.mcp) as mcp,
    ):
        extras = {"web": web, "exec": exec_services, "mcp": mcp}
        extras["stats_lines"] = {"SANDBOX": exec_services.sandbox.kind}
        yield [*web_ops(), *tool_ops()], extras
