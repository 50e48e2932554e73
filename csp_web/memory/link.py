"""How the daemon reaches its Memory Specialist: the only thing outbox delivery and the relay
know about it. Either a Unix socket (``memory.socket_path``) or the embedded one
(``csp_web.app.memory_path``); both speak CSP/1 over a ``trio.abc.Stream``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import trio

from csp_web.client.trio_client import Client, open_stream_client
from csp_web.config import MemoryConfig

Connect = Callable[[], Awaitable[trio.abc.Stream]]


class MemoryLink:
    """Opens CSP/1 clients to one Memory Specialist; ``name`` says which, for logs and stats."""

    def __init__(self, connect: Connect, *, name: str, connect_timeout_s: float) -> None:
        self._connect = connect
        self.name = name
        self._connect_timeout_s = connect_timeout_s

    @asynccontextmanager
    async def open_client(self, *, id_prefix: str) -> AsyncIterator[Client]:
        """A client on a new connection, closed on exit. Raises OSError when nothing listens,
        trio.TooSlowError when connecting stalls past ``memory.connect_timeout_s``."""
        with trio.fail_after(self._connect_timeout_s):
            stream = await self._connect()
        async with open_stream_client(stream, id_prefix=id_prefix) as client:
            yield client


def socket_link(memory: MemoryConfig) -> MemoryLink | None:
    """A link to the Memory Specialist at ``memory.socket_path``; None when none is set."""
    path = memory.socket_path
    if path is None:
        return None

    async def connect() -> trio.abc.Stream:
        return await trio.open_unix_socket(path)

    return MemoryLink(connect, name=path, connect_timeout_s=memory.connect_timeout_s)
