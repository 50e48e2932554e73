"""The OS boundary, observed from inside real commands: user, filesystem, network, PIDs,
environment, and each resource limit at N and N+1."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import trio

from csp_web.core.api.errors import OpError
from protocol import ErrorCode
from specialists.tool.exec import ExecRequest, ExecResult, Limit, probe_sandbox, run_command
from specialists.tool.exec._cgroup import CommandCgroup
from specialists.tool.exec._limits import ulimit_script
from specialists.tool.exec._sandbox import wrap_argv

from .exec_support import IS_ROOT, KINDS, SANDBOX_UID, make_config, probe, scratch_dir

MIB = 1024 * 1024


@pytest.fixture
def workspace() -> Iterator[str]:
    with scratch_dir() as path:
        yield path


async def run(workspace: str, command: str, *, kind: str = "bwrap", **config: Any) -> ExecResult:
    if kind == "none":
        # Without bwrap RLIMIT_NPROC is one budget for every process of the uid on the host,
        # zombies included (bwrap leaves its sandbox init for the host's init to reap, which
        # some container inits do lazily), so these tests give that budget room.
        config.setdefault("max_processes", 4096)
    exec_config = make_config(workspace, **config)
    sandbox = await probe(exec_config, kind)
    with trio.fail_after(60):
        return await run_command(
            ExecRequest(command, timeout_ms=20_000), exec_config, sandbox=sandbox
        )


def python(code: str, *args: str) -> str:
    return shlex.join(["python3", "-c", code, *args])


async def test_probe_finds_bubblewrap_with_tmpfs_size_support(workspace: str) -> None:
    sandbox = await probe(make_config(workspace), "bwrap")
    assert sandbox.kind == "bwrap"
    assert "--size" in sandbox.bwrap_options


async def test_probe_without_bwrap_says_none_and_why(workspace: str) -> None:
    sandbox = await probe_sandbox(make_config(workspace, bwrap_program="no-such-bwrap"))
    assert sandbox.kind == "none"
    assert "no-such-bwrap" in sandbox.reason


async def test_probe_requiring_bwrap_that_is_missing_is_not_available(workspace: str) -> None:
    config = make_config(workspace, bwrap_program="no-such-bwrap", require_bwrap=True)
    with pytest.raises(OpError) as caught:
        await probe_sandbox(config)
    assert caught.value.code == ErrorCode.NOT_AVAILABLE


@pytest.mark.parametrize("kind", KINDS)
async def test_command_runs_as_the_unprivileged_user(workspace: str, kind: str) -> None:
    result = await run(workspace, "id -u", kind=kind)
    assert result.stdout.strip() == str(SANDBOX_UID)


@pytest.mark.parametrize("kind", KINDS)
async def test_command_writes_in_its_working_dir(workspace: str, kind: str) -> None:
    result = await run(workspace, "touch made-here", kind=kind)
    assert result.exit_code == 0
    assert os.path.exists(os.path.join(workspace, "made-here"))


async def test_command_cannot_write_outside_its_working_dir_even_where_it_owns_it(
    workspace: str,
) -> None:
    # The directory belongs to the sandbox user, so only the read-only mount can stop this.
    with scratch_dir(parent="/var/tmp") as outside:
        target = os.path.join(outside, "escaped")
        result = await run(workspace, f"touch {target}")
        assert result.exit_code != 0
        assert "Read-only file system" in result.stderr
        assert not os.path.exists(target)


@pytest.mark.skipif(not IS_ROOT, reason="only a root daemon switches commands to another uid")
@pytest.mark.parametrize("kind", KINDS)
async def test_command_cannot_read_a_root_only_file(workspace: str, kind: str) -> None:
    with scratch_dir(owner=None, mode=0o700, parent="/var/tmp") as private:
        secret = os.path.join(private, "secret")
        with open(secret, "w") as f:
            f.write("hunter2")
        result = await run(workspace, f"cat {secret}", kind=kind)
    assert result.exit_code != 0
    assert "hunter2" not in result.stdout


async def test_masked_paths_are_empty_inside_the_sandbox(workspace: str) -> None:
    with scratch_dir(owner=None, parent="/var/tmp") as socket_dir:
        with open(os.path.join(socket_dir, "csp.sock"), "w"):
            pass
        result = await run(workspace, f"ls -A {socket_dir}", masked_paths=(socket_dir,))
    assert result.exit_code == 0
    assert result.stdout == ""


async def test_tmp_is_private_and_holds_its_size_but_not_one_byte_more(workspace: str) -> None:
    size = MIB
    write = "dd if=/dev/zero of=/tmp/f bs={} count=1 status=none"
    fits = await run(workspace, write.format(size), tmp_size_bytes=size)
    over = await run(workspace, write.format(size + 1), tmp_size_bytes=size)
    assert fits.exit_code == 0
    assert over.exit_code != 0
    assert "No space left" in over.stderr


async def test_sandbox_has_no_network_not_even_the_host_loopback(workspace: str) -> None:
    listener = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with listener:
        await listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5)"
        result = await run(workspace, python(code))
    assert result.exit_code != 0
    assert "Connection refused" in result.stderr


async def test_sandbox_has_its_own_pid_namespace(workspace: str) -> None:
    code = "import os; print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))"
    result = await run(workspace, python(code))
    pids = [int(p) for p in result.stdout.strip("[]\n").split(", ")]
    assert os.getpid() not in pids
    assert max(pids) < 10


@pytest.mark.parametrize("kind", KINDS)
async def test_environment_holds_only_the_engine_and_requested_names(
    workspace: str, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DAEMON_SECRET", "hunter2")
    result = await run(workspace, "printenv", kind=kind)
    names = {line.split("=", 1)[0] for line in result.stdout.splitlines()}
    assert result.exit_code == 0, result.stderr
    assert "DAEMON_SECRET" not in names
    assert {"PATH", "HOME", "TMPDIR", "LANG"} <= names


@pytest.mark.parametrize("kind", KINDS)
async def test_every_rlimit_is_set_inside_without_a_cgroup(workspace: str, kind: str) -> None:
    result = await run(
        workspace,
        "cat /proc/self/limits",
        kind=kind,
        max_open_files=77,
        max_processes=4096,
        cgroup="off",
    )
    limits = {line[:26].strip(): line[26:].split()[:2] for line in result.stdout.splitlines()}
    assert limits["Max address space"] == [str(512 * MIB)] * 2
    assert limits["Max processes"] == ["4096", "4096"]
    assert limits["Max file size"] == [str(64 * MIB)] * 2
    assert limits["Max open files"] == ["77", "77"]
    assert limits["Max cpu time"] == ["20", "21"]  # the 20 s timeout, in CPU seconds
    assert limits["Max core file size"] == ["0", "0"]


async def test_without_a_cgroup_max_processes_counts_the_sandbox_init_and_time(
    workspace: str,
) -> None:
    # bwrap's init, GNU time and python are 3 of the 6; python may fork 3 more, not 4.
    code = (
        "import os, sys, time\n"
        "n = int(sys.argv[1])\n"
        "for _ in range(n):\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(2); os._exit(0)\n"
        "print('forked', n)"
    )
    fits = await run(workspace, python(code, "3"), max_processes=6, cgroup="off")
    over = await run(workspace, python(code, "4"), max_processes=6, cgroup="off")
    assert (fits.exit_code, fits.stdout) == (0, "forked 3\n")
    assert over.exit_code != 0
    assert "Resource temporarily unavailable" in over.stderr


async def test_without_a_cgroup_bwrap_process_budget_is_per_command(workspace: str) -> None:
    code = (
        "import os, time\n"
        "for _ in range(3):\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(1); os._exit(0)"
    )
    config = make_config(workspace, max_processes=6, cgroup="off")
    sandbox = await probe(config, "bwrap")
    results: list[ExecResult] = []

    async def one() -> None:
        results.append(await run_command(ExecRequest(python(code)), config, sandbox=sandbox))

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(one)
    assert [r.exit_code for r in results] == [0, 0, 0]


@pytest.mark.parametrize("kind", KINDS)
async def test_open_files_stop_at_the_limit(workspace: str, kind: str) -> None:
    code = (
        "import os\nfds = []\ntry:\n    while True: fds.append(os.open('/dev/null', os.O_RDONLY))\n"
        "except OSError: print(max(fds))"
    )
    result = await run(workspace, python(code), kind=kind, max_open_files=64)
    assert result.stdout == "63\n"  # descriptors 0..63 are the 64 allowed; a 65th is refused


@pytest.mark.parametrize("kind", KINDS)
async def test_file_of_the_size_limit_is_written_and_one_byte_more_is_killed(
    workspace: str, kind: str
) -> None:
    write = "dd if=/dev/zero of=big bs={} count=1 status=none"
    fits = await run(workspace, write.format(MIB), kind=kind, max_file_bytes=MIB)
    over = await run(workspace, write.format(MIB + 1), kind=kind, max_file_bytes=MIB)
    assert fits.exit_code == 0
    assert over.limits == {Limit.FILE_SIZE}


@pytest.mark.parametrize("kind", KINDS)
async def test_a_file_size_limit_of_part_of_a_block_is_exact_too(workspace: str, kind: str) -> None:
    # ulimit -f counts 512-byte blocks: 1000 bytes is left to prlimit, which says it exactly.
    write = "dd if=/dev/zero of=big bs={} count=1 status=none"
    fits = await run(workspace, write.format(1000), kind=kind, max_file_bytes=1000)
    over = await run(workspace, write.format(1001), kind=kind, max_file_bytes=1000)
    assert fits.exit_code == 0
    assert over.limits == {Limit.FILE_SIZE}


async def test_with_a_cgroup_its_entering_shell_sets_the_limits_and_prlimit_is_left_out(
    workspace: str,
) -> None:
    config = make_config(workspace)
    sandbox = await probe(config, "bwrap")
    assert sandbox.cgroup is not None, sandbox.cgroup_reason
    group = CommandCgroup.create(sandbox.cgroup, "argv", memory_bytes=MIB, max_tasks=10)
    try:
        argv = wrap_argv(
            ["/bin/true"], sandbox=sandbox, config=config, working_dir=workspace,
            timeout_ms=30_000, cgroup=group,
        )  # fmt: skip
    finally:
        await group.close()
    assert sandbox.prlimit not in argv
    assert argv[:3] == group.enter_argv(ulimit_script(config, timeout_ms=30_000) or "")[:3]
    assert "ulimit -n 1024" in argv[2]


async def test_closing_a_command_cgroup_kills_what_is_still_in_it_and_removes_it(
    workspace: str,
) -> None:
    # close tries rmdir before any kill: a task left inside must still be killed, not kept.
    sandbox = await probe(make_config(workspace), "bwrap")
    assert sandbox.cgroup is not None, sandbox.cgroup_reason
    group = CommandCgroup.create(sandbox.cgroup, "left", memory_bytes=64 * MIB, max_tasks=10)
    left = await trio.lowlevel.open_process([*group.enter_argv(), "/bin/sleep", "60"])
    try:
        with trio.fail_after(10):
            while not any(Path(path).read_text().strip() for path in group.procs_files()):
                await trio.sleep(0.01)
            await group.close()
            assert await left.wait() == -9
    finally:
        left.kill()
    assert not any(os.path.exists(path) for path in group.directories)


async def test_a_process_started_through_the_entering_shell_is_in_every_directory_of_its_cgroup(
    workspace: str,
) -> None:
    sandbox = await probe(make_config(workspace), "bwrap")
    assert sandbox.cgroup is not None, sandbox.cgroup_reason
    group = CommandCgroup.create(sandbox.cgroup, "entry", memory_bytes=64 * MIB, max_tasks=10)
    # The shell forks before its exec: the child must be born inside, as the command's are.
    script = "/bin/sleep 60 & echo $!; wait"
    started = await trio.lowlevel.open_process(
        [*group.enter_argv(), "/bin/sh", "-c", script], stdout=subprocess.PIPE
    )
    try:
        with trio.fail_after(10):
            assert started.stdout is not None
            child = int((await started.stdout.receive_some(64)).decode())
            members = [set(Path(path).read_text().split()) for path in group.procs_files()]
            assert all({str(started.pid), str(child)} <= found for found in members), members
    finally:
        started.kill()
        await group.close()
        await started.wait()


async def test_on_cgroup_v1_the_entering_shell_moves_itself_by_its_tasks_files(
    workspace: str,
) -> None:
    # A cgroup.procs write waits out an RCU grace period (3-6 ms each, two per command); a
    # tasks write of the shell's one thread skips that lock (_cgroup.CommandCgroup.entry_files).
    sandbox = await probe(make_config(workspace), "bwrap")
    if sandbox.cgroup is None or sandbox.cgroup.kind != "cgroup1":
        pytest.skip("needs cgroup v1")
    group = CommandCgroup.create(sandbox.cgroup, "tasks", memory_bytes=MIB, max_tasks=10)
    try:
        files = group.enter_argv()[4:-1]
    finally:
        await group.close()
    assert files == [os.path.join(path, "tasks") for path in group.directories]


@pytest.mark.parametrize("kind", KINDS)
async def test_a_command_cannot_move_itself_out_of_its_cgroup_by_any_entry_file(
    workspace: str, kind: str
) -> None:
    sandbox = await probe(make_config(workspace), kind)
    assert sandbox.cgroup is not None, sandbox.cgroup_reason
    files = [
        os.path.join(parent, name)
        for parent in sandbox.cgroup.directories
        for name in ("tasks", "cgroup.procs", "cgroup.threads")
        if os.path.exists(os.path.join(parent, name))
    ]
    code = (
        "import sys\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n        with open(path, 'w') as f:\n            f.write('0')\n"
        "    except OSError:\n        continue\n"
        "    print(path)"
    )
    result = await run(workspace, python(code, *files), kind=kind)
    assert (result.exit_code, result.stdout) == (0, "")


@pytest.mark.parametrize("kind", KINDS)
async def test_without_a_cgroup_address_space_fits_up_to_the_limit_and_not_a_page_beyond(
    workspace: str, kind: str
) -> None:
    # Map what is left below the limit, then one page more: the second map must fail.
    code = (
        "import mmap, re\n"
        "limit = int(open('/proc/self/limits').read().split('Max address space')[1].split()[0])\n"
        "def used():\n"
        "    status = open('/proc/self/status').read()\n"
        "    return int(re.search(r'VmSize:\\s+(\\d+)', status)[1]) * 1024\n"
        "room = limit - used() - 1024 * 1024\n"  # a MiB of slack for the mmap object itself
        "m = mmap.mmap(-1, room); m.close()\n"
        "try:\n    mmap.mmap(-1, limit - used() + 4096)\nexcept OSError: print('refused')"
    )
    result = await run(workspace, python(code), kind=kind, max_memory_bytes=256 * MIB, cgroup="off")
    assert (result.exit_code, result.stdout) == (0, "refused\n")


async def test_config_requiring_bwrap_runs_in_it(workspace: str) -> None:
    config = make_config(workspace, require_bwrap=True)
    sandbox = await probe_sandbox(config)
    result = await run_command(ExecRequest("id -u"), replace(config), sandbox=sandbox)
    assert result.sandbox == "bwrap"
