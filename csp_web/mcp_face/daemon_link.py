"""How the MCP face reaches the daemon core: a running daemon's socket, or one in process.

Either way the face is a CSP/1 client, so every tool call is a task the daemon admits,
validates, guards, caches, rate-limits, audits and logs to memory as any other.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
import trio.testing

from csp_web.config import Config
from csp_web.core.client import Client, open_client, open_stream_client


@asynccontextmanager
async def open_daemon_client(config: Config, socket_path: str | None) -> AsyncIterator[Client]:
    """A client of the daemon at ``socket_path``, else of a daemon core run in process.

    Raises OSError or trio.TooSlowError when the socket does not answer. The in-process
    daemon stops when the block ends (its stream sees EOF, as ``csp-web serve`` at the end
    of stdin: in-flight work finishes, the outbox is flushed) or on SIGTERM/SIGINT, which
    then cancels the block.
    """
    if socket_path is not None:
        async with open_client(socket_path) as client:
            yield client
        return
    async with open_in_process_daemon(config) as client:
        yield client


@asynccontextmanager
async def open_in_process_daemon(config: Config) -> AsyncIterator[Client]:
    """Run the daemon as ``csp-web serve`` does (same specialists, outbox, memory link and
    signals), serving one in-memory stream in place of stdin, and yield its client. The
    caller holds the state directory's lock."""
    from csp_web.app.compose import open_app_daemon
    from csp_web.core.lifecycle import serve

    client_side, daemon_side = trio.testing.memory_stream_pair()
    async with open_app_daemon(config) as daemon, trio.open_nursery() as nursery:

        async def run_daemon(*, task_status: trio.TaskStatus[object]) -> None:
            await serve(daemon, stdio=daemon_side, socket_path=None, task_status=task_status)
            nursery.cancel_scope.cancel()  # stopped by a signal: so is the face

        await nursery.start(run_daemon)
        async with open_stream_client(client_side) as client:
            yield client
