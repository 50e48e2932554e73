"""The ``mcp`` op (IN:TOOL, OUT:MCP_RESULT): call a configured MCP server's tool, or list its
tools with their input schemas (``ACTION list``).

``extras["mcp"]`` is an ``McpHost``: it holds the MCP pool once a server is configured, at
start or by the first reload that configures one. The SDK costs ~40 MB and half a second to
import, so a daemon without MCP servers never loads it; the host itself needs only trio.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import trio

from csp_web.config import Config
from csp_web.config.mcp import McpConfig
from csp_web.core.context import OpContext
from csp_web.core.deadlines import work_deadline
from csp_web.core.errors import OpError
from csp_web.core.fields import FieldSpec, Params
from csp_web.core.ops import Op
from csp_web.core.replies import Result
from protocol import ErrorCode

if TYPE_CHECKING:
    from .mcp import McpPool

log = logging.getLogger(__name__)


class McpHost:
    """Where the MCP pool lives (``extras["mcp"]``); its sessions run in ``nursery``."""

    def __init__(self, nursery: trio.Nursery) -> None:
        self.pool: McpPool | None = None
        self._nursery = nursery

    def open_pool(self, config: McpConfig) -> None:
        from .mcp import McpPool  # the SDK loads here, with the first configured server

        self.pool = McpPool(config, self._nursery)

    def prepare_reload(self, config: Config) -> Callable[[], None]:
        """The reload hook (``csp_web.config.reload``) for ``tool.mcp``: the pool applies it
        (``McpPool.prepare_reload``); the first configured server opens the pool, the SDK
        being imported here, before anything changes."""
        mcp = config.tool.mcp
        if self.pool is not None:
            apply = self.pool.prepare_reload(mcp)

            def reload_pool() -> None:
                apply()

            return reload_pool
        if not mcp.servers:
            return lambda: None
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


def mcp_pool(ctx: OpContext, server: str) -> McpPool:
    # Without a pool, every SERVER is unconfigured: the seed's mcp_unavailable:<server>, with
    # the pool's own REASON (errors.NOT_CONFIGURED, spelt here to keep the SDK unloaded).
    host = ctx.services.extras.get("mcp")
    pool = host.pool if isinstance(host, McpHost) else None
    if pool is None:
        raise OpError(
            ErrorCode.MCP_UNAVAILABLE,
            server,
            scope=("mcp",),
            fields=(("REASON", "not_configured"),),
        )
    return pool


def _time_left_s() -> float | None:
    # The pool ends its call inside the task's deadline, so a hung server answers
    # mcp_unavailable (with its reason) instead of the dispatcher's bare timeout.
    deadline = work_deadline()
    return None if math.isinf(deadline) else max(deadline - trio.current_time(), 0.001)


async def mcp(params: Params, ctx: OpContext) -> Result:
    server = params.text("SERVER")
    action = params.text("ACTION")
    tool = params.opt_text("TOOL")
    # The audit record names what was asked, whatever comes of it.
    ctx.audit.update(server=server, action=action, tool=tool)
    pool = mcp_pool(ctx, server)
    if action == "list":
        tools = await pool.list_tools(server, timeout_s=_time_left_s())
        return Result(tools.data, tools.scope, tools.fields(ctx.config.tool.mcp))
    if tool is None:
        raise OpError(ErrorCode.MISSING_FIELD, "TOOL", scope=("mcp",))
    from .mcp import parse_params

    arguments = parse_params(params.opt_text("PARAMS"))
    result = await pool.call_tool(server, tool, arguments, timeout_s=_time_left_s())
    return Result(result.data, result.scope, result.fields())


OPS = [
    Op(
        "mcp",
        "TOOL",
        "MCP_RESULT",
        "tool",
        mcp,
        (
            FieldSpec("SERVER", required=True, max_chars=64),
            FieldSpec("TOOL", max_chars=128),
            FieldSpec("PARAMS", max_chars=256 * 1024, doc="a JSON object of arguments"),
            FieldSpec("ACTION", "choice", choices=("call", "list"), default="call"),
        ),
        doc="call an MCP server's tool, or list its tools",
    )
]
