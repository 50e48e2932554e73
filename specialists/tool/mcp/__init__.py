"""MCP tool calls for the ``mcp`` op (IN:TOOL, OUT:MCP_RESULT).

    async with open_mcp_pool(McpConfig(servers={"fs": StdioServerConfig(...)})) as pool:
        tools = await pool.list_tools("fs")                     # ToolList
        result = await pool.call_tool("fs", "read_file", parse_params(text))  # McpResult

Failures are ``csp_web.core.api.errors.OpError`` with catalogue codes (see ``errors``); the
settings are ``config.McpConfig``. Modules: ``transport`` (SDK transports), ``session`` (one
server's lifecycle), ``pool`` (all servers), ``render`` (results as reply parts).
"""

from .pool import McpPool, open_mcp_pool
from .render import McpResult, ToolInfo, ToolList, parse_params
from .session import ServerStats

__all__ = [
    "McpPool",
    "McpResult",
    "ServerStats",
    "ToolInfo",
    "ToolList",
    "open_mcp_pool",
    "parse_params",
]
