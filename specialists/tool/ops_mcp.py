"""The ``mcp`` op (IN:TOOL, OUT:MCP_RESULT): call a configured MCP server's tool, or list its
tools with their input schemas (``ACTION list``).

``ToolServices.mcp`` is an ``McpHost``: it holds the MCP pool once a server is configured,
at start or by the first reload that configures one. The SDK costs ~40 MB and half a second to
import, so a daemon without MCP servers never loads it; the host itself needs only trio.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import trio

from csp_web.core.api import extras
from csp_web.core.api.audit import OpAudit
from csp_web.core.api.context import OpContext
from csp_web.core.api.deadlines import work_deadline
from csp_web.core.api.errors import OpError, audit_failures
from csp_web.core.api.fields import Example, FieldSpec, Params, ReplyField
from csp_web.core.api.ops import Effects, Op
from csp_web.core.api.replies import Result
from protocol import ErrorCode
from specialists.tool.config import tool_section

from .services import ToolServices

if TYPE_CHECKING:
    from .mcp import McpPool

log = logging.getLogger(__name__)


def mcp_pool(tool: ToolServices, server: str) -> McpPool:
    # Without a pool, every SERVER is unconfigured: the seed's mcp_unavailable:<server>, with
    # the pool's own REASON (errors.NOT_CONFIGURED, spelt here to keep the SDK unloaded).
    pool = tool.mcp.pool if tool.mcp is not None else None
    if pool is None:
        extras.require("mcp", scope=("mcp",))  # without the SDK no server is: say why
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


@dataclass(frozen=True)
class McpAudit(OpAudit):
    """What an mcp call adds to its audit record: what was asked, whatever came of it (never
    PARAMS, which may carry a tool's credentials)."""

    server: str
    action: str
    tool: str | None


async def mcp(params: Params, ctx: OpContext, tool_services: ToolServices) -> Result:
    audit = McpAudit(params.text("SERVER"), params.text("ACTION"), params.opt_text("TOOL"))
    with audit_failures(audit):
        result = await _mcp(params, ctx, tool_services, audit)
    return replace(result, audit=audit)


async def _mcp(
    params: Params, ctx: OpContext, tool_services: ToolServices, audit: McpAudit
) -> Result:
    server, action, tool = audit.server, audit.action, audit.tool
    pool = mcp_pool(tool_services, server)
    if action == "list":
        tools = await pool.list_tools(server, timeout_s=_time_left_s())
        return Result(tools.data, tools.scope, tools.fields(tool_section(ctx.config).mcp))
    if tool is None:
        raise OpError(ErrorCode.MISSING_FIELD, "TOOL", scope=("mcp",))
    from .mcp import parse_params

    arguments = parse_params(params.opt_text("PARAMS"))
    result = await pool.call_tool(server, tool, arguments, timeout_s=_time_left_s())
    return Result(result.data, result.scope, result.fields())


MCP_REPLIES = (
    ReplyField("EXEC_TIME", "the server answered", "ms of the call", kind="int"),
    ReplyField(
        "STRUCTURED", "call: the tool gave structured content", "it, as compact JSON (capped)"
    ),
    ReplyField(
        "STRUCTURED_CHARS", "call: structured content was cut", "its whole length", kind="int"
    ),
    ReplyField("TEXT_CHARS", "call: the text was cut", "its whole length", kind="int"),
    ReplyField(
        "TOOL", "list: one per tool", "the tool's name, description and input schema", repeat=True
    ),
    ReplyField(
        "TOOLS_LISTED", "list: more tools than shown", "how many the server listed", kind="int"
    ),
    ReplyField("REASON", "FAIL: mcp_unavailable", "why the server is unavailable"),
    ReplyField("ERROR_SUMMARY", "FAIL: the tool reported an error", "its text, capped"),
)
MCP_EXAMPLE = Example(
    ('TASK REQ:mcp IN:TOOL OUT:MCP_RESULT\nID 1\nSERVER toy\nTOOL add\nPARAMS {"a":2,"b":3}\n'),
    (
        "STATUS OK\n"
        "ID 1\n"
        "SCOPE [toy]\n"
        'DATA "{\\n  \\"sum\\": 5,\\n  \\"a\\": 2,\\n  \\"b\\": 3\\n}"\n'
        "EXEC_TIME 0\n"
        'STRUCTURED {"a":2,"b":3,"sum":5}\n'
    ),
)


OPS: list[Op[ToolServices]] = [
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
        replies=MCP_REPLIES,
        example=MCP_EXAMPLE,
        doc="call an MCP server's tool, or list its tools",
        # A configured server's tools may do anything.
        effects=Effects(),
    )
]
