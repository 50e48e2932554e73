"""The specialists: web and tool handlers, composed with the daemon's op table."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from csp_web.config import Config
from csp_web.registry import Op


@asynccontextmanager
async def open_specialists(config: Config) -> AsyncIterator[tuple[list[Op], dict[str, Any]]]:
    """Every specialist op, and the shared services they use (all closed on exit)."""
    from .browser import browser_ops
    from .browser.services import open_browser_services
    from .tool import tool_ops
    from .tool.ops_cron import open_cron, serve_cron
    from .tool.ops_exec import exec_reloader, open_exec_services
    from .tool.ops_mcp import open_mcp_host
    from .web import web_ops
    from .web.ops_search import serve_background
    from .web.services import open_web_services

    async with AsyncExitStack() as stack:
        extras: dict[str, Any] = {
            # First: a bad cron.json must fail start-up as itself, not wrapped by a nursery.
            "cron": await stack.enter_async_context(open_cron(config)),
            "web": await stack.enter_async_context(open_web_services(config)),
            "exec": await stack.enter_async_context(open_exec_services(config)),
        }
        # The MCP SDK is imported only when a server is configured, at start or by a reload.
        extras["mcp"] = await stack.enter_async_context(open_mcp_host(config.tool.mcp))
        sandbox = extras["exec"].sandbox
        # Chromium starts on first use; its requests pass web.guard as it is now (reloadable).
        extras["browser"] = await stack.enter_async_context(
            open_browser_services(config, guard=lambda: extras["web"].client.config)
        )
        extras["stats_lines"] = {
            "BROWSER": extras["browser"].stats_line,
            "SANDBOX": sandbox.kind,
            "EXEC_LIMITS": sandbox.limits,
            "MCP": extras["mcp"].stats_lines,  # read at each REQ:stats
        }
        # SIGHUP: each checks the new settings, then applies them (csp_web.config_reload).
        extras["reloaders"] = [
            exec_reloader(extras),
            extras["web"].prepare_reload,
            lambda new: extras["web"].client.prepare_reload(new.web.guard),
            extras["mcp"].prepare_reload,
        ]
        # Search prefetches run in a nursery the daemon owns and cancels at shutdown.
        extras["background"] = [serve_background(extras["web"]), serve_cron]
        yield [*web_ops(), *tool_ops(), *browser_ops()], extras
