"""The tool specialist: sandboxed exec, MCP tool calls and cron under IN:SHELL and IN:TOOL."""

from __future__ import annotations

from csp_web.core.ops import Op


def tool_ops() -> list[Op]:
    """The tool specialist's ops."""
    from . import ops_cron, ops_exec, ops_mcp

    return [*ops_exec.OPS, *ops_mcp.OPS, *ops_cron.OPS]
