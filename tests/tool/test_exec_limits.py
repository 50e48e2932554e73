"""Memory and task bounds (issues 8.2 and 8.14): a cgroup per command where the host has one,
every tmpfs sized or read-only, and the rlimit fallback sized for commands running at once.

These run on whatever the host offers: the cgroup tests fail (not skip) when no cgroup can be
made, since CI runs as root on a host with the memory and pids controllers (v1 or v2).
"""

from __future__ import annotations

import os
import secrets
import shlex
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import trio

from specialists.tool.exec import (
    ExecRequest,
    ExecResult,
    Limit,
    Sandbox,
    probe_sandbox,
    run_command,
)
from specialists.tool.exec.config import ProgramRule

from .exec_support import IS_ROOT, KINDS, live_pids, make_config, probe, scratch_dir

MIB = 1024 * 1024


@pytest.fixture
def workspace() -> Iterator[str]:
    with scratch_dir() as path:
        yield path


async def sandbox_for(workspace: str, kind: str = "bwrap", **config: Any) -> Sandbox:
    sandbox = await probe(make_config(workspace, **config), kind)
    if config.get("cgroup") != "off" and sandbox.cgroup is None:
        pytest.fail(f"a cgroup is required for this test: {sandbox.cgroup_reason}")
    return sandbox


async def run(workspace: str, command: str, *, kind: str = "bwrap", **config: Any) -> ExecResult:
    exec_config = make_config(workspace, **config)
    sandbox = await sandbox_for(workspace, kind, **config)
    with trio.fail_after(60):
        return await run_command(
            ExecRequest(command, timeout_ms=20_000), exec_config, sandbox=sandbox
        )


def python(code: str, *args: str) -> str:
    return shlex.join(["python3", "-c", code, *args])


# N processes each touch M MiB and hold it for a second, so that all hold theirs at once.
_HOLD = (
    "import os, sys, time\n"
    "n, mib = int(sys.argv[1]), int(sys.argv[2])\n"
    "kids = []\n"
    "for _ in range(n):\n"
    "    pid = os.fork()\n"
    "    if pid == 0:\n"
    "        block = bytearray(mib << 20)\n"
    "        for i in range(0, len(block), 4096): block[i] = 1\n"
    "        time.sleep(1); os._exit(0)\n"
    "    kids.append(pid)\n"
    "codes = [os.waitstatus_to_exitcode(os.waitpid(k, 0)[1]) for k in kids]\n"
    "print(codes); sys.exit(0 if codes == [0] * n else 1)"
)


@pytest.mark.parametrize("kind", KINDS)
async def test_memory_is_bounded_for_the_whole_command_not_per_process(
    workspace: str, kind: str
) -> None:
    # Four processes of 100 MiB each: every one is far under a 256 MiB RLIMIT_AS (which let
    # 4 x 480 MB run), but together they pass the command's 256 MiB.
    fits = await run(workspace, python(_HOLD, "2", "100"), kind=kind, max_memory_bytes=256 * MIB)
    over = await run(workspace, python(_HOLD, "4", "100"), kind=kind, max_memory_bytes=256 * MIB)
    assert (fits.exit_code, fits.limits) == (0, frozenset()), fits.stderr
    assert over.exit_code != 0
    assert Limit.MEMORY in over.limits
    assert over.limits_by in ("cgroup1", "cgroup2")


async def test_tmpfs_writes_count_against_the_commands_memory(workspace: str) -> None:
    # /tmp may hold 256 MiB, the command only 64 MiB in all: the tmpfs pages are its memory.
    write = "dd if=/dev/zero of=/tmp/f bs=1M count={} status=none"
    fits = await run(
        workspace, write.format(16), max_memory_bytes=64 * MIB, tmp_size_bytes=256 * MIB
    )
    over = await run(
        workspace, write.format(128), max_memory_bytes=64 * MIB, tmp_size_bytes=256 * MIB
    )
    assert fits.exit_code == 0, fits.stderr
    assert over.exit_code != 0
    assert Limit.MEMORY in over.limits


