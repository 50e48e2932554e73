"""A small MCP server for the pool's tests and benchmark, built on the SDK's ``MCPServer``.

Run as ``python toy_server.py`` it speaks MCP on stdin/stdout; with ``--http`` it serves
streamable HTTP on 127.0.0.1 at a free port, which it prints as its first stdout line.
Each tool exists to drive one behaviour of the pool: reuse (``pid``), restarts (``crash``),
deadlines (``hang``, ``freeze``), calls in flight (``wait_for``), error results (``fail``),
structured output (``add``), caps (``big``), the passing of secrets (``getenv``, ``header``)
and stderr (``complain``).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import TypedDict

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server: MCPServer[object] = MCPServer("toy", log_level="WARNING")


class Sum(TypedDict):
    sum: int  # declared before the operands, so sorting the keys is visible
    a: int
    b: int


@server.tool()
def echo(text: str) -> str:
    """Return ``text`` unchanged."""
    return text


@server.tool()
def add(a: int, b: int) -> Sum:
    """Add two integers; the answer is structured content."""
    return {"sum": a + b, "a": a, "b": b}


@server.tool()
def fail(message: str) -> str:
    """Answer with an error result carrying ``message``."""
    raise ToolError(message)


@server.tool()
async def hang() -> str:
    """Never answer (but stay cancellable, as a slow tool would)."""
    await anyio.sleep_forever()
    return "unreachable"


@server.tool()
async def wait_for(path: str) -> str:
    """Answer "released" once ``path`` exists: a call that stays in flight until the test
    lets it finish."""
    while not os.path.exists(path):
        await anyio.sleep(0.01)
    return "released"


@server.tool()
async def freeze() -> str:
    """Block the server's whole event loop, as a wedged server would."""
    time.sleep(3600)  # blocking on purpose: a wedged server is what this tool plays
    return "unreachable"


@server.tool()
def crash() -> str:
    """Exit the server process at once, mid-request."""
    os._exit(3)


@server.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
def getenv(name: str) -> str:
    """The value of an environment variable of the server, or an empty string."""
    return os.environ.get(name, "")


@server.tool()
def complain(text: str) -> str:
    """Write ``text`` to the server's stderr, as a chatty server logs; return "ok"."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()
    return "ok"


@server.tool()
def big(chars: int) -> str:
    """A text of ``chars`` characters."""
    return "x" * chars


@server.tool()
def header(name: str, ctx: Context) -> str:
    """The value of an HTTP request header, or an empty string (always so on stdio)."""
    request = ctx.request_context.request
    return "" if request is None else str(request.headers.get(name, ""))


def serve_http() -> None:
    """Serve streamable HTTP on a free 127.0.0.1 port, printed first on stdout."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # before the port is told: connections wait in the backlog, not refused
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    if "--http" in sys.argv:
        serve_http()
    else:
        server.run()
