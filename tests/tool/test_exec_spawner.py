"""The spawner threads: what a fork there returns or raises comes back, and a cancellation
never loses a child that was started (the slow proof that commands outlive trio's worker
threads is in test_exec_lifetime)."""

from __future__ import annotations

import os
import subprocess
import threading

import pytest
import trio

from specialists.tool.exec._spawner import run_in_spawner


def _spawn_sleep() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "30"], stdin=subprocess.DEVNULL, start_new_session=True)


async def test_a_cancelled_caller_still_gets_the_child_it_started() -> None:
    with trio.fail_after(10), trio.CancelScope() as scope:
        scope.cancel()
        child = await run_in_spawner(_spawn_sleep)
        try:
            assert child.poll() is None  # running, and ours to kill
        finally:
            child.kill()
            child.wait()


async def test_an_error_in_the_spawner_thread_is_raised_to_the_caller() -> None:
    def missing() -> subprocess.Popen[bytes]:
        return subprocess.Popen(["/nonexistent/program"])

    with trio.fail_after(10), pytest.raises(FileNotFoundError):
        await run_in_spawner(missing)


async def test_forks_run_on_long_lived_spawner_threads_not_trio_workers() -> None:
    with trio.fail_after(10):
        first = await run_in_spawner(threading.current_thread)
        await run_in_spawner(os.getpid)  # the thread survives its job and a later one
    assert first.name == "csp-spawner"
    assert first.is_alive()
    assert first is not threading.current_thread()
