"""Per-command cgroups a daemon left behind when it died (``kill -9`` mid-command): the next
daemon's start-up (``probe_sandbox``) kills what still runs in them and removes them, and
never touches a live daemon's. On the cgroup host this machine gives (v1 or v2); skipped,
with the reason, where none is writable.

A cgroup's name says whose it is: ``csp-exec-<pid>-s<start>-<token>``, the daemon's pid and
its start in clock ticks after boot (``/proc/<pid>/stat``), so a pid reused by another
process does not keep a dead daemon's groups; names from before carry the pid alone.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import AsyncIterator, Iterator

import pytest
import trio
import trio.testing

from specialists.tool.exec import probe_sandbox
from specialists.tool.exec._cgroup import CgroupHost, find_cgroup_host, remove_leftovers
from specialists.tool.exec.config import ExecConfig

from .exec_support import make_config, scratch_dir


@pytest.fixture
def workspace() -> Iterator[str]:
    with scratch_dir() as path:
        yield path


def _config(workspace: str) -> ExecConfig:
    return make_config(workspace, bwrap_program=None)


def _host(config: ExecConfig) -> CgroupHost:
    found = find_cgroup_host(
        config.cgroup_parent,
        shell="/bin/sh",
        memory_bytes=config.max_memory_bytes,
        max_tasks=config.max_processes,
    )
    if isinstance(found, str):
        pytest.skip(f"no writable cgroup here: {found}")
    return found


def _start(pid: int) -> str:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()[19].decode()


def _dead_pid() -> int:
    """A pid no process has now (a dead daemon's): the highest free one, which the kernel
    hands out last."""
    with open("/proc/sys/kernel/pid_max") as f:
        top = int(f.read())
    return next(pid for pid in range(top - 1, 1, -1) if not os.path.exists(f"/proc/{pid}"))


class Group:
    """A cgroup made by hand under each host directory, as a dead (or live) daemon left it."""

    def __init__(self, host: CgroupHost, name: str) -> None:
        self.paths = [os.path.join(parent, name) for parent in host.directories]
        for path in self.paths:
            os.mkdir(path)

    def enter(self, pid: int) -> None:
        for path in self.paths:
            with open(os.path.join(path, "cgroup.procs"), "w") as f:
                f.write(str(pid))

    def exists(self) -> bool:
        return any(os.path.isdir(path) for path in self.paths)

    def remove(self) -> None:
        for path in self.paths:
            if os.path.isdir(inner := os.path.join(path, "inner")):
                os.rmdir(inner)
            if os.path.isdir(path):
                os.rmdir(path)


@pytest.fixture
async def sleepers() -> AsyncIterator[list[trio.Process]]:
    """Processes to stand in for a command (or a daemon); killed and reaped afterwards."""
    started: list[trio.Process] = []
    yield started
    for process in started:
        if process.returncode is None:
            process.kill()
        with trio.fail_after(10):
            await process.wait()


async def _sleeper(sleepers: list[trio.Process]) -> trio.Process:
    process = await trio.lowlevel.open_process(["sleep", "600"])
    sleepers.append(process)
    return process


async def _exited(process: trio.Process) -> int:
    with trio.fail_after(10):
        return await process.wait()


async def _removed(group: Group) -> None:
    with trio.fail_after(10):
        while True:
            try:
                group.remove()
                return
            except OSError:  # a killed task is still exiting
                await trio.sleep(0.01)


async def _clear(groups: list[Group], commands: list[trio.Process]) -> None:
    """Whatever a test left: its commands killed, then its groups removed."""
    for command in commands:
        if command.returncode is None:
            command.kill()
        await _exited(command)
    for group in groups:
        await _removed(group)


async def test_a_dead_daemons_cgroups_go_at_start_up_with_what_still_ran_in_them(
    workspace: str, sleepers: list[trio.Process]
) -> None:
    config = _config(workspace)
    host = _host(config)
    dead = _dead_pid()
    # The name this version gives, and the one before it (the pid alone).
    groups = [
        Group(host, f"csp-exec-{dead}-s{secrets.randbelow(10**9)}-{secrets.token_hex(8)}"),
        Group(host, f"csp-exec-{dead}-{secrets.token_hex(8)}"),
    ]
    commands = []
    for group in groups:
        commands.append(await _sleeper(sleepers))
        group.enter(commands[-1].pid)
    try:
        with trio.fail_after(60):
            sandbox = await probe_sandbox(config)
        assert sandbox.cgroup is not None
        assert sandbox.cgroup.directories == host.directories
        assert [group.exists() for group in groups] == [False, False]
        assert [await _exited(command) for command in commands] == [-9, -9]
    finally:
        await _clear(groups, commands)


async def test_a_live_daemons_cgroups_stay_with_their_commands_running(
    workspace: str, sleepers: list[trio.Process]
) -> None:
    config = _config(workspace)
    host = _host(config)
    daemon = await _sleeper(sleepers)  # started before its groups, as a daemon is
    groups = [
        Group(host, f"csp-exec-{daemon.pid}-s{_start(daemon.pid)}-{secrets.token_hex(8)}"),
        Group(host, f"csp-exec-{daemon.pid}-{secrets.token_hex(8)}"),  # a name from before
        Group(host, f"csp-exec-{os.getpid()}-s{_start(os.getpid())}-{secrets.token_hex(8)}"),
    ]
    commands = []
    for group in groups:
        commands.append(await _sleeper(sleepers))
        group.enter(commands[-1].pid)
    try:
        with trio.fail_after(60):
            await probe_sandbox(config)
        assert [group.exists() for group in groups] == [True, True, True]
        assert [command.returncode for command in commands] == [None, None, None]
    finally:
        await _clear(groups, commands)


async def test_a_reused_pid_does_not_keep_a_dead_daemons_cgroups(
    workspace: str, sleepers: list[trio.Process]
) -> None:
    """The pid is alive, but not the process that made the group: a later start (the pid was
    reused), or this very daemon's pid after a restart (pid 1 in a container, each time)."""
    config = _config(workspace)
    host = _host(config)
    other = await _sleeper(sleepers)
    stale = int(_start(other.pid)) - 1
    groups = [
        Group(host, f"csp-exec-{other.pid}-s{stale}-{secrets.token_hex(8)}"),
        Group(host, f"csp-exec-{os.getpid()}-s{stale}-{secrets.token_hex(8)}"),
    ]
    commands = []
    for group in groups:
        commands.append(await _sleeper(sleepers))
        group.enter(commands[-1].pid)
    try:
        with trio.fail_after(60):
            await probe_sandbox(config)
        assert [group.exists() for group in groups] == [False, False]
        assert [await _exited(command) for command in commands] == [-9, -9]
        assert other.returncode is None  # the process that reused the pid: left alone
    finally:
        await _clear(groups, commands)


async def test_a_group_that_cannot_be_removed_is_skipped_and_logged_once(
    workspace: str, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    # A child cgroup keeps rmdir failing (EBUSY) with no task to kill: the sweep gives up
    # after its rounds (about 3.5 s, the runner's own clear-up), says so once, and goes on.
    host = _host(_config(workspace))
    group = Group(host, f"csp-exec-{_dead_pid()}-s1-{secrets.token_hex(8)}")
    for path in group.paths:
        os.mkdir(os.path.join(path, "inner"))
    try:
        with trio.fail_after(30):
            assert os.path.basename(group.paths[0]) not in await remove_leftovers(host)
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1
        assert all(path in warnings[0].getMessage() for path in group.paths)
        assert group.exists()
    finally:
        group.remove()
