"""The MCP server: one tool per op, each call one CSP/1 task to the daemon.

Built on the SDK's low-level ``Server`` with two handlers (tools/list, tools/call), so every
call goes through the daemon's own guard, cache, limits, audit and memory writes: the face
adds no behaviour of its own beyond spelling arguments as fields and replies as results.
Both read the ``ToolSet`` served now; with a ``ListChanged`` the server also tells its
clients when that set changes (``refresh``), in either era of the protocol. A call the client
cancels (``notifications/cancelled``: the SDK cancels its handler) or the face gives up on is
cancelled in the daemon too, by ``REQ:cancel`` naming the task's ID (SPEC C-6), so an exec
the client no longer wants leaves no process behind.
"""

from __future__ import annotations

import itertools
import logging
import os
import secrets
from typing import Any

import trio
from mcp.server import Server, ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    ImageContent,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
    ToolAnnotations,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from csp_web import __version__
from csp_web.client.trio_client import ClientClosed
from csp_web.mcp_face.asgi import PEER_UID
from csp_web.mcp_face.daemon_link import DaemonCaller, DaemonDown
from csp_web.mcp_face.images import images_of
from csp_web.mcp_face.owners import foreign_refusal
from csp_web.mcp_face.progress import Report, reporting_progress
from csp_web.mcp_face.refresh import ToolSet
from csp_web.mcp_face.results import (
    DAEMON_LIMITS,
    ArgumentError,
    ToolOutcome,
    outcome_of,
    refused,
    task_for,
)
from csp_web.mcp_face.tools import ToolSpec
from protocol import ErrorCode, Limits, Task

log = logging.getLogger(__name__)

SERVER_NAME = "csp-web"
# Past the daemon's own deadline (it answers timeout_exceeded itself), so the client never
# gives up on a reply the daemon is about to send.
_REPLY_MARGIN_S = 30.0
# REQ:cancel is an instant op; this bounds only a daemon that has stopped answering.
_CANCEL_WAIT_S = 5.0
# The IDs of the face's calls: REQ:cancel names one, and cancels every task of the uid with
# that ID, so they must not repeat across faces and runs (random prefix, as client.matcher's).
_call_ids = (f"mcp-{secrets.token_hex(6)}-{n}" for n in itertools.count(1))


class ListChanged:
    """Tells the client of a one-connection server (stdio) that its tool list changed: on a
    handshake-era connection that has listed the tools, ``notifications/tools/list_changed``;
    on a 2026-era one, the event on each ``subscriptions/listen`` stream it opened (that era
    sends change notifications on no other channel). Both eras see ``listChanged``."""

    def __init__(self) -> None:
        self.bus = InMemorySubscriptionBus()
        self.options = NotificationOptions(tools_changed=True)
        self._session: ServerSession | None = None  # the connection's, as of its last tools/list

    def listed(self, session: ServerSession) -> None:
        if session.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            self._session = session

    async def send(self) -> None:
        await self.bus.publish(ToolsListChanged())
        if self._session is not None:
            try:
                await self._session.send_tool_list_changed()  # on the connection's channel
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                log.info("tools/list_changed not sent: the client has gone")


