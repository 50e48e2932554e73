"""The ``mcp`` op (IN:TOOL, OUT:MCP_RESULT): call a configured MCP server's tool, or list its
tools with their input schemas (``ACTION list``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import trio

from csp_web.context import OpContext
from csp_web.deadlines import work_deadline
from csp_web.errors import OpError
from csp_web.fields import FieldSpec, Params
from csp_web.registry import Op
from csp_web.replies import Result
from protocol import ErrorCode

if TYPE_CHECKING:
    from .mcp import McpPool


def mcp_pool(ctx: OpContext, server: str) -> McpPool:
    # The SDK costs ~40 MB and half a second to import: only a configured server loads it.
    # Without one, every SERVER is unconfigured: the seed's mcp_unavailable:<server>, with
    # the pool's own REASON (errors.NOT_CONFIGURED, spelt here to keep the SDK unloaded).
    pool = ctx.services.extras.get("mcp")
    if pool is None:
        raise OpError(
            ErrorCode.MCP_UNAVAILABLE,
            server,
            scope=("mcp",),
            fields=(("REASON", "not_configured"),),
        )
    return pool  # type: ignore[no-any-return]


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
