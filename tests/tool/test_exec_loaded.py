"""The exec timeout on a loaded host: the reply still names the command, exit:null and its log.

A 500 ms task keeps 100 ms back to report its own timeout (csp_web.core.api.deadlines). The engine
used to start its timer only after the placeholders and the spawn, and to clear up (kill,
reap, drain, log) inside that reserve: a loaded host spent it first, and the dispatcher cut
the op off with a bare ``timeout_exceeded`` (no COMMAND, no DATA, no exec_log written).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Iterator

import pytest
import trio

from csp_web.app.memory_path import outbox_path
from csp_web.config import Config, with_section
from csp_web.core.api.context import Peer
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.memory.outbox import open_outbox
from protocol import Reply, Status, Task
from specialists.tool import TOOL
from specialists.tool.config import ToolConfig
from specialists.tool.exec._runner import PLACEHOLDER_THREAD
from specialists.tool.ops_exec import open_exec_services
from specialists.tool.services import ToolServices
from tests.harness import build_dispatcher, outbox_of
from tests.tool.exec_support import make_config, scratch_dir

WAIT_S = 30  # bounds each reply; the command itself is killed at 0.4 s


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


@pytest.fixture
def cpu_hogs() -> Iterator[None]:
    """Two busy loops, one per core of the 2-core CI host, for the length of the test."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(2)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


async def _timed_out_sleep(dispatcher: Dispatcher) -> Reply:
    task = Task("exec", "SHELL", "EXEC_RESULT", "sleep 30", (("TIMEOUT_MS", "500"),))
    with trio.fail_after(WAIT_S):
        return await dispatcher.run(task, Peer("t", 1000, 4242))


def _exec_logs(dispatcher: Dispatcher) -> list[str]:
    rows = outbox_of(dispatcher)._store.oldest(1000)
    return [write.data for _, write in rows if write.type == "exec_log"]


def _assert_owned_timeout(reply: Reply) -> None:
    """The engine's own timeout reply, whole: not the dispatcher's bare cut."""
    assert reply == Reply(
        Status.FAIL,
        (
            ("SCOPE", "[shell]"),
            ("DATA", "exit:null"),
            ("ERROR", "timeout_exceeded:500ms"),
            ("COMMAND", "sleep 30"),
            ("LOG_PATH", reply.get("LOG_PATH") or "missing"),
        ),
    ), reply


async def test_timeout_is_reported_whole_when_the_placeholder_thread_is_busy(
    dispatcher: Dispatcher,
) -> None:
    """Another command's placeholder file work holds the one placeholder thread for 300 ms
    of the 500 ms budget (as 5 concurrent commands in a full workspace do): the timer counts
    that wait, so the timeout still goes out as the op's own, with its log."""
    async with trio.open_nursery() as nursery:

        async def busy_thread() -> None:
            async with PLACEHOLDER_THREAD:
                # The load being simulated (file work in the thread), not a wait for our code.
                await trio.sleep(0.3)

        nursery.start_soon(busy_thread)
        await trio.lowlevel.checkpoint()  # it holds the thread before the exec asks for it
        reply = await _timed_out_sleep(dispatcher)
    _assert_owned_timeout(reply)
    assert len(_exec_logs(dispatcher)) == 1


@pytest.mark.slow
@pytest.mark.usefixtures("cpu_hogs")
async def test_timeout_is_reported_whole_while_two_cpu_hogs_run(dispatcher: Dispatcher) -> None:
    """Under two busy loops killing, reaping and logging outlast the 100 ms reserve; the
    clear-up the engine owes after its own timer is shielded from the task's deadline."""
    for attempt in range(3):
        _assert_owned_timeout(await _timed_out_sleep(dispatcher))
        assert len(_exec_logs(dispatcher)) == attempt + 1
