"""An exec cut short from outside (the shutdown's grace period, a cancelled task) is answered
for what cut it, never as the command's own failure or timeout, and leaves no process behind.

Issue 21 §3 and §4: at SIGTERM running commands answered ``command_failed`` and commands
started during the grace period ``timeout_exceeded:60000ms``; a cancelled exec must leave
nothing running (checked in /proc).
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator

import pytest
import trio

from csp_web.app.memory_path import outbox_path
from csp_web.config import Config, with_section
from csp_web.core.api.context import Peer
from csp_web.core.api.deadlines import CUT_DETAIL, GracePeriod
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.memory.outbox import open_outbox
from protocol import Reply, Status, Task
from specialists.tool import TOOL
from specialists.tool.config import ToolConfig
from specialists.tool.ops_exec import open_exec_services
from specialists.tool.services import ToolServices
from tests.harness import build_dispatcher

from .exec_support import KINDS, live_pids, make_config, scratch_dir, wait_for_pid

_PEER = Peer("t", 1000, 4242)


@pytest.fixture
def workspace() -> Iterator[str]:
    with scratch_dir() as path:
        yield path


@pytest.fixture(params=KINDS)
async def dispatcher(
    request: pytest.FixtureRequest, config: Config, workspace: str
) -> AsyncIterator[Dispatcher]:
    overrides = {} if request.param == "bwrap" else {"bwrap_program": None}
    exec_config = make_config(workspace, **overrides)
    config = with_section(config, "tool", ToolConfig(exec=exec_config))
    async with (
        open_outbox(config.outbox_path, config.outbox, config.memory) as outbox,
        open_exec_services(config) as services,
    ):
        yield build_dispatcher(
            config, outbox_path(config, outbox), TOOL.ops, ToolServices(services, None, None)
        )


def _marker() -> str:
    """A unique sleep length: ``sleep <marker>`` names one test's process on the host."""
    return f"{900 + secrets.randbelow(99)}.{secrets.randbelow(10**6):06d}"


def _exec(command: str, *, shell: bool = False) -> Task:
    fields = [("ID", "c1"), ("TIMEOUT_MS", "60000")]
    if shell:
        fields.append(("SHELL", "true"))
    return Task("exec", "SHELL", "EXEC_RESULT", command, tuple(fields))


def _shutting_down() -> Reply:
    return Reply(
        Status.FAIL,
        (
            ("ID", "c1"),
            ("SCOPE", "[]"),
            ("DATA", "none"),
            ("ERROR", f"shutting_down:{CUT_DETAIL}"),
        ),
    )


async def _no_process_left(marker: str) -> None:
    """Return once no live process carries ``marker`` (bounded: a kill is not instant)."""
    with trio.fail_after(10):
        while live_pids(marker):
            await trio.sleep(0.01)


def _tree_command(marker: str) -> str:
    """A shell with a child and a setsid'd grandchild, each a ``sleep <marker>``; the shell's
    own command line holds only halves of the marker."""
    whole, fraction = marker.split(".")
    return f'm={whole}; sleep "$m.{fraction}" & setsid sleep "$m.{fraction}" & wait'


async def test_a_running_command_cut_by_the_grace_period_is_answered_shutting_down(
    dispatcher: Dispatcher,
) -> None:
    marker = _marker()
    grace = GracePeriod()
    replies: list[Reply] = []
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                replies.append(
                    await dispatcher.run(
                        _exec(_tree_command(marker), shell=True), _PEER, grace=grace
                    )
                )

            nursery.start_soon(run)
            await wait_for_pid(marker)
            grace.cut_at(trio.current_time() + 0.2)
        await _no_process_left(marker)
    assert replies == [_shutting_down()]
    assert grace.cut == 1


async def test_a_command_started_in_the_grace_period_is_answered_shutting_down_not_timeout(
    dispatcher: Dispatcher,
) -> None:
    """It used to stop at the grace period's work deadline and answer
    ``timeout_exceeded:60000ms``, naming a budget it never reached."""
    marker = _marker()
    grace = GracePeriod()
    grace.cut_at(trio.current_time() + 1.5)
    with trio.fail_after(30):
        reply = await dispatcher.run(_exec(f"sleep {marker}"), _PEER, grace=grace)
        await _no_process_left(marker)
    assert reply == _shutting_down()
    assert grace.cut == 1


async def test_cancelling_a_running_exec_kills_its_whole_tree(dispatcher: Dispatcher) -> None:
    """Issue 21 §4: a cancelled exec (a client's cancel, a disconnect) leaves no process."""
    marker = _marker()
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dispatcher.run, _exec(_tree_command(marker), shell=True), _PEER)
            await wait_for_pid(marker)
            with trio.fail_after(10):
                # A poller: the sleeps are outside processes, nothing in-process can signal.
                while len(live_pids(marker)) < 2:  # both sleeps run
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
        await _no_process_left(marker)
    assert live_pids(marker) == []
