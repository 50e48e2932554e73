"""The MCP section of the configuration; it lives with the rest in ``csp_web``."""

from csp_web.config_mcp import (
    ConfigError,
    HttpServerConfig,
    McpConfig,
    ServerConfig,
    StdioServerConfig,
    mcp_config_from_mapping,
)

__all__ = [
    "ConfigError",
    "HttpServerConfig",
    "McpConfig",
    "ServerConfig",
    "StdioServerConfig",
    "mcp_config_from_mapping",
]
