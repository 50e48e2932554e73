"""A trio client for CSP/1 daemons: many concurrent calls over one connection, matched by ID.

    async with open_client("/run/csp-web/csp.sock") as client:
        reply = await client.call({"REQ": "fetch", "IN": "WEB", "OUT": "CONTENT",
                                   "URL": "https://example.com"})

The daemon uses the same client to reach the Memory Specialist (outbox delivery and relay).
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import cast

import trio

from csp_web.client.matcher import CLIENT_LIMITS, ClientClosed, ReplyMatcher, new_id_prefix
from protocol import Limits, ProtocolError, Reply, Task

__all__ = [
    "Client",
    "ClientClosed",
    "PendingBatch",
    "PendingCall",
    "open_client",
    "open_stream_client",
    "running_beside",
]


class _Pending:
    """One waiter for a whole batch: its replies in order, set as they arrive."""

    __slots__ = ("event", "left", "replies")

    def __init__(self, size: int) -> None:
        self.event = trio.Event()
        self.replies: list[Reply | None] = [None] * size
        self.left = size


class PendingCall:
    """A frame sent and awaiting its reply; made by ``Client.start_call``."""

    def __init__(self, client: Client, task_id: str, pending: _Pending) -> None:
        self._client = client
        self.id = task_id
        self._pending = pending

    async def reply(self, *, timeout_s: float = 60.0) -> Reply:
        """The reply; raises ClientClosed when the connection ends first and
        trio.TooSlowError after ``timeout_s``."""
        try:
            with trio.fail_after(timeout_s):
                await self._pending.event.wait()
        finally:
            self._client._forget([self.id], self._pending)
        reply = self._pending.replies[0]
        if reply is None:
            raise ClientClosed("connection closed before the reply")
        return reply


class PendingBatch:
    """Frames sent and awaiting their replies; made by ``Client.start_batch``."""

    def __init__(self, client: Client, ids: list[str], pending: _Pending) -> None:
        self._client = client
        self.ids = ids
        self._pending = pending

    async def replies(self, *, timeout_s: float = 60.0) -> list[Reply]:
        """The replies in the order sent; raises ClientClosed when the connection ends first
        and trio.TooSlowError after ``timeout_s``."""
        pending = self._pending
        try:
            with trio.fail_after(timeout_s):
                if pending.left:
                    await pending.event.wait()
        finally:
            if pending.left:  # timed out or cancelled
                self._client._forget(self.ids, pending)
        if pending.left:
            raise ClientClosed("connection closed before the reply")
        return cast(list[Reply], pending.replies)  # every slot is filled once left is 0


class Client:
    """Sends tasks and routes each reply to its caller by ID. Made by ``open_client``."""

    def __init__(self, stream: trio.abc.Stream, limits: Limits, *, id_prefix: str) -> None:
        self._stream = stream
        self._matcher: ReplyMatcher[_Pending] = ReplyMatcher(limits, id_prefix=id_prefix)
        self._send_lock = trio.Lock()

    async def call(self, task: Task | Mapping[str, str], *, timeout_s: float = 60.0) -> Reply:
        """Send ``task`` and return its reply; an ID is added when the task has none.

        Raises ClientClosed when the connection ends first and trio.TooSlowError after
        ``timeout_s``.
        """
        (reply,) = await self.call_many([task], timeout_s=timeout_s)
        return reply

    async def call_many(
        self, tasks: list[Task | Mapping[str, str]], *, timeout_s: float = 60.0
    ) -> list[Reply]:
        """Send ``tasks`` in order in one write (pipelined) and return their replies in order;
        an ID is added to each task that has none. Raises as ``call_batch``."""
        ids, data = self._matcher.frames(tasks)
        return await self.call_batch(ids, data, timeout_s=timeout_s)

    async def call_batch(
        self, ids: list[str], data: bytes, *, timeout_s: float = 60.0
    ) -> list[Reply]:
        """Send ``data``, the serialised frames whose IDs are ``ids`` in order, in one write,
        and return their replies in that order. One waiter serves the whole batch: it wakes
        once, when the last reply is in, however many frames the batch holds.

        Raises ValueError when an ID is repeated or already awaited, ClientClosed when the
        connection ends before every reply, trio.TooSlowError after ``timeout_s``.
        """
        with trio.fail_after(timeout_s):
            batch = await self.start_batch(ids, data)
            return await batch.replies(timeout_s=math.inf)

    async def start_batch(self, ids: list[str], data: bytes) -> PendingBatch:
        """Send ``data`` (frames with IDs ``ids``, as ``call_batch``) now and return the batch
        awaiting its replies: a caller that must keep batches in order on the wire sends them
        from one task and collects their replies elsewhere. Raises as ``call_batch``."""
        pending = self._register(ids)
        try:
            await self._send(data)
        except BaseException:
            self._forget(ids, pending)
            raise
        return PendingBatch(self, ids, pending)

    async def start_call(self, task: Task | Mapping[str, str]) -> PendingCall:
        """Send ``task`` now and return its pending reply, for callers that stream frames
        and collect replies as they come. Raises ValueError when its ID is already awaited."""
        (task_id,), data = self._matcher.frames([task])
        pending = self._register([task_id])
        try:
            await self._send(data)
        except BaseException:
            self._forget([task_id], pending)
            raise
        return PendingCall(self, task_id, pending)

    async def serve_replies(self) -> None:
        """Read replies until EOF, waking their callers; run by ``open_client``."""
        try:
            while True:
                data = await self._stream.receive_some(65536)
                matched, peer_closed = self._matcher.receive_data(data)
                for pending, index, reply in matched:
                    pending.replies[index] = reply
                    pending.left -= 1
                    if not pending.left:
                        pending.event.set()
                if peer_closed or not data:
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError, ProtocolError):
            return
        finally:
            self._close_pending()

    def _close_pending(self) -> None:
        for pending in self._matcher.close():
            pending.event.set()

    def _register(self, ids: list[str]) -> _Pending:
        pending = _Pending(len(ids))
        self._matcher.expect(ids, [pending] * len(ids))
        return pending

    def _forget(self, ids: list[str], pending: _Pending) -> None:
        """Stop waiting for the replies of ``ids`` still awaited by ``pending``."""
        self._matcher.forget(ids, pending)

    async def _send(self, data: bytes) -> None:
        try:
            async with self._send_lock:
                await self._stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise ClientClosed(str(exc)) from exc


@asynccontextmanager
async def open_client(
    path: str,
    *,
    limits: Limits | None = None,
    id_prefix: str | None = None,
    connect_timeout_s: float = 5.0,
) -> AsyncIterator[Client]:
    """Connect to the Unix socket at ``path``; the client and its reader close on exit.

    Tasks sent without ``ID`` get ``<id_prefix><n>``; the default prefix is random per client
    (``c`` and 12 hex digits), so automatic IDs do not repeat across runs, where a Memory
    Specialist that de-duplicates by ID would take a new write for an old one (SPEC M-2).

    Raises OSError when nothing listens there, trio.TooSlowError when connecting stalls.
    """
    with trio.fail_after(connect_timeout_s):
        stream = await trio.open_unix_socket(path)
    async with open_stream_client(stream, limits=limits, id_prefix=id_prefix) as client:
        yield client


@asynccontextmanager
async def open_stream_client(
    stream: trio.abc.Stream, *, limits: Limits | None = None, id_prefix: str | None = None
) -> AsyncIterator[Client]:
    """A client over ``stream``, already connected (a Unix socket, an in-process pair); the
    client closes the stream on exit. Automatic IDs as ``open_client``'s."""
    client = Client(
        stream,
        limits or CLIENT_LIMITS,
        id_prefix=id_prefix if id_prefix is not None else new_id_prefix(),
    )
    async with stream, running_beside(client.serve_replies):
        yield client


@asynccontextmanager
async def running_beside(task: Callable[[], Awaitable[None]]) -> AsyncIterator[None]:
    """Run ``task``, which never raises, for as long as the block; cancelled at its end. The
    block's own exception comes back unwrapped (ClientClosed, OSError, TooSlowError), not
    inside the nursery's exception group, so callers can catch it as they expect."""
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(task)
            try:
                yield
            finally:
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
