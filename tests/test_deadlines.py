"""An op's own work ends a reserve before its task's deadline; replies name the budget."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator

import pytest
import trio
import trio.lowlevel
import trio.testing

from csp_web.app.memory_path import outbox_path
from csp_web.config import Config, with_section
from csp_web.core.api.context import Peer
from csp_web.core.api.deadlines import (
    budget_ms,
    task_deadline,
    work_deadline,
    work_seconds,
)
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.memory.outbox import open_outbox
from protocol import Reply, Status, Task
from specialists.tool import TOOL
from specialists.tool.config import ToolConfig
from specialists.tool.ops_exec import open_exec_services
from specialists.tool.services import ToolServices
from tests.harness import build_dispatcher
from tests.tool.exec_support import make_config, scratch_dir


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


async def test_budget_is_what_the_caller_set_inside_the_task_and_none_outside(
    mock_clock: trio.testing.MockClock,
) -> None:
    assert budget_ms() is None
    with task_deadline(1000) as scope:
        assert scope.deadline == pytest.approx(trio.current_time() + 1.0)
        assert budget_ms() == 1000
        assert work_seconds(default_s=7.0) == pytest.approx(0.8)  # the reserve stays internal
    assert budget_ms() is None


@pytest.fixture
async def exec_dispatcher(config: Config) -> AsyncIterator[Dispatcher]:
    with scratch_dir() as workspace:
        exec_config = make_config(workspace, default_timeout_ms=600)
        config = with_section(config, "tool", ToolConfig(exec=exec_config))
        async with (
            open_outbox(config.outbox_path, config.outbox, config.memory) as outbox,
            open_exec_services(config) as services,
        ):
            yield build_dispatcher(
                config, outbox_path(config, outbox), TOOL.ops, ToolServices(services, None, None)
            )


@pytest.mark.parametrize(
    ("fields", "named_ms"),
    [
        ((("TIMEOUT_MS", "1000"),), "1000ms"),  # the engine stopped at 800 ms: 799ms before
        ((), "600ms"),  # exec's own default, inside the task's 30 s: that is the budget
    ],
)
async def test_exec_timeout_reply_names_the_budget_not_the_internal_reserve(
    exec_dispatcher: Dispatcher, fields: tuple[tuple[str, str], ...], named_ms: str
) -> None:
    """Issue 8.16: TIMEOUT_MS 1000 answered timeout_exceeded:799ms."""
    task = Task("exec", "SHELL", "EXEC_RESULT", "sleep 30", (("ID", "x1"), *fields))
    with trio.fail_after(10):
        reply = await exec_dispatcher.run(task, Peer("t", 1000, 4242))
    assert reply == Reply(
        Status.FAIL,
        (
            ("ID", "x1"),
            ("SCOPE", "[shell]"),
            ("DATA", "exit:null"),
            ("ERROR", f"timeout_exceeded:{named_ms}"),
            ("COMMAND", "sleep 30"),
            ("LOG_PATH", reply.get("LOG_PATH") or "missing"),
        ),
    )
