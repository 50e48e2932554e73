"""``csp-web mcp``: the MCP face over stdio (default) or streamable HTTP.

HTTP is served on a Unix socket (0600 in a 0700 folder, as the daemon's own) or on a loopback
port, never another address; the endpoint is ``/mcp``, stateless, JSON responses, with the
SDK's DNS-rebinding checks on Host and Origin. Only the uids the daemon's socket admits
(``socket.allowed_uids``, else our own) are served, on either: the face calls the daemon as
its own uid, so it applies the daemon's rule itself (``peers``).
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import trio
from mcp.server import Server

from csp_web.config import Config, workspace_roots
from csp_web.core.api.ports import allowed_uids
from csp_web.core.transports.unix import open_unix_listener
from csp_web.mcp_face.asgi import Admit, App, Message, Receive, Send, serve_asgi
from csp_web.mcp_face.daemon_link import (
    DaemonCaller,
    DaemonLink,
    OpenInProcess,
    open_daemon_client,
)
from csp_web.mcp_face.drain import serve_draining
from csp_web.mcp_face.peers import uid_gate
from csp_web.mcp_face.refresh import REREAD_S, ToolSet, keep_tools_fresh, reconnects
from csp_web.mcp_face.server import ListChanged, build_server
from csp_web.mcp_face.tools import ToolSpec, build_tools, parse_op_table
from protocol import Limits, NumberError, Task, parse_uint

log = logging.getLogger(__name__)

ENDPOINT = "/mcp"
# As server._REPLY_MARGIN_S: past the daemon's own deadline, which it answers itself.
_STDIO_DRAIN_MARGIN_S = 30.0
_OPS = Task("ops", "SYS", "OPS")


@dataclass(frozen=True)
class FaceOptions:
    """``socket_path``: a running daemon (else one in process); ``http``: a loopback port
    (digits) or a Unix socket path to serve streamable HTTP on (else stdio); ``tools``: the
    tool names to expose (else every op but IN:SYS, exec only when configured);
    ``tools_reread_s``: the longest the tool list goes without reading the daemon's op table
    again (it is also read at each reconnect)."""

    socket_path: str | None = None
    http: str | None = None
    tools: tuple[str, ...] | None = None
    tools_reread_s: float = REREAD_S


async def serve_mcp_face(
    config: Config,
    options: FaceOptions,
    *,
    in_process: OpenInProcess,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until stdin ends (stdio), or a signal; ``task_status`` gets where it listens
    (``stdio``, a URL or ``unix:<path>``). Raises ToolTableError for an unknown tool name,
    OSError when the daemon socket does not answer, SocketSetupError for a bad HTTP path."""
    async with open_daemon_client(config, options.socket_path, in_process=in_process) as client:
        # Made before the first read, so a reconnect during it is not missed.
        wait_reconnect = reconnects(client) if isinstance(client, DaemonLink) else None
        load = partial(load_tools, client, config, options.tools)
        toolset = ToolSet(await load())
        # Streamable HTTP here is stateless, JSON responses: no stream to notify on; each
        # tools/list there reads the tools served now.
        changed = ListChanged() if options.http is None else None
        server = build_server(
            client,
            toolset,
            max_timeout_ms=config.tasks.max_timeout_ms,
            limits=daemon_limits(config),
            list_changed=changed,
        )
        async with trio.open_nursery() as nursery:
            if options.socket_path is not None:  # else the in-process daemon watches them
                nursery.start_soon(_stop_on_signal, nursery.cancel_scope)
            nursery.start_soon(
                partial(
                    keep_tools_fresh,
                    toolset,
                    load,
                    changed.send if changed is not None else _nobody,
                    reread_s=options.tools_reread_s,
                    wait_reconnect=wait_reconnect,
                )
            )
            if changed is None:
                gate = uid_gate(lambda: allowed_uids(config.socket))
                await _serve_http(server, str(options.http), gate, task_status)
            else:
                drain_s = config.tasks.max_timeout_ms / 1000 + _STDIO_DRAIN_MARGIN_S
                await _serve_stdio(server, drain_s, changed, task_status)
            nursery.cancel_scope.cancel()


