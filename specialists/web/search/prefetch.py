"""Background page loads after a search reply (seed 004's prefetch), run by WEB's background
task: ``Prefetcher.submit`` queues a job, ``Prefetcher.serve`` runs each in a nursery it owns
for the daemon's life (unbounded, as the nursery's ``start_soon`` it replaces)."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

import trio

from csp_web.core.api.ports import TaskPort

Job = Callable[[], Awaitable[None]]


class Prefetcher:
    """A queue of prefetch jobs and the background task that runs them."""

    def __init__(self) -> None:
        self._send, self._receive = trio.open_memory_channel[Job](math.inf)
        self.running = False
        self._pending = 0  # jobs queued or running
        self._idle = trio.Event()  # set while ``_pending`` is 0
        self._idle.set()

    def submit(self, job: Job) -> bool:
        """Queue ``job``; False (nothing queued) while ``serve`` is not running."""
        if not self.running:
            return False
        self._send.send_nowait(job)
        self._pending += 1
        if self._idle.is_set():
            self._idle = trio.Event()
        return True

    async def wait_idle(self) -> None:
        """Return once every job submitted so far has ended (or been dropped unrun by the
        end of ``serve``): what a caller waits on to see a prefetch's outcome."""
        await self._idle.wait()

    async def _run(self, job: Job) -> None:
        try:
            await job()
        finally:
            self._job_ended()

    def _job_ended(self) -> None:
        self._pending -= 1
        if self._pending == 0:
            self._idle.set()

    async def serve(
        self, port: TaskPort, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Run queued jobs until cancelled (the daemon stops): jobs in flight are cancelled."""
        async with trio.open_nursery() as nursery:
            self.running = True
            task_status.started()
            try:
                async for job in self._receive:
                    nursery.start_soon(self._run, job)
            finally:
                self.running = False
                while True:  # queued jobs never run now: they end here for ``wait_idle``
                    try:
                        self._receive.receive_nowait()
                    except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                        break
                    self._job_ended()
