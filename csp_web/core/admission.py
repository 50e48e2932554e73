"""Bounded admission to a specialist: N running, M queued, the rest refused at once (SPEC C-3).

A task that would wait behind a full queue gets ``busy`` immediately instead of hanging, as the
tool seed asks ("Max concurrent: 5, Queue overflow: 10 max").
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from csp_web.core.errors import Busy
from protocol import ErrorCode


class Slots:
    """Admission for one specialist; ``running`` + ``queued`` never exceed their caps."""

    def __init__(self, name: str, *, max_running: int, max_queued: int) -> None:
        self.name = name
        self.max_running = max_running
        self.max_queued = max_queued
        self._semaphore = trio.Semaphore(max_running)
        self._holders = 0  # running plus queued

    @property
    def running(self) -> int:
        return self.max_running - self._semaphore.value

    @property
    def queued(self) -> int:
        return self._holders - self.running

    @asynccontextmanager
    async def admit(self) -> AsyncIterator[None]:
        """Run the body in a slot, waiting in the queue if needed; raises Busy when full."""
        if self._holders >= self.max_running + self.max_queued:
            raise Busy(
                ErrorCode.BUSY, f"{self.name}: {self.max_running} running, {self.max_queued} queued"
            )
        self._holders += 1
        try:
            try:
                self._semaphore.acquire_nowait()
            except trio.WouldBlock:
                await self._semaphore.acquire()
            try:
                yield
            finally:
                self._semaphore.release()
        finally:
            self._holders -= 1
