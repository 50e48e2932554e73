"""Commands live as long as they need to, and no longer than the daemon (issue 21 §1).

Every exec was SIGKILLed 10 s after it started: bwrap's ``--die-with-parent`` is
PR_SET_PDEATHSIG, which fires when the *thread* that forked it exits, and trio retires an
idle worker thread after 10 s. These tests run past that point on an otherwise idle daemon
(a dispatcher of its own), with the real sandbox and real programs, and check that killing
the daemon still takes every sandboxed process with it. All slow: each runs 15 s or more.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace

import pytest
import trio

from csp_web.app.memory_path import outbox_path
from csp_web.config import Config, SlotLimits, with_section
from csp_web.core.api.context import Peer
from csp_web.core.api.deadlines import CUT_DETAIL, GracePeriod
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.memory.outbox import open_outbox
from protocol import Reply, Status, Task
from specialists.tool import TOOL
from specialists.tool.config import ToolConfig
from specialists.tool.exec._cgroup import find_cgroup_host
from specialists.tool.exec.config import ExecConfig
from specialists.tool.ops_exec import open_exec_services
from specialists.tool.services import ToolServices
from tests.harness import build_dispatcher

from .exec_support import IS_ROOT, NOBODY, live_pids, make_config, scratch_dir
from .test_exec_policy_npm import documented_policy

pytestmark = pytest.mark.slow

_PEER = Peer("t", 1000, 4242)
_PAST_THREAD_RETIREMENT = "sleep 15"  # trio retires an idle worker thread after 10 s


@asynccontextmanager
async def open_dispatcher(
    config: Config, exec_config: ExecConfig, *, max_running: int = 5
) -> AsyncIterator[Dispatcher]:
    """A dispatcher over the tool ops, its tool pool running ``max_running`` at once."""
    pools = replace(
        config.tasks.specialists, tool=SlotLimits(max_running=max_running, max_queued=10)
    )
    config = with_section(
        replace(config, tasks=replace(config.tasks, specialists=pools)),
        "tool",
        ToolConfig(exec=exec_config),
    )
    async with (
        open_outbox(config.outbox_path, config.outbox, config.memory) as outbox,
        open_exec_services(config) as services,
    ):
        yield build_dispatcher(
            config, outbox_path(config, outbox), TOOL.ops, ToolServices(services, None, None)
        )


def _exec(command: str, *fields: tuple[str, str], timeout_ms: int = 30_000) -> Task:
    return Task("exec", "SHELL", "EXEC_RESULT", command, (("TIMEOUT_MS", str(timeout_ms)), *fields))


def _ok(reply: Reply) -> tuple[Status, str | None, str | None]:
    return reply.status, reply.get("DATA"), reply.get("EXIT_CODE")


def _write_project(workspace: str, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = os.path.join(workspace, name)
        with open(path, "w") as f:
            f.write(text)
        if IS_ROOT:
            os.chown(path, NOBODY, NOBODY)


async def test_a_command_running_past_trio_thread_retirement_finishes_ok(config: Config) -> None:
    with scratch_dir() as workspace:
        async with open_dispatcher(config, make_config(workspace)) as dispatcher:
            with trio.fail_after(60):
                reply = await dispatcher.run(_exec(_PAST_THREAD_RETIREMENT), _PEER)
    assert _ok(reply) == (Status.OK, "exit:0", "0"), reply
    assert reply.get("SANDBOX") == "bwrap"


async def test_24_such_commands_at_once_all_finish_ok(config: Config) -> None:
    replies: list[Reply] = []
    with scratch_dir() as workspace:
        async with open_dispatcher(config, make_config(workspace), max_running=24) as dispatcher:

            async def run() -> None:
                replies.append(await dispatcher.run(_exec(_PAST_THREAD_RETIREMENT), _PEER))

            with trio.fail_after(120):
                async with trio.open_nursery() as nursery:
                    for _ in range(24):
                        nursery.start_soon(run)
    assert [_ok(reply) for reply in replies] == [(Status.OK, "exit:0", "0")] * 24, replies


async def test_a_twenty_second_pytest_run_passes_in_the_sandbox(config: Config) -> None:
    tests = "".join(f"def test_{n}():\n    time.sleep(1)\n\n\n" for n in range(20))
    with scratch_dir() as workspace:
        _write_project(workspace, {"test_slow.py": f"import time\n\n\n{tests}"})
        policy = documented_policy(workspace)
        async with open_dispatcher(config, policy) as dispatcher:
            command = "python3 -m pytest -q -p no:cacheprovider"
            with trio.fail_after(90):
                reply = await dispatcher.run(_exec(command, timeout_ms=60_000), _PEER)
    assert _ok(reply) == (Status.OK, "exit:0", "0"), reply
    assert "20 passed" in (reply.get("STDOUT_SUMMARY") or "")


async def test_a_twenty_second_npm_test_passes_in_the_sandbox(config: Config) -> None:
    files = {
        "package.json": json.dumps(
            {"name": "slow", "version": "1.0.0", "scripts": {"test": "node test.js"}}
        ),
        "test.js": "setTimeout(() => console.log('1 slow test passed'), 20000);\n",
    }
    with scratch_dir() as workspace:
        _write_project(workspace, files)
        async with open_dispatcher(config, documented_policy(workspace)) as dispatcher:
            env = ("ENV", json.dumps({"npm_config_update_notifier": "false"}))
            with trio.fail_after(90):
                reply = await dispatcher.run(_exec("npm test", env, timeout_ms=60_000), _PEER)
    if reply.get("LIMITS") == "rlimit":
        pytest.skip("npm needs a cgroup (V8 under RLIMIT_AS does not start); this host has none")
    assert _ok(reply) == (Status.OK, "exit:0", "0"), reply
    assert "1 slow test passed" in (reply.get("STDOUT_SUMMARY") or "")


async def test_a_command_cut_by_the_grace_period_after_12_s_is_answered_shutting_down(
    config: Config,
) -> None:
    """At SIGTERM, commands running for more than 10 s answered ``command_failed``: the
    thread retirement had killed them, not the shutdown."""
    grace = GracePeriod()
    task = Task("exec", "SHELL", "EXEC_RESULT", "sleep 30", (("ID", "g1"), ("TIMEOUT_MS", "60000")))
    with scratch_dir() as workspace:
        async with open_dispatcher(config, make_config(workspace)) as dispatcher:
            grace.cut_at(trio.current_time() + 12.0)
            with trio.fail_after(60):
                reply = await dispatcher.run(task, _PEER, grace=grace)
    assert reply == Reply(
        Status.FAIL,
        (("ID", "g1"), ("SCOPE", "[]"), ("DATA", "none"), ("ERROR", f"shutting_down:{CUT_DETAIL}")),
    )


def _tree_marker() -> tuple[str, str]:
    """A unique sleep length, and a shell command running a child and a setsid'd grandchild
    inside the sandbox, each a ``sleep <marker>`` (the shell's own line holds only halves)."""
    marker = f"{900 + secrets.randbelow(99)}.{secrets.randbelow(10**6):06d}"
    whole, fraction = marker.split(".")
    return marker, f'm={whole}; sleep "$m.{fraction}" & setsid sleep "$m.{fraction}" & wait'


@asynccontextmanager
async def _serving(*, grace_period_s: float = 10.0) -> AsyncIterator[tuple[trio.Process, str]]:
    """The real ``csp-web serve`` on stdin/stdout (stderr dropped) with exec under bubblewrap
    and the shell allowed; yields the process and its workspace, and kills it at the end."""
    with scratch_dir() as workspace, scratch_dir(owner=None, mode=0o700) as base:
        config_path = os.path.join(base, "config.yaml")
        with open(config_path, "w") as f:
            f.write(
                f"daemon: {{state_dir: {base}/state, grace_period_s: {grace_period_s}}}\n"
                f"tool: {{exec: {{workspace_roots: [{workspace}], require_bwrap: true,"
                " allow_shell: true}}\n"
            )
        daemon = await trio.lowlevel.open_process(
            [sys.executable, "-m", "csp_web", "serve", "--config", config_path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        try:
            yield daemon, workspace
        finally:
            daemon.kill()
            with trio.fail_after(10):
                await daemon.wait()


async def _send_tree(daemon: trio.Process, command: str, marker: str) -> None:
    """Send the exec of ``command`` (ID t1) and return once both of its sleeps run."""
    assert daemon.stdin is not None
    frame = "TASK REQ:exec IN:SHELL OUT:EXEC_RESULT\nID t1\nTIMEOUT_MS 60000\nSHELL true\n"
    await daemon.stdin.send_all(f"{frame}COMMAND {json.dumps(command)}\n\n".encode())
    with trio.fail_after(30):
        while len(live_pids(marker)) < 2:
            await trio.sleep(0.01)


async def _no_process_left(marker: str) -> None:
    with trio.fail_after(10):
        while live_pids(marker):
            await trio.sleep(0.01)


async def test_killing_the_daemon_with_sigkill_leaves_no_sandboxed_process() -> None:
    marker, command = _tree_marker()
    async with _serving() as (daemon, _):
        await _send_tree(daemon, command, marker)
        daemon.kill()  # SIGKILL: nothing of the daemon's own clean-up runs
    await _no_process_left(marker)


async def test_the_cgroups_of_a_daemon_killed_with_sigkill_go_when_the_next_one_starts() -> None:
    """A daemon killed mid-command removes none of its cgroups (memory and pids, on v1): they
    stayed for good, and no later daemon removed them. The next daemon's start does."""
    host = find_cgroup_host(None, shell="/bin/sh", memory_bytes=1 << 30, max_tasks=64)
    if isinstance(host, str):
        pytest.skip(f"no writable cgroup here: {host}")
    marker, command = _tree_marker()
    async with _serving() as (daemon, _):
        await _send_tree(daemon, command, marker)
        ours = f"csp-exec-{daemon.pid}-"
        left = [
            os.path.join(parent, name)
            for parent in host.directories
            for name in os.listdir(parent)
            if name.startswith(ours)
        ]
        assert len(left) == len(host.directories)
        daemon.kill()
    await _no_process_left(marker)
    assert all(os.path.isdir(path) for path in left)
    async with _serving() as (daemon, _):
        assert daemon.stdin is not None
        assert daemon.stdout is not None
        frame = "TASK REQ:exec IN:SHELL OUT:EXEC_RESULT\nID t2\nSHELL true\nCOMMAND true\n\n"
        await daemon.stdin.send_all(frame.encode())
        with trio.fail_after(60):
            reply = await daemon.stdout.receive_some(65536)  # exec started: the probe ran
    assert reply.startswith(b"STATUS OK\nID t2\n")
    assert [path for path in left if os.path.isdir(path)] == []


async def test_sigterm_cuts_a_command_running_past_10_s_as_shutting_down() -> None:
    """Issue 21 §3: at SIGTERM running commands answered ``command_failed`` (the thread
    retirement killed them 10 s in, inside the grace period)."""
    marker, command = _tree_marker()
    replies = b""
    async with _serving(grace_period_s=12.0) as (daemon, _):
        await _send_tree(daemon, command, marker)
        daemon.send_signal(signal.SIGTERM)
        assert daemon.stdout is not None
        with trio.fail_after(60):
            async for chunk in daemon.stdout:
                replies += chunk
            assert await daemon.wait() == 4  # the grace period cut work
    await _no_process_left(marker)
    assert replies.decode() == (
        f"STATUS FAIL\nID t1\nSCOPE []\nDATA none\nERROR shutting_down:{CUT_DETAIL}\n\n"
    )
