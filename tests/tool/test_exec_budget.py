"""exec's measured CPU charged to the task's budget (SPEC D-3: exec_cpu_ms)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest
import trio

from csp_web.app.memory_path import outbox_path
from csp_web.config import Config, with_section
from csp_web.core.api.context import Peer
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.core.dispatch.ledger import LocalLedger
from csp_web.memory.outbox import open_outbox
from protocol import Reply, Status, Task
from specialists.tool import TOOL
from specialists.tool.config import ToolConfig
from specialists.tool.ops_exec import open_exec_services
from specialists.tool.services import ToolServices
from tests.harness import build_dispatcher, outbox_of
from tests.tool.exec_support import make_config, scratch_dir

WAIT_S = 20.0
BURN = 'python3 -c "print(sum(range(3_000_000)))"'  # tens of ms of CPU, at least


@pytest.fixture
def workspace() -> Iterator[str]:
    with scratch_dir() as path:
        yield path


@pytest.fixture
async def dispatcher(config: Config, workspace: str) -> AsyncIterator[Dispatcher]:
    config = with_section(config, "tool", ToolConfig(exec=make_config(workspace)))
    async with (
        open_outbox(config.outbox_path, config.outbox, config.memory) as outbox,
        open_exec_services(config) as services,
    ):
        yield build_dispatcher(
            config, outbox_path(config, outbox), TOOL.ops, ToolServices(services, None, None)
        )


async def _exec(dispatcher: Dispatcher, budget: str) -> Reply:
    task = Task("exec", "SHELL", "EXEC_RESULT", BURN, (("BUDGET", budget),))
    return await dispatcher.run(task, Peer("t", 1000, 4242))


async def test_a_commands_cpu_time_is_charged_as_it_measured_it(dispatcher: Dispatcher) -> None:
    reply = await _exec(dispatcher, "exec_cpu_ms:600000")
    assert reply.status is Status.OK, reply
    cpu_ms = int(reply.get("CPU_MS") or "x")
    assert reply.get("BUDGET_LEFT") == f"exec_cpu_ms:{600000 - cpu_ms}"


async def test_a_command_past_its_cpu_budget_keeps_its_output_and_answers_partial(
    dispatcher: Dispatcher,
) -> None:
    reply = await _exec(dispatcher, "exec_cpu_ms:1")
    assert (reply.status, reply.get("ERROR")) == (Status.PARTIAL, "budget_exhausted:exec_cpu_ms")
    assert (reply.get("DATA"), reply.get("STDOUT_SUMMARY")) == ("exit:0", "4499998500000")
    assert reply.get("BUDGET_LEFT") == "exec_cpu_ms:0"


async def test_no_cpu_left_refuses_the_command_before_it_runs(dispatcher: Dispatcher) -> None:
    reply = await _exec(dispatcher, "exec_cpu_ms:0")
    assert reply.fields == (
        ("SCOPE", "[]"),
        ("DATA", "none"),
        ("ERROR", "budget_exhausted:exec_cpu_ms"),
        ("BUDGET_LEFT", "exec_cpu_ms:0"),
    )
    assert reply.status is Status.PARTIAL
    logs = [w for _, w in outbox_of(dispatcher)._store.oldest(1000) if w.type == "exec_log"]
    assert logs == []


SPIN = (
    "python3 -c \"import time; print('spinning', flush=True); t = time.process_time()\n"
    'while time.process_time() - t < 20: pass"'
)


@pytest.mark.slow
async def test_a_command_whose_cpu_passes_the_budget_is_killed_near_it_with_its_output(
    dispatcher: Dispatcher, config: Config
) -> None:
    """A 20 s CPU loop under exec_cpu_ms:1500 is killed once a reading (every CPU_POLL_S)
    finds it past its 1500 ms reserve, not 20 s after; the budget is charged all of it and
    no more; PARTIAL budget_exhausted:exec_cpu_ms with what it printed."""
    ledger = LocalLedger(config.daemon.state_dir, config.budgets)
    dispatcher.ledger = ledger
    fields = (("BUDGET_ID", "spin"), ("BUDGET", "exec_cpu_ms:1500"), ("TIMEOUT_MS", "60000"))
    with trio.fail_after(60):
        reply = await dispatcher.run(
            Task("exec", "SHELL", "EXEC_RESULT", SPIN, fields), Peer("t", 1000, 4242)
        )
    charged = 1500 - (await ledger.charge("spin", "exec_cpu_ms", 0, strict=False) or 0)
    ledger.close()
    assert (reply.status, reply.get("ERROR")) == (Status.PARTIAL, "budget_exhausted:exec_cpu_ms")
    assert reply.get("STDOUT_SUMMARY") == "spinning"
    assert reply.get("BUDGET_LEFT") == "exec_cpu_ms:0"
    assert charged == 1500  # all of it, never more: what is left never goes below 0
    assert reply.get("EXIT_CODE") == "137"  # killed (SIGKILL), not run to the loop's end


async def test_a_command_holding_its_cpu_reserve_runs_on_when_another_task_finds_none_left(
    dispatcher: Dispatcher, config: Config, workspace: str
) -> None:
    """Two commands on one BUDGET_ID: the first reserves all of exec_cpu_ms and waits; the
    second finds nothing left and is refused before it runs; the first, holding a reserve of
    its own, is not cut by that refusal: it ends OK and gives back what it did not use."""
    ledger = LocalLedger(config.daemon.state_dir, config.budgets)
    dispatcher.ledger = ledger
    go = os.path.join(workspace, "go")
    wait = f"python3 -c \"import os, time\nwhile not os.path.exists('{go}'): time.sleep(0.01)\""
    await ledger.open("pair", 1000, {"exec_cpu_ms": 5000})
    fields = (("BUDGET_ID", "pair"),)
    replies: dict[str, Reply] = {}

    async def first() -> None:
        task = Task("exec", "SHELL", "EXEC_RESULT", wait, fields)
        replies["first"] = await dispatcher.run(task, Peer("t", 1000, 4242))

    try:
        with trio.fail_after(WAIT_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(first)
                while await ledger.open("pair", 1000, None) != {"exec_cpu_ms": 0}:
                    await trio.sleep(0.01)  # the first command holds all of it
                task = Task("exec", "SHELL", "EXEC_RESULT", BURN, fields)
                replies["second"] = await dispatcher.run(task, Peer("t", 1000, 4242))
                with open(go, "w"):
                    pass
        left = await ledger.open("pair", 1000, None)
    finally:
        ledger.close()
    second, kept = replies["second"], replies["first"]
    assert (second.status, second.get("ERROR"), second.get("DATA")) == (
        Status.PARTIAL,
        "budget_exhausted:exec_cpu_ms",
        "none",
    )
    assert (kept.status, kept.get("DATA")) == (Status.OK, "exit:0")
    cpu_ms = int(kept.get("CPU_MS") or "x")
    assert (
        kept.get("BUDGET_LEFT")
        == f"exec_cpu_ms:{5000 - cpu_ms}"
        == f"exec_cpu_ms:{left['exec_cpu_ms']}"
    )


async def test_a_command_cancelled_midway_is_charged_the_cpu_it_burned(
    dispatcher: Dispatcher, config: Config, workspace: str
) -> None:
    """A CPU loop under a BUDGET_ID, cancelled (a hang-up) once it has burned 300 ms, keeps
    at least those 300 ms charged: a cancelled exec does not give its whole reserve back,
    which repeated would run for ever on one exec_cpu_ms."""
    ledger = LocalLedger(config.daemon.state_dir, config.budgets)
    dispatcher.ledger = ledger
    mark = os.path.join(workspace, "burned")
    loop = (
        'python3 -c "import time; t = time.process_time()\n'
        "while time.process_time() - t < 0.3: pass\n"
        f"open('{mark}', 'w').close()\n"
        'while 1: pass"'
    )
    fields = (("BUDGET_ID", "hangup"), ("BUDGET", "exec_cpu_ms:60000"), ("TIMEOUT_MS", "60000"))
    try:
        with trio.fail_after(WAIT_S):
            async with trio.open_nursery() as nursery:
                task = Task("exec", "SHELL", "EXEC_RESULT", loop, fields)
                nursery.start_soon(dispatcher.run, task, Peer("t", 1000, 4242))
                while not os.path.exists(mark):
                    await trio.sleep(0.01)
                nursery.cancel_scope.cancel()
        left = await ledger.open("hangup", 1000, None)
    finally:
        ledger.close()
    assert 60000 - left["exec_cpu_ms"] >= 300


async def test_a_command_killed_at_its_timeout_is_charged_the_cpu_it_burned(
    dispatcher: Dispatcher,
) -> None:
    """A CPU loop killed at its own TIMEOUT_MS leaves no report of its CPU time (GNU time
    dies with it): it is charged the CPU read before the kill, not nothing."""
    loop = 'python3 -c "while 1: pass"'
    fields = (("BUDGET", "exec_cpu_ms:60000"), ("TIMEOUT_MS", "1500"))
    with trio.fail_after(WAIT_S):
        reply = await dispatcher.run(
            Task("exec", "SHELL", "EXEC_RESULT", loop, fields), Peer("t", 1000, 4242)
        )
    assert (reply.status, (reply.get("ERROR") or "").split(":")[0]) == (
        Status.FAIL,
        "timeout_exceeded",
    )
    left = int((reply.get("BUDGET_LEFT") or "x:x").split(":")[1])
    assert left < 60000
