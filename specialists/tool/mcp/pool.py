"""Every configured MCP server behind one API; ``open_mcp_pool`` owns all their sessions.

A reload (``McpPool.prepare_reload``, on SIGHUP) changes the set of servers in place: an
added server becomes callable at once (it starts on its first request, as at start-up); a
removed one takes no new request (``not_configured``), its requests already made finish
within their own deadlines, then its session closes and its process is reaped; a changed one
is a removal and an addition under one name (new requests go to the new session at once);
an unchanged one keeps its session, unless it was given up on (``failed``): a reload gives
it a fresh start.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, TypeVar

import trio
from mcp import Client, MCPError
from mcp.types import CallToolResult, Tool

from specialists.tool.mcp.config import McpConfig, ServerConfig

from .errors import (
    NOT_CONFIGURED,
    describe,
    is_answer_error,
    shutting_down,
    tool_error,
    unavailable,
)
from .render import (
    McpResult,
    ToolList,
    build_result,
    build_tool_info,
    check_params,
    check_tool,
)
from .session import ServerSession, ServerStats

T = TypeVar("T")

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class ReloadSummary:
    """What a reload did to the pool's servers, by name."""

    added: list[str] = dataclasses.field(default_factory=list)
    removed: list[str] = dataclasses.field(default_factory=list)
    changed: list[str] = dataclasses.field(default_factory=list)  # restarted: spec changed
    retried: list[str] = dataclasses.field(default_factory=list)  # restarted: was failed

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed or self.retried)

    def __str__(self) -> str:
        parts = [
            f"{what} {', '.join(names)}"
            for what, names in (
                ("added", self.added),
                ("removed", self.removed),
                ("restarted (changed)", self.changed),
                ("restarted (failed)", self.retried),
            )
            if names
        ]
        return "; ".join(parts) or "no change"


