"""The specialists: web and tool handlers, composed with the daemon's op table."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from csp_web.config import Config
from csp_web.redis_link import open_redis_link
from csp_web.registry import Op


@asynccontextmanager
async def open_specialists(config: Config) -> AsyncIterator[tuple[list[Op], dict[str, Any]]]:
    """Every specialist op, and the shared services they use (all closed on exit)."""
    from .browser import browser_ops
    from .browser.services import open_browser_services
    from .node import node_ops
    from .node.services import node_background, open_node_services
    from .tool import tool_ops
    from .tool.ops_cron import open_cron, serve_cron
    from .tool.ops_exec import exec_reloader, open_exec_services
    from .tool.ops_mcp import open_mcp_host
    from .web import web_ops
    from .web.ops_search import serve_background
    from .web.services import open_web_services

    async with AsyncExitStack() as stack:
        # The fleet's shared state (redis.url), else None: every service stays local.
        link = await stack.enter_async_context(open_redis_link(config.redis))
        extras: dict[str, Any] = {
            # First: a bad cron.json must fail start-up as itself, not wrapped by a nursery.
            "cron": await stack.enter_async_context(open_cron(config, link=link)),
            "web": await stack.enter_async_context(open_web_services(config, link=link)),
            "exec": await stack.enter_async_context(open_exec_services(config, link=link)),
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
        if link is not None:
            extras["stats_lines"]["REDIS"] = link.stats_line
        # SIGHUP: each checks the new settings, then applies them (csp_web.config_reload).
        extras["reloaders"] = [
            exec_reloader(extras),
            extras["web"].prepare_reload,
            lambda new: extras["web"].client.prepare_reload(new.web.guard),
            extras["mcp"].prepare_reload,
        ]
        # Search prefetches run in a nursery the daemon owns and cancels at shutdown.
        # Research jobs run in a nursery of their own, cancelled at shutdown too.
        extras["background"] = [
            serve_background(extras["web"]),
            extras["web"].jobs.serve,
            serve_cron,
        ]
        if link is not None:  # cross-daemon events: cache invalidation, flights, cron
            extras["background"].append(link.serve_background)
        # Paired nodes: the store and registry; their transports run as a background task.
        nodes = extras["nodes"] = await stack.enter_async_context(
            open_node_services(config.nodes, config)
        )
        extras["stats_lines"]["NODES"] = nodes.stats_line
        extras["background"].append(node_background(nodes))
        yield [*web_ops(), *tool_ops(), *browser_ops(), *node_ops()], extras
