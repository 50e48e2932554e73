"""run_command end to end: results, the seed's FAIL shapes, timeouts that kill whole trees,
output caps, resource figures, cancellation."""

from __future__ import annotations

import os
import secrets
import shlex
from collections.abc import Iterator
from dataclasses import replace
from functools import partial
from typing import Any

import pytest
import trio

from csp_web.core.api.errors import OpError
from protocol import ErrorCode
from specialists.tool.exec import ExecRequest, ExecResult, Limit, run_command

from .exec_support import KINDS, live_pids, make_config, probe, scratch_dir, wait_for_pid

pytestmark = pytest.mark.parametrize("kind", KINDS)


@pytest.fixture
def workspace() -> Iterator[str]:
    with scratch_dir() as path:
        yield path


async def run(
    workspace: str,
    kind: str,
    command: str,
    *,
    shell: bool = False,
    timeout_ms: int = 20_000,
    **config: Any,
) -> ExecResult:
    config.setdefault("max_processes", 10 if kind == "bwrap" else 4096)  # see test_exec_sandbox
    exec_config = make_config(workspace, **config)
    sandbox = await probe(exec_config, kind)
    request = ExecRequest(command, timeout_ms=timeout_ms, shell=shell)
    with trio.fail_after(60):
        return await run_command(request, exec_config, sandbox=sandbox)


def marker() -> str:
    """A unique sleep length: ``sleep <marker>`` names one test's process on the host."""
    return f"{900 + secrets.randbelow(99)}.{secrets.randbelow(10**6):06d}"


async def test_successful_command_returns_its_output_and_figures(workspace: str, kind: str) -> None:
    result = await run(workspace, kind, "echo 19 tests passed")
    assert (result.exit_code, result.signal, result.limits) == (0, None, frozenset())
    assert result.ok
    assert result.failure() is None
    assert result.stdout == "19 tests passed\n"
    assert result.stdout_summary == "19 tests passed"
    assert result.stderr == ""
    assert (result.program, result.sandbox) == ("echo", kind)
    assert result.duration_ms >= 0
    assert result.cpu_ms is not None
    assert result.peak_rss_kib is not None


async def test_non_zero_exit_is_returned_and_fails_as_the_seed_shows(
    workspace: str, kind: str
) -> None:
    result = await run(workspace, kind, "ls /no/such/file")
    error = result.failure()
    assert error is not None
    assert (error.code, error.detail, error.scope, error.data) == (
        ErrorCode.COMMAND_FAILED,
        "ls /no/such/file",
        ("shell",),
        "exit:2",
    )
    # Nothing on stdout: no STDOUT_SUMMARY; the exit status as EXIT_CODE too.
    assert error.fields == (("EXIT_CODE", "2"), ("STDERR_SUMMARY", result.stderr_summary))
    assert "No such file" in result.stderr_summary


async def test_a_failing_command_that_wrote_to_stdout_fails_with_its_stdout_summary(
    workspace: str, kind: str
) -> None:
    """Issue 21 §3: pytest and npm print their failure report on stdout, which the reply
    dropped."""
    script = "import sys; print('1 failed, 19 passed'); sys.exit(1)"
    result = await run(workspace, kind, f'python3 -c "{script}"')
    error = result.failure()
    assert error is not None
    assert (error.code, error.data) == (ErrorCode.COMMAND_FAILED, "exit:1")
    assert error.fields == (
        ("EXIT_CODE", "1"),
        ("STDOUT_SUMMARY", "1 failed, 19 passed"),
        ("STDERR_SUMMARY", ""),
    )


async def test_timeout_kills_and_fails_with_exit_null(workspace: str, kind: str) -> None:
    result = await run(workspace, kind, "sleep 30", timeout_ms=300)
    assert result.exit_code is None
    assert result.limits == {Limit.TIMEOUT}
    error = result.failure()
    assert error is not None
    assert (error.code, error.detail, error.data, error.fields) == (
        ErrorCode.TIMEOUT_EXCEEDED,
        "300ms",
        "exit:null",
        (("COMMAND", "sleep 30"),),
    )


async def test_timeout_kills_a_setsid_grandchild(workspace: str, kind: str) -> None:
    length = marker()
    whole, fraction = length.split(".")
    # The sleep's own command line holds the marker; the shell's only holds its halves.
    command = f'm={whole}; setsid sleep "$m.{fraction}" & wait'
    async with trio.open_nursery() as nursery:
        done = trio.Event()
        results: list[ExecResult] = []

        async def go() -> None:
            results.append(await run(workspace, kind, command, shell=True, timeout_ms=3_000))
            done.set()

        nursery.start_soon(go)
        pid = await wait_for_pid(f"sleep {length}")
        await done.wait()
    assert results[0].limits == {Limit.TIMEOUT}
    assert not os.path.exists(f"/proc/{pid}") or pid not in live_pids(f"sleep {length}")