def build_server(
    client: DaemonCaller,
    toolset: ToolSet,
    *,
    max_timeout_ms: int,
    limits: Limits = DAEMON_LIMITS,
    list_changed: ListChanged | None = None,
) -> Server[Any]:
    """The MCP server exposing the tools of ``toolset`` (read at each request), calling the
    daemon through ``client`` (owned by the caller and open while the server runs); a call
    whose frame the daemon would refuse under ``limits`` (its ``connection`` budgets) is
    answered ``frame_too_large`` here and never sent. With ``list_changed`` it serves
    ``subscriptions/listen`` and declares ``listChanged``."""
    listing = (-1, ListToolsResult(tools=[]))
    reply_timeout_s = max_timeout_ms / 1000 + _REPLY_MARGIN_S

    async def list_tools(
        ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        nonlocal listing
        if list_changed is not None:
            list_changed.listed(ctx.session)
        if listing[0] != toolset.version:
            tools = [_as_tool(tool) for tool in toolset.tools]
            listing = (toolset.version, ListToolsResult(tools=tools))
        return listing[1]

    async def call_tool(
        ctx: ServerRequestContext[Any], params: CallToolRequestParams
    ) -> CallToolResult:
        tool = toolset.by_name.get(params.name)
        if tool is None:  # a protocol error, as MCP's tools/call says (not a tool result)
            raise MCPError(INVALID_PARAMS, f"Unknown tool: {params.name}")
        async with reporting_progress(_progress_of(ctx)):
            outcome = await call(
                client,
                tool,
                params.arguments,
                reply_timeout_s,
                peer_uid=_peer_uid(ctx),
                limits=limits,
            )
        return await _as_result(outcome, tool)

    return Server(
        SERVER_NAME,
        version=__version__,
        instructions="csp-web's web and tool ops; each call runs as a CSP/1 task under the "
        "daemon's guard, cache, rate limits and audit.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_subscriptions_listen=ListenHandler(list_changed.bus) if list_changed else None,
    )


async def call(
    client: DaemonCaller,
    tool: ToolSpec,
    arguments: dict[str, Any] | None,
    timeout_s: float,
    *,
    peer_uid: int | None,
    limits: Limits = DAEMON_LIMITS,
) -> ToolOutcome:
    """Run one tool call of ``peer_uid`` (None: not known) as a task; the outcome, never an
    exception, for anything the daemon or the arguments get wrong (a frame past ``limits``
    included: ``results.fitting``), and ``permission_denied`` for state the daemon keeps per
    uid when ``peer_uid`` is not ours (``owners``)."""
    task_id = next(_call_ids)
    try:
        task = task_for(tool, arguments, task_id=task_id, limits=limits)
    except ArgumentError as exc:
        return refused(exc.code, exc.detail)
    if (why := foreign_refusal(task, peer_uid, os.getuid())) is not None:
        log.warning("%s refused: %s", tool.name, why)
        return refused(ErrorCode.PERMISSION_DENIED, why)
    answered = False
    try:
        reply = await client.call(task, timeout_s=timeout_s)
        answered = True
    except ClientClosed:
        log.warning("%s: the daemon connection is closed", tool.name)
        return refused(ErrorCode.NOT_AVAILABLE, "the csp-web daemon connection is closed")
    except DaemonDown as exc:  # --socket: the daemon is down or restarting
        log.warning("%s: %s", tool.name, exc)
        return refused(ErrorCode.DAEMON_UNAVAILABLE, str(exc))
    except trio.TooSlowError:
        return refused(ErrorCode.TIMEOUT_EXCEEDED, f"no reply in {timeout_s:.0f}s")
    finally:
        if not answered:  # cancelled by the client, or given up: nobody wants the work
            await cancel_in_daemon(client, task_id)
    if str(reply.get("ERROR")).startswith(f"{ErrorCode.FRAME_TOO_LARGE}:"):
        # Only a daemon with lower limits than the face's config (--socket, another file):
        # it counted the frame against the connection every caller shares (SPEC L-6).
        log.warning(
            "%s: the daemon refused a frame within the face's limits (connection.* of its "
            "config is lower: point --config at the daemon's file)",
            tool.name,
        )
    return outcome_of(tool, reply)


async def cancel_in_daemon(client: DaemonCaller, task_id: str) -> None:
    """Cancel the daemon's task ``task_id`` (``REQ:cancel``), shielded from the caller's own
    cancellation and bounded; a daemon that is gone has dropped the task already, and one
    that finished it answers ``unknown_task``: either is only logged."""
    cancel = Task("cancel", "SYS", "ACK", None, (("TARGET", task_id),))
    with trio.CancelScope(shield=True), trio.move_on_after(_CANCEL_WAIT_S):
        try:
            reply = await client.call(cancel, timeout_s=_CANCEL_WAIT_S)
        except (ClientClosed, DaemonDown, trio.TooSlowError) as exc:
            log.info("task %s not cancelled in the daemon: %s", task_id, exc)
            return
        log.info("task %s cancelled in the daemon: %s", task_id, reply.get("ERROR") or "ok")


def _peer_uid(ctx: ServerRequestContext[Any]) -> int | None:
    """Who made this call: over HTTP, the uid the face's gate admitted (``asgi.PEER_UID``;
    None when unknown); over stdio or in process (no HTTP request), the face's own user."""
    if ctx.request is None:
        return os.getuid()
    scope = getattr(ctx.request, "scope", None)
    uid = scope.get(PEER_UID) if isinstance(scope, dict) else None
    return uid if isinstance(uid, int) else None


def _progress_of(ctx: ServerRequestContext[Any]) -> Report:
    """How to report this call's progress: the session sends it only when the client asked
    (a ``progressToken`` on JSON-RPC, a callback in process), else the report is a no-op."""

    async def report(elapsed_s: float, message: str) -> None:
        await ctx.session.report_progress(elapsed_s, None, message)

    return report


def _as_tool(tool: ToolSpec) -> Tool:
    hints = tool.annotations
    return Tool(
        name=tool.name,
        description=tool.description,
        input_schema=tool.input_schema,
        output_schema=tool.output_schema,
        annotations=ToolAnnotations.model_validate(hints) if hints is not None else None,
    )


async def _as_result(outcome: ToolOutcome, tool: ToolSpec) -> CallToolResult:
    """The SDK's result: the text, then each PNG the reply names as an image."""
    images = await images_of(outcome.structured, tool.replies.keys())
    return CallToolResult(
        content=[
            TextContent(text=outcome.text),
            *(ImageContent(data=image.data, mime_type=image.mime_type) for image in images),
        ],
        structured_content=outcome.structured,
        is_error=outcome.is_error,
    )