async def test_v8_starts_under_the_cgroup_memory_limit_where_rlimit_as_kills_it(
    workspace: str,
) -> None:
    # node reserves far more address space than it uses (CodeRange, the cage).
    node = make_config(workspace).search_path
    if not any(os.access(os.path.join(d, "node"), os.X_OK) for d in node.split(":")):
        pytest.fail("node is required (scripts/install-system-deps installs nodejs)")
    config: dict[str, Any] = {
        "allowed_programs": (*make_config(workspace).allowed_programs, *_rules("node")),
        "max_processes": 64,
    }
    bounded = await run(workspace, "node -e 'console.log(6 * 7)'", **config)
    fallback = await run(workspace, "node -e 'console.log(6 * 7)'", cgroup="off", **config)
    assert (bounded.exit_code, bounded.stdout) == (0, "42\n"), bounded.stderr
    assert fallback.exit_code != 0
    assert "memory" in fallback.stderr.lower()


def _rules(*names: str) -> tuple[ProgramRule, ...]:
    return tuple(ProgramRule(name) for name in names)


_FORK = (
    "import os, sys, time\n"
    "n = int(sys.argv[1])\n"
    "for _ in range(n):\n"
    "    if os.fork() == 0:\n"
    "        time.sleep(2); os._exit(0)\n"
    "print('forked', n)"
)


async def test_tasks_stop_at_max_processes_counting_every_wrapper(workspace: str) -> None:
    # In the cgroup: the entering shell's exec chain (setpriv -> bwrap), bwrap's monitor and
    # the namespace's init, GNU time and python are 4 tasks; python may fork 4 more, not 5.
    fits = await run(workspace, python(_FORK, "4"), max_processes=8)
    over = await run(workspace, python(_FORK, "5"), max_processes=8)
    assert (fits.exit_code, fits.stdout, fits.limits) == (0, "forked 4\n", frozenset())
    assert over.exit_code != 0
    assert "Resource temporarily unavailable" in over.stderr
    assert over.limits == {Limit.PROCESSES}


@pytest.mark.parametrize("kind", KINDS)
async def test_many_commands_at_once_each_get_the_whole_process_budget(
    workspace: str, kind: str
) -> None:
    # tool.max_running 500 with max_processes 10 failed 46 of 50 without bwrap: RLIMIT_NPROC
    # is one budget for the uid. Each command's cgroup counts its own tasks.
    config = make_config(workspace, max_processes=10)
    sandbox = await sandbox_for(workspace, kind, max_processes=10)
    results: list[ExecResult] = []

    async def one() -> None:
        request = ExecRequest(python(_FORK, "3"), timeout_ms=30_000)
        results.append(await run_command(request, config, sandbox=sandbox))

    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            for _ in range(30):
                nursery.start_soon(one)
    assert [(r.exit_code, r.stderr) for r in results] == [(0, "")] * 30


async def test_without_a_cgroup_and_bwrap_nproc_is_the_budget_of_all_running_commands(
    workspace: str,
) -> None:
    config = make_config(workspace, cgroup="off", bwrap_program=None, max_processes=10)
    sandbox = await probe_sandbox(config, concurrent=50)
    assert (sandbox.kind, sandbox.limits, sandbox.nproc) == ("none", "rlimit", 500)
    with trio.fail_after(60):
        result = await run_command(ExecRequest("cat /proc/self/limits"), config, sandbox=sandbox)
    assert "Max processes             500                  500" in result.stdout


async def test_a_cgroup_parent_that_is_not_delegated_falls_back_and_says_why(
    workspace: str,
) -> None:
    with scratch_dir(owner=None) as plain:  # a plain directory, not a cgroup
        sandbox = await probe(make_config(workspace, cgroup_parent=plain), "bwrap")
    assert sandbox.cgroup is None
    assert sandbox.limits == "rlimit"
    assert "not delegated" in sandbox.cgroup_reason
    assert plain in sandbox.cgroup_reason


