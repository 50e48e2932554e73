"""Where SDK, transport and OS errors become catalogue codes: the MCP seam's one table.

    OpError(MCP_UNAVAILABLE, <server>)   the server is not configured, cannot be started
                                         or reached in time; REASON says why
                                         (not_configured, start_failed:<cause>,
                                         call_timeout, ...), as the seed's
                                         ``ERROR mcp_unavailable:playwright-server``
    OpError(MCP_TOOL_ERROR, <tool>)      the server answered, but with a failure;
                                         ERROR_SUMMARY carries the server's words
    OpError(INVALID_FIELD, PARAMS|TOOL)  the request cannot be sent as given
    OpError(SHUTTING_DOWN, <server>)     the pool is closed

Only exceptions raised by the SDK around one request are translated here; a bug of ours
stays itself and reaches the dispatcher's internal-error path.
"""

from __future__ import annotations

from typing import Final

import anyio
import httpx2
from mcp import MCPError
from mcp.client import UnexpectedClaimedResult
from mcp.types import CONNECTION_CLOSED
from pydantic import ValidationError

from csp_web.core.api.errors import OpError
from protocol import ErrorCode

# Why a server is unavailable: the REASON field of an MCP_UNAVAILABLE reply. start_failed,
# start_timeout and backing_off carry the last failure's cause after a colon.
NOT_CONFIGURED: Final = "not_configured"
START_FAILED: Final = "start_failed"
START_TIMEOUT: Final = "start_timeout"
CALL_TIMEOUT: Final = "call_timeout"
CONNECTION_LOST: Final = "connection_lost"
BACKING_OFF: Final = "backing_off"

# Errors meaning the connection itself is gone: the caller learns MCP_UNAVAILABLE and the
# session is told to check (and, if need be, restart) its server.
_CONNECTION_ERRORS: Final = (
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    httpx2.TransportError,
    OSError,
)

# Errors meaning the server answered but the answer is a failure (a JSON-RPC error, a result
# that breaks the protocol or the tool's output schema, an input request we cannot serve).
_ANSWER_ERRORS: Final = (MCPError, ValidationError, RuntimeError, UnexpectedClaimedResult)


def unavailable(server: str, reason: str) -> OpError:
    """The seed's ``ERROR mcp_unavailable:<server>`` reply, with the reason as a field."""
    return OpError(ErrorCode.MCP_UNAVAILABLE, server, scope=("mcp",), fields=(("REASON", reason),))


def tool_error(server: str, tool: str, text: str, *, max_chars: int, exec_time_ms: int) -> OpError:
    """An error result or error answer from ``tool``, its text capped to a summary."""
    return OpError(
        ErrorCode.MCP_TOOL_ERROR,
        tool,
        scope=(server,),
        fields=(("ERROR_SUMMARY", cap(text, max_chars)), ("EXEC_TIME", str(exec_time_ms))),
    )


def is_connection_error(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection is gone rather than that the tool failed."""
    if isinstance(exc, MCPError):
        return exc.code == CONNECTION_CLOSED
    return isinstance(exc, _CONNECTION_ERRORS)


def is_answer_error(exc: BaseException) -> bool:
    """Whether ``exc`` is the server's (or the SDK's) verdict on one request."""
    return isinstance(exc, _ANSWER_ERRORS) and not is_connection_error(exc)


def describe(exc: BaseException) -> str:
    """One line about ``exc`` for logs and stats: its type and first message line."""
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return describe(exc.exceptions[0])
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def cap(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` characters, an ellipsis marking the cut."""
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


def shutting_down(server: str) -> OpError:
    """A request to a pool that has closed."""
    return OpError(ErrorCode.SHUTTING_DOWN, server, scope=("mcp",))
