"""Progress notifications while a tool call runs (SDK-free).

CSP/1 sends one reply per task and nothing before it, so the face cannot relay an op's own
steps; what it can say truthfully is that the call is still running and for how long. A
client that sent a ``progressToken`` (a research ``web_result`` waiting, an ``exec`` over a
second, a browser wait) gets ``still running, N s`` every PROGRESS_EVERY_S, for every tool
alike; a call that ends sooner sends none.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import trio

from csp_web.client.trio_client import running_beside

log = logging.getLogger(__name__)

# Often enough that a host's spinner or timeout-reset sees the call alive (the TypeScript
# SDK's resetTimeoutOnProgress), rarely enough to cost nothing beside the call.
PROGRESS_EVERY_S = 1.0

Report = Callable[[float, str], Awaitable[None]]
_GONE = (
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    OSError,
)


@asynccontextmanager
async def reporting_progress(
    report: Report, *, every_s: float = PROGRESS_EVERY_S
) -> AsyncIterator[None]:
    """For as long as the block runs, ``report(elapsed_s, message)`` every ``every_s``
    seconds. A client that has gone ends the reports, never the block."""

    async def tick() -> None:
        elapsed = 0.0
        while True:
            await trio.sleep(every_s)
            elapsed += every_s
            try:
                await report(elapsed, f"still running, {elapsed:g} s")
            except _GONE as exc:
                log.info("progress not sent: the client has gone (%s)", type(exc).__name__)
                return

    async with running_beside(tick):
        yield
