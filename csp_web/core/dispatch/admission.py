"""Bounded admission to a specialist: N running, M queued, the rest refused at once (SPEC C-3).

A task that would wait behind a full queue gets ``busy`` immediately instead of hanging, as the
tool seed asks ("Max concurrent: 5, Queue overflow: 10 max").
"""

from __future__ import annotations

import trio

from csp_web.core.api.errors import Busy
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

    @property
    def full(self) -> bool:
        """Whether a task now would be refused ``busy``: every running and queued place taken."""
        return self._holders >= self.max_running + self.max_queued

    def busy(self) -> Busy:
        """The refusal of a task that finds the pool ``full`` (SPEC C-3)."""
        return Busy(
            ErrorCode.BUSY, f"{self.name}: {self.max_running} running, {self.max_queued} queued"
        )

    def admit(self) -> _Admission:
        """``async with slots.admit():`` runs the body in a slot, waiting in the queue if
        needed; raises Busy when full. (A class, not a generator: it runs once per frame.)"""
        return _Admission(self)

    def take_now(self) -> bool:
        """Take a free slot without waiting (then ``release`` it); False when none is free."""
        try:
            self._semaphore.acquire_nowait()
        except trio.WouldBlock:
            return False
        self._holders += 1
        return True

    def release(self) -> None:
        self._semaphore.release()
        self._holders -= 1


class _Admission:
    __slots__ = ("_slots",)

    def __init__(self, slots: Slots) -> None:
        self._slots = slots

    async def __aenter__(self) -> None:
        slots = self._slots
        if slots.full:
            raise slots.busy()
        slots._holders += 1
        try:
            slots._semaphore.acquire_nowait()
        except trio.WouldBlock:
            try:
                await slots._semaphore.acquire()
            except BaseException:
                slots._holders -= 1
                raise

    async def __aexit__(self, *exc_info: object) -> None:
        self._slots.release()