@pytest.mark.parametrize("kind", KINDS)
async def test_every_command_cgroup_is_removed_afterwards_even_after_a_timeout(
    workspace: str, kind: str
) -> None:
    sandbox = await sandbox_for(workspace, kind)
    assert sandbox.cgroup is not None
    before = set(_children(sandbox.cgroup.directories))
    config = make_config(workspace)
    stay = python("import os, time\nfor _ in range(2): os.fork()\ntime.sleep(60)")
    with trio.fail_after(60):
        killed = await run_command(ExecRequest(stay, timeout_ms=500), config, sandbox=sandbox)
        await run_command(ExecRequest("true"), config, sandbox=sandbox)
    assert killed.limits == {Limit.TIMEOUT}
    assert set(_children(sandbox.cgroup.directories)) == before


def _children(directories: tuple[str, ...]) -> list[str]:
    # Only this process's: other daemons (or test runs) on the machine make their own.
    ours = f"csp-exec-{os.getpid()}-"
    return [
        os.path.join(d, name)
        for d in directories
        for name in os.listdir(d)
        if name.startswith(ours)
    ]


@pytest.mark.skipif(not IS_ROOT, reason="the cgroup holds the command only under another uid")
async def test_without_bwrap_the_cgroup_kills_a_leftover_that_left_the_tree_and_dropped_the_token(
    workspace: str,
) -> None:
    length = f"{900 + secrets.randbelow(99)}.{secrets.randbelow(10**6):06d}"
    whole, fraction = length.split(".")
    # Detached, re-parented to init once the shell exits, and with a fresh environment: the
    # /proc sweep finds it neither by parent nor by token; its cgroup holds it all the same.
    command = (
        f'm={whole}; setsid env -i sleep "$m.{fraction}" >/dev/null 2>&1 & p=$!; '
        "until grep -q sleep /proc/$p/cmdline 2>/dev/null; do :; done; echo left"
    )
    config = make_config(workspace)
    sandbox = await sandbox_for(workspace, "none")
    with trio.fail_after(60):
        result = await run_command(
            ExecRequest(command, timeout_ms=15_000, shell=True), config, sandbox=sandbox
        )
    assert (result.exit_code, result.stdout) == (0, "left\n")
    assert live_pids(f"sleep {length}") == []


@pytest.mark.parametrize("path", ["/run", "/home", "/root", "/dev"])
async def test_masks_and_dev_are_read_only_so_they_take_no_memory(
    workspace: str, path: str
) -> None:
    result = await run(workspace, f"touch {path}/planted", cgroup="off")
    assert result.exit_code != 0
    assert "Read-only file system" in result.stderr


async def test_dev_shm_holds_the_tmp_size_but_not_one_byte_more(workspace: str) -> None:
    write = "dd if=/dev/zero of=/dev/shm/f bs={} count=1 status=none"
    fits = await run(workspace, write.format(MIB), tmp_size_bytes=MIB, cgroup="off")
    over = await run(workspace, write.format(MIB + 1), tmp_size_bytes=MIB, cgroup="off")
    assert fits.exit_code == 0, fits.stderr
    assert over.exit_code != 0
    assert "No space left" in over.stderr


async def test_device_nodes_still_work_under_the_read_only_dev(workspace: str) -> None:
    result = await run(workspace, python("open('/dev/null', 'w').write('x'); print('ok')"))
    assert (result.exit_code, result.stdout) == (0, "ok\n")


def test_limits_by_names_the_host_cgroup_or_rlimit() -> None:
    sandbox = Sandbox("none", "/usr/bin/prlimit", "/usr/bin/setpriv", None)
    assert sandbox.limits == "rlimit"
    assert replace(sandbox, nproc=3).nproc == 3
