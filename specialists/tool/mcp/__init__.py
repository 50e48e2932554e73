"""MCP tool calls for the ``mcp`` op (IN:TOOL, OUT:MCP_RESULT).

    async with open_mcp_pool(McpConfig(servers={"fs": StdioServerConfig(...)})) as pool:
        tools = await pool.list_tools("fs")                     # ToolList
        result = await pool.call_tool("fs", "read_file", parse_params(text))  # McpResult

Failures are ``csp_web.core.api.errors.OpError`` with catalogue codes (see ``errors``); the
settings are ``config.McpConfig``. Modules: ``transport`` (SDK transports), ``session`` (one
server's lifecycle), ``pool`` (all servers), ``render`` (results as reply parts).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .pool import McpPool, open_mcp_pool
    from .render import McpResult, ToolInfo, ToolList, parse_params
    from .session import ServerStats

# Imported on first use: the settings (``.config``) load without the MCP SDK, an extra
# (csp-web[mcp]) that the pool, its sessions and the renderer need.
_HOMES = {
    "McpPool": "pool",
    "open_mcp_pool": "pool",
    "McpResult": "render",
    "ToolInfo": "render",
    "ToolList": "render",
    "parse_params": "render",
    "ServerStats": "session",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)


__all__ = [
    "McpPool",
    "McpResult",
    "ServerStats",
    "ToolInfo",
    "ToolList",
    "open_mcp_pool",
    "parse_params",
]
