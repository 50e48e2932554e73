"""Forwarding IN:MEMORY frames to the Memory Specialist (SPEC M-3).

An orchestrator needs one socket: the daemon relays its memory reads and writes and hands back
the Memory Specialist's reply under the client's own ID. The daemon itself never touches memory
storage.
"""

from __future__ import annotations

import trio

from protocol import ErrorCode, Reply, Task

from .client import ClientClosed, open_client
from .config import MemoryConfig
from .errors import OpError


class MemoryRelay:
    """Forwards tasks over a fresh connection each (memory calls are rare next to web ops)."""

    def __init__(self, config: MemoryConfig) -> None:
        self._config = config

    async def forward(self, task: Task) -> Reply:
        """The Memory Specialist's reply to ``task``; raises OpError(memory_unavailable)."""
        path = self._config.socket_path
        if path is None:
            raise OpError(ErrorCode.MEMORY_UNAVAILABLE, "no memory.socket_path configured")
        upstream = Task(
            task.req,
            task.domain,
            task.out,
            task.inline,
            tuple(f for f in task.fields if f[0] != "ID"),
        )
        try:
            async with open_client(
                path, id_prefix="r", connect_timeout_s=self._config.connect_timeout_s
            ) as client:
                reply = await client.call(upstream, timeout_s=self._config.relay_timeout_s)
        except (OSError, ClientClosed, trio.TooSlowError) as exc:
            raise OpError(ErrorCode.MEMORY_UNAVAILABLE, type(exc).__name__) from exc
        fields = tuple(f for f in reply.fields if f[0] != "ID")
        if task.id is not None:
            fields = (("ID", task.id), *fields)
        return Reply(reply.status, fields)
