"""``reporting_progress``: "still running" each interval while a block runs, and a client
that has gone ends the reports, never the call."""

from __future__ import annotations

import anyio
import pytest
import trio

from csp_web.mcp_face.progress import PROGRESS_EVERY_S, reporting_progress


async def test_a_block_reports_each_interval_until_it_ends(autojump_clock: trio.abc.Clock) -> None:
    seen: list[tuple[float, str]] = []

    async def report(elapsed_s: float, message: str) -> None:
        seen.append((elapsed_s, message))

    async with reporting_progress(report):
        await trio.sleep(PROGRESS_EVERY_S * 3.5)
    await trio.sleep(PROGRESS_EVERY_S * 3)  # nothing after the block
    assert seen == [
        (1.0, "still running, 1 s"),
        (2.0, "still running, 2 s"),
        (3.0, "still running, 3 s"),
    ]


async def test_a_block_shorter_than_the_interval_reports_nothing(
    autojump_clock: trio.abc.Clock,
) -> None:
    seen: list[float] = []

    async def report(elapsed_s: float, _message: str) -> None:
        seen.append(elapsed_s)

    async with reporting_progress(report):
        await trio.sleep(PROGRESS_EVERY_S / 2)
    assert seen == []


@pytest.mark.parametrize(
    "gone", [anyio.BrokenResourceError, anyio.ClosedResourceError, trio.ClosedResourceError]
)
async def test_a_client_that_has_gone_ends_the_reports_not_the_block(
    autojump_clock: trio.abc.Clock, gone: type[Exception]
) -> None:
    calls = 0

    async def report(_elapsed_s: float, _message: str) -> None:
        nonlocal calls
        calls += 1
        raise gone

    async with reporting_progress(report):
        await trio.sleep(PROGRESS_EVERY_S * 4)
    assert calls == 1
