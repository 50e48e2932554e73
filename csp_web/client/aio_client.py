"""An asyncio client for CSP/1 daemons, for callers whose event loop is asyncio's.

    async with open_asyncio_client("/run/csp-web/csp.sock") as client:
        reply = await client.call({"REQ": "ping", "IN": "SYS", "OUT": "PONG"})

The same contract as the trio client (``csp_web.client.trio_client``): many concurrent calls
over one connection, each reply routed to its caller by ID, automatic IDs with a random per-client
prefix. Both drive the one sans-IO matcher (``csp_web.client.matcher``); only the I/O differs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress

from csp_web.client.matcher import ClientClosed, ReplyMatcher
from protocol import Limits, ProtocolError, Reply, Task

__all__ = ["AsyncioClient", "ClientClosed", "open_asyncio_client"]

_READ_BYTES = 65536


class AsyncioClient:
    """Sends tasks and routes each reply to its caller by ID. Made by ``open_asyncio_client``."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        matcher: ReplyMatcher[asyncio.Future[Reply]],
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._matcher = matcher
        self._send_lock = asyncio.Lock()

    async def call(self, task: Task | Mapping[str, str], *, timeout_s: float = 60.0) -> Reply:
        """Send ``task`` and return its reply; an ID is added when the task has none.

        Raises ClientClosed when the connection ends first, TimeoutError after ``timeout_s``
        and ValueError when the task's ID is already awaiting a reply."""
        (reply,) = await self.call_many([task], timeout_s=timeout_s)
        return reply

    async def call_many(
        self, tasks: list[Task | Mapping[str, str]], *, timeout_s: float = 60.0
    ) -> list[Reply]:
        """Send ``tasks`` in order in one write (pipelined) and return their replies in
        order; raises as ``call``, and ValueError when an ID repeats within ``tasks``."""
        ids, data = self._matcher.frames(tasks)
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in ids]
        self._matcher.expect(ids, futures)
        try:
            async with asyncio.timeout(timeout_s):
                await self._send(data)
                return list(await asyncio.gather(*futures))
        finally:
            for task_id, future in zip(ids, futures, strict=True):
                self._matcher.forget([task_id], future)
                if future.done() and not future.cancelled():
                    future.exception()  # retrieved: gather reports only the first

    async def serve_replies(self) -> None:
        """Read replies until EOF, resolving their callers; run by ``open_asyncio_client``."""
        try:
            while not self._matcher.closed:
                data = await self._reader.read(_READ_BYTES)
                matched, peer_closed = self._matcher.receive_data(data)
                for future, _, reply in matched:
                    if not future.done():
                        future.set_result(reply)
                if peer_closed or not data:
                    return
        except (ConnectionError, ProtocolError):
            return
        finally:
            self._close_pending()

    def _close_pending(self) -> None:
        for future in self._matcher.close():
            if not future.done():
                future.set_exception(ClientClosed("connection closed before the reply"))

    async def _send(self, data: bytes) -> None:
        try:
            async with self._send_lock:
                self._writer.write(data)
                await self._writer.drain()
        except ConnectionError as exc:
            raise ClientClosed(str(exc)) from exc


@asynccontextmanager
async def open_asyncio_client(
    path: str,
    *,
    limits: Limits | None = None,
    id_prefix: str | None = None,
    connect_timeout_s: float = 5.0,
) -> AsyncIterator[AsyncioClient]:
    """Connect to the daemon's Unix socket at ``path``; the client, its reader task and the
    connection close on exit. Automatic IDs as the trio client's (``open_client``).

    Raises OSError when nothing listens there, TimeoutError when connecting stalls."""
    async with asyncio.timeout(connect_timeout_s):
        reader, writer = await asyncio.open_unix_connection(path, limit=_READ_BYTES)
    client = AsyncioClient(reader, writer, ReplyMatcher(limits, id_prefix=id_prefix))
    replies = asyncio.create_task(client.serve_replies())
    try:
        yield client
    finally:
        replies.cancel()
        with suppress(asyncio.CancelledError):
            await replies
        client._close_pending()
        writer.close()
        with suppress(ConnectionError):
            await writer.wait_closed()