class McpPool:
    """Calls tools on the configured servers; made by ``open_mcp_pool``, valid inside it.

    Each server starts on its first request and is then reused by every request; concurrent
    requests share its one connection. Every request has a deadline: ``timeout_s`` when
    given, else ``config.call_timeout_s``; it covers any wait for the server to start.
    """

    def __init__(self, config: McpConfig, nursery: trio.Nursery) -> None:
        self._config = config
        self._nursery = nursery
        self._sessions: dict[str, ServerSession] = {}
        self._closed = False
        for name, spec in config.servers.items():
            self._start(name, spec)

    def _start(self, name: str, spec: ServerConfig) -> None:
        session = ServerSession(name, spec, self._config)
        self._sessions[name] = session
        self._nursery.start_soon(session.serve)

    def prepare_reload(self, config: McpConfig) -> Callable[[], ReloadSummary]:
        """The pool's part of a reload: nothing changes until the returned commit runs, which
        applies ``config`` (see the module's docstring) and says what it did."""

        def commit() -> ReloadSummary:
            old, self._config = self._config, config
            summary = ReloadSummary()
            for name, session in list(self._sessions.items()):
                spec = config.servers.get(name)
                if spec is None:
                    summary.removed.append(name)
                elif spec != old.servers[name]:
                    summary.changed.append(name)
                elif session.stats().state == "failed":
                    summary.retried.append(name)
                else:
                    session.set_budgets(config)
                    continue
                del self._sessions[name]
                self._nursery.start_soon(session.retire)
            for name, spec in config.servers.items():
                if name not in self._sessions:
                    if name not in old.servers:
                        summary.added.append(name)
                    self._start(name, spec)
            # Configuration order, as REQ:stats lists them.
            self._sessions = {name: self._sessions[name] for name in config.servers}
            if not summary.empty:
                logger.info("MCP servers reloaded: %s", summary)
            return summary

        return commit

    def close(self) -> None:
        """Refuse every later request (SHUTTING_DOWN) and close every session."""
        self._closed = True
        for session in self._sessions.values():
            session.close()

    @property
    def servers(self) -> tuple[str, ...]:
        """The configured SERVER names, in configuration order."""
        return tuple(self._sessions)

    def stats(self) -> dict[str, ServerStats]:
        """Each server's state (idle/starting/running/backoff/failed...), calls and restarts."""
        return {name: session.stats() for name, session in self._sessions.items()}

    def stats_lines(self) -> tuple[str, ...]:
        """One compact JSON object per server, in configuration order: the MCP lines of
        ``REQ:stats`` (a server given up on shows ``"state":"failed"`` and its cause)."""
        return tuple(
            json.dumps({"server": name, **dataclasses.asdict(stats)}, separators=(",", ":"))
            for name, stats in self.stats().items()
        )

    async def list_tools(self, server: str, *, timeout_s: float | None = None) -> ToolList:
        """The tools ``server`` offers, each with its input schema.

        Raises OpError: MCP_UNAVAILABLE (not configured, not started, reached or answered in
        time); MCP_TOOL_ERROR (detail ``tools/list``) when the server answers with an error.
        """
        session = self._session(server)
        began = trio.current_time()
        deadline = began + self._timeout(timeout_s)
        tools = await self._answer(server, "tools/list", began, session, self._list_all, deadline)
        return ToolList(
            server=server,
            tools=tuple(build_tool_info(tool) for tool in tools),
            exec_time_ms=_ms_since(began),
        )

    async def call_tool(
        self, server: str, tool: str, params: Mapping[str, Any], *, timeout_s: float | None = None
    ) -> McpResult:
        """Call ``tool`` on ``server`` with ``params``, the already-parsed PARAMS object.

        ``render.parse_params`` turns the wire's JSON text into ``params``. Raises OpError:
        INVALID_FIELD (PARAMS not a JSON object, TOOL not a name); MCP_UNAVAILABLE (REASON
        not_configured, start_failed:<cause>, start_timeout, call_timeout, connection_lost,
        backing_off);
        MCP_TOOL_ERROR for an error result or error answer, its text in ERROR_SUMMARY.
        ValueError for a ``timeout_s`` that is not positive (the caller's bug, not a reply).
        """
        session = self._session(server)
        check_tool(tool)
        arguments = check_params(params)
        began = trio.current_time()
        deadline = began + self._timeout(timeout_s)
        send = partial(_call, tool, arguments)
        result = await self._answer(server, tool, began, session, send, deadline)
        return build_result(
            server, tool, result, exec_time_ms=_ms_since(began), config=self._config
        )

    async def _answer(
        self,
        server: str,
        what: str,
        began: float,
        session: ServerSession,
        send: Callable[[Client], Awaitable[T]],
        deadline: float,
    ) -> T:
        """``session.request``, with the server's answer errors made MCP_TOOL_ERROR."""
        try:
            return await session.request(send, deadline=deadline)
        except Exception as exc:
            if not is_answer_error(exc):
                raise
            text = exc.message if isinstance(exc, MCPError) else describe(exc)
            raise tool_error(
                server,
                what,
                text,
                max_chars=self._config.max_error_chars,
                exec_time_ms=_ms_since(began),
            ) from exc

    async def _list_all(self, client: Client) -> list[Tool]:
        tools: list[Tool] = []
        cursor: str | None = None
        for _ in range(self._config.max_tool_pages):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        return tools

    def _session(self, server: str) -> ServerSession:
        if self._closed:
            raise shutting_down(server)
        try:
            return self._sessions[server]
        except KeyError:
            raise unavailable(server, NOT_CONFIGURED) from None

    def _timeout(self, timeout_s: float | None) -> float:
        if timeout_s is None:
            return self._config.call_timeout_s
        if not timeout_s > 0:
            raise ValueError("timeout_s must be positive")
        return timeout_s


async def _call(tool: str, arguments: dict[str, Any], client: Client) -> CallToolResult:
    return await client.call_tool(tool, arguments)


def _ms_since(began: float) -> int:
    return round((trio.current_time() - began) * 1000)


@asynccontextmanager
async def open_mcp_pool(config: McpConfig) -> AsyncIterator[McpPool]:
    """A pool over ``config.servers``; no server starts until its first request.

    On exit, also by cancellation, every session closes and every server process is reaped
    within the SDK's bounded stdio shutdown (stdin closed, 2 s grace, SIGTERM, 2 s, SIGKILL).
    Requests still waiting then fail with SHUTTING_DOWN.
    """
    try:
        async with trio.open_nursery() as nursery:
            pool = McpPool(config, nursery)
            try:
                yield pool
            finally:
                pool.close()
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The serve tasks raise nothing but Cancelled, so a group can only wrap the body's
        # own error; give the caller that error, as if no nursery stood in between.
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