async def test_background_leftover_is_killed_when_the_command_exits(
    workspace: str, kind: str
) -> None:
    length = marker()
    whole, fraction = length.split(".")
    # Waits until the detached sleep runs, then exits leaving it behind holding stdout.
    command = (
        f'm={whole}; setsid sleep "$m.{fraction}" & p=$!; '
        "until grep -q sleep /proc/$p/cmdline 2>/dev/null; do :; done; echo left"
    )
    result = await run(workspace, kind, command, shell=True, timeout_ms=15_000)
    assert (result.exit_code, result.stdout, result.limits) == (0, "left\n", frozenset())
    assert live_pids(f"sleep {length}") == []


async def test_endless_output_is_capped_and_counted_not_kept(workspace: str, kind: str) -> None:
    cap = 64 * 1024
    result = await run(workspace, kind, "yes", timeout_ms=500, max_output_bytes=cap)
    assert result.limits == {Limit.TIMEOUT, Limit.OUTPUT}
    assert result.stdout_bytes > 10 * cap
    assert len(result.stdout.encode()) < cap + 100  # the kept bytes plus the omission marker
    assert len(result.stdout_summary) <= 500


async def test_output_of_exactly_the_cap_is_complete(workspace: str, kind: str) -> None:
    cap = 8192
    command = f"dd if=/dev/zero bs={cap} count=1 status=none"
    result = await run(workspace, kind, command, max_output_bytes=cap)
    over = await run(
        workspace, kind, command.replace(f"bs={cap}", f"bs={cap + 1}"), max_output_bytes=cap
    )
    assert (result.stdout_bytes, result.limits) == (cap, frozenset())
    assert over.stdout_bytes == cap + 1
    assert over.limits == {Limit.OUTPUT}


async def test_invalid_utf8_output_is_decoded_with_replacement(workspace: str, kind: str) -> None:
    result = await run(workspace, kind, r"printf 'a\377b'")
    assert result.stdout == "a\ufffdb"


async def test_cpu_time_covers_the_command(workspace: str, kind: str) -> None:
    code = "import time\nwhile time.process_time() < 0.3: pass"
    result = await run(workspace, kind, shlex.join(["python3", "-c", code]))
    # GNU time prints user and system time each cut down to 10 ms.
    assert result.cpu_ms is not None
    assert result.cpu_ms >= 300 - 20


async def test_peak_rss_covers_the_command_s_memory(workspace: str, kind: str) -> None:
    code = "b = bytearray(64 * 1024 * 1024)"
    result = await run(workspace, kind, shlex.join(["python3", "-c", code]))
    assert result.peak_rss_kib is not None
    assert result.peak_rss_kib >= 64 * 1024


async def test_death_by_signal_reads_as_128_plus_n(workspace: str, kind: str) -> None:
    result = await run(workspace, kind, "kill -TERM $$", shell=True)
    assert (result.exit_code, result.signal, result.limits) == (143, 15, frozenset())
    error = result.failure()
    assert error is not None
    assert error.data == "exit:143"


async def test_sigxcpu_names_the_cpu_limit(workspace: str, kind: str) -> None:
    result = await run(workspace, kind, "kill -XCPU $$", shell=True)
    assert result.signal == 24
    assert result.limits == {Limit.CPU}
    error = result.failure()
    assert error is not None
    assert error.data == "exit:152,limit:cpu"


async def test_cancelling_the_caller_kills_the_tree_before_returning(
    workspace: str, kind: str
) -> None:
    length = marker()
    config = make_config(workspace, max_processes=10 if kind == "bwrap" else 4096)
    sandbox = await probe(config, kind)
    with trio.move_on_after(30) as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                partial(run_command, ExecRequest(f"sleep {length}"), config, sandbox=sandbox)
            )
            pid = await wait_for_pid(f"sleep {length}")
            nursery.cancel_scope.cancel()
    assert not scope.cancelled_caught
    assert pid not in live_pids(f"sleep {length}")


async def test_missing_wrapper_program_is_not_available(workspace: str, kind: str) -> None:
    config = make_config(workspace)
    sandbox = replace(
        await probe(config, kind), prlimit="/nonexistent/prlimit", setpriv="/nonexistent/setpriv"
    )
    with pytest.raises(OpError) as caught:
        await run_command(ExecRequest("true"), config, sandbox=sandbox)
    assert caught.value.code == ErrorCode.NOT_AVAILABLE
