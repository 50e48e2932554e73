"""An asyncio client for CSP/1 daemons, for callers whose event loop is asyncio's.

    async with open_asyncio_client("/run/csp-web/csp.sock") as client:
        reply = await client.call({"REQ": "ping", "IN": "SYS", "OUT": "PONG"})

The same contract as the trio client (``csp_web.client.trio_client``): many concurrent calls
over one connection, each reply routed to its caller by ID, automatic IDs with a random per-client
prefix. Both drive the one sans-IO codec (``protocol.Connection``); only the I/O differs.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress

from csp_web.client.trio_client import (
    ClientClosed,
    as_task,
    new_id_prefix,
    received_replies,
    with_id,
)
from protocol import Connection, Limits, ProtocolError, Reply, Task

__all__ = ["AsyncioClient", "ClientClosed", "open_asyncio_client"]

_READ_BYTES = 65536


class AsyncioClient:
    """Sends tasks and routes each reply to its caller by ID. Made by ``open_asyncio_client``."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        limits: Limits,
        *,
        id_prefix: str,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._codec = Connection(limits)
        self._pending: dict[str, asyncio.Future[Reply]] = {}
        self._ids = (f"{id_prefix}{n}" for n in itertools.count(1))
        self._send_lock = asyncio.Lock()
        self._closed = False

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
        frames = [self._with_id(as_task(task)) for task in tasks]
        ids = [frame.id or "" for frame in frames]
        futures = self._register(ids)
        try:
            async with asyncio.timeout(timeout_s):
                await self._send(b"".join(self._codec.send(frame) for frame in frames))
                return list(await asyncio.gather(*futures))
        finally:
            for task_id, future in zip(ids, futures, strict=True):
                if self._pending.get(task_id) is future:
                    del self._pending[task_id]
                if future.done() and not future.cancelled():
                    future.exception()  # retrieved: gather reports only the first

    async def serve_replies(self) -> None:
        """Read replies until EOF, resolving their callers; run by ``open_asyncio_client``."""
        try:
            while not self._closed:
                data = await self._reader.read(_READ_BYTES)
                self._codec.receive_data(data)
                if self._drain() or not data:
                    return
        except (ConnectionError, ProtocolError):
            return
        finally:
            self._close_pending()

    def _drain(self) -> bool:
        replies, closed = received_replies(self._codec)
        for reply in replies:
            future = self._pending.pop(reply.id or "", None)
            if future is not None and not future.done():
                future.set_result(reply)
        return closed

    def _register(self, ids: list[str]) -> list[asyncio.Future[Reply]]:
        if self._closed:
            raise ClientClosed("connection is closed")
        if len(set(ids)) < len(ids) or any(task_id in self._pending for task_id in ids):
            raise ValueError("an ID is repeated or already awaiting a reply")
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in ids]
        self._pending.update(zip(ids, futures, strict=True))
        return futures

    def _close_pending(self) -> None:
        self._closed = True
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ClientClosed("connection closed before the reply"))
        self._pending.clear()

    def _with_id(self, task: Task) -> Task:
        return with_id(task, self._ids)

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
    client = AsyncioClient(
        reader,
        writer,
        limits or Limits(max_line_bytes=64 << 20, max_frame_bytes=64 << 20, max_fields=100_000),
        id_prefix=id_prefix if id_prefix is not None else new_id_prefix(),
    )
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