def daemon_limits(config: Config) -> Limits:
    """The frame budgets the daemon reads the face's frames with (SPEC L-1 to L-3): its
    ``connection`` section, as the face's config gives it (with ``--socket``, point
    ``--config`` at the daemon's file)."""
    budgets = config.connection
    return Limits(budgets.max_line_bytes, budgets.max_frame_bytes, budgets.max_fields)


async def load_tools(
    client: DaemonCaller, config: Config, selected: Sequence[str] | None
) -> list[ToolSpec]:
    """The daemon's op table (REQ:ops) as the tools to expose."""
    entries = parse_op_table(await client.call(_OPS, timeout_s=30.0))
    return build_tools(
        entries,
        selected=selected,
        exec_configured=bool(workspace_roots(config)),
        max_timeout_ms=config.tasks.max_timeout_ms,
        max_line_bytes=config.connection.max_line_bytes,
    )


async def _serve_stdio(
    server: Server[Any], drain_s: float, changed: ListChanged, task_status: trio.TaskStatus[str]
) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        task_status.started("stdio")
        await serve_draining(server, read, write, drain_s, changed.options)


async def _nobody() -> None:
    """No client to tell (stateless HTTP reads the current tools at each request)."""


async def _serve_http(
    server: Server[Any], where: str, admit: Admit, task_status: trio.TaskStatus[str]
) -> None:
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecuritySettings

    listeners, url = await _listen(where)
    hosts = _own_hosts(listeners[0])
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=[f"http://{host}" for host in hosts],
    )
    manager = StreamableHTTPSessionManager(
        app=server, json_response=True, stateless=True, security_settings=security
    )

    async def app(scope: Message, receive: Receive, send: Send) -> None:
        if scope["path"] != ENDPOINT:
            await _not_found(send)
            return
        if scope["method"] == "GET":
            await _no_stream(send)
            return
        await manager.handle_request(scope, receive, send)

    routed: App = app
    async with manager.run(), trio.open_nursery() as nursery:
        await nursery.start(partial(serve_asgi, routed, listeners, admit=admit))
        log.info("MCP face serving streamable HTTP at %s", url)
        print(url, flush=True)  # HTTP mode: stdout is not a wire, and tests read it
        task_status.started(url)


async def _listen(where: str) -> tuple[list[trio.SocketListener], str]:
    if (port := _tcp_port(where)) is not None:
        listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        return list(listeners), f"http://127.0.0.1:{port}{ENDPOINT}"
    listener = await open_unix_listener(where, backlog=128)
    return [listener], f"unix:{where}"


def _own_hosts(listener: trio.SocketListener) -> list[str]:
    """The Host values that name this listener, each also an Origin (``http://<host>``).

    Whole values, never the SDK's ``host:*`` patterns: those let any other loopback port's
    page (another local web app, a dev server) pass the Origin check, since a page's origin
    is its scheme, host and port together (RFC 6454 §4). A Unix socket has no port, and a
    client names it ``localhost`` by convention."""
    address = listener.socket.getsockname()
    if isinstance(address, tuple):
        port = address[1]
        return [f"127.0.0.1:{port}", f"localhost:{port}"]
    return ["localhost", "127.0.0.1"]


async def _not_found(send: Send) -> None:
    body = b"not found; the MCP endpoint is " + ENDPOINT.encode() + b"\n"
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 404, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _no_stream(send: Send) -> None:
    """405 to a GET: this stateless, JSON-response endpoint sends nothing unasked, so it
    offers no SSE stream, and the Streamable HTTP transport says to answer 405 then (the
    SDK's stateless GET instead held the connection open, silent, until it timed out)."""
    body = b"no server-initiated stream: POST JSON-RPC requests to " + ENDPOINT.encode() + b"\n"
    headers = [
        (b"content-type", b"text/plain"),
        (b"content-length", str(len(body)).encode()),
        (b"allow", b"POST"),
    ]
    await send({"type": "http.response.start", "status": 405, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _stop_on_signal(scope: trio.CancelScope) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            log.info("%s: stopping the MCP face", signal.Signals(signum).name)
            scope.cancel()
            return


def _tcp_port(where: str) -> int | None:
    """The TCP port ``where`` names (ASCII digits, at most 65535), else None: a socket path.
    ``str.isdigit`` took "²", and int() then raised."""
    try:
        return parse_uint(where, max_digits=5, maximum=65535)
    except NumberError:
        return None
