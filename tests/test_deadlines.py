"""An op's own work ends a reserve before its task's deadline."""

from __future__ import annotations

import math

import pytest
import trio
import trio.lowlevel
import trio.testing

from csp_web.deadlines import work_deadline, work_seconds


async def test_without_a_task_deadline_work_is_unbounded_or_takes_the_default(
    mock_clock: trio.testing.MockClock,
) -> None:
    assert work_deadline() == math.inf
    assert work_seconds(default_s=7.0) == 7.0


@pytest.mark.parametrize(("task_s", "work_s"), [(0.5, 0.4), (1.25, 1.0), (100.0, 99.75)])
async def test_work_keeps_a_fifth_of_the_time_left_at_most_a_quarter_second(
    mock_clock: trio.testing.MockClock, task_s: float, work_s: float
) -> None:
    with trio.move_on_after(task_s):
        assert work_deadline() == pytest.approx(trio.current_time() + work_s)
        assert work_seconds(default_s=7.0) == pytest.approx(work_s)
        await trio.lowlevel.checkpoint()
