"""The pool of worker processes (csp_web/infra/workers.py): a task's answer and errors come
back as in process; a worker that dies, hangs or lies fails only its own task, and the pool
replaces it; workers inherit no socket or secret of the daemon and outlive no pool."""

from __future__ import annotations

import functools
import os
import pickle
import signal
import tempfile
from pathlib import Path

import pytest
import trio

from csp_web.core.api.errors import OpError
from csp_web.infra.workers import WorkerPool, open_worker_pool
from protocol import ErrorCode
from tests import workers_support

WAIT_S = 30.0  # a worker's first task imports its module: seconds on a loaded machine


def children() -> set[int]:
    """The live (not zombie) child processes of this test process, from /proc."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == os.getpid() and state != "Z":
            found.add(int(entry))
    return found


async def test_a_task_answers_in_a_worker_process_of_its_own() -> None:
    async with open_worker_pool(1) as pool:
        with trio.fail_after(WAIT_S):
            pid = await pool.run(workers_support.own_pid, deadline=trio.current_time() + WAIT_S)
    assert pid != os.getpid()


async def test_a_pool_of_size_zero_runs_the_task_in_the_daemon() -> None:
    async with open_worker_pool(0) as pool:
        with trio.fail_after(WAIT_S):
            pid = await pool.run(workers_support.own_pid, deadline=trio.current_time() + WAIT_S)
        assert pool.pids == ()
    assert pid == os.getpid()


async def test_a_task_error_of_an_allowed_class_is_raised_as_itself() -> None:
    async with open_worker_pool(1) as pool:
        with trio.fail_after(WAIT_S), pytest.raises(ValueError, match="invalid literal"):
            await pool.run(
                functools.partial(int, "x"),
                deadline=trio.current_time() + WAIT_S,
                answers=(ValueError,),
            )


async def test_a_task_error_of_another_class_is_a_runtime_error_with_its_traceback() -> None:
    async with open_worker_pool(1) as pool:
        with trio.fail_after(WAIT_S), pytest.raises(RuntimeError, match="ValueError"):
            await pool.run(functools.partial(int, "x"), deadline=trio.current_time() + WAIT_S)


async def test_a_worker_killed_mid_task_fails_that_task_and_the_next_task_gets_a_fresh_worker() -> (
    None
):
    path = tempfile.mktemp(prefix="pool", suffix=".sock", dir="/tmp")  # a short socket path
    listener = trio.socket.socket(trio.socket.AF_UNIX)
    await listener.bind(path)
    listener.listen()
    task = functools.partial(workers_support.announce_then_sleep, path)

    async def kill_when_announced() -> None:
        conn, _ = await listener.accept()
        with conn:
            os.kill(int(await conn.recv(64)), signal.SIGKILL)

    async with open_worker_pool(1) as pool:
        with trio.fail_after(WAIT_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(kill_when_announced)
                with pytest.raises(OpError) as failed:
                    await pool.run(task, deadline=trio.current_time() + WAIT_S)
        assert (failed.value.code, failed.value.detail) == (
            ErrorCode.WORKER_FAILED,
            "killed:SIGKILL",
        )
        with trio.fail_after(WAIT_S):
            pid = await pool.run(workers_support.own_pid, deadline=trio.current_time() + WAIT_S)
        assert pool.pids == (pid,)
    listener.close()
    os.unlink(path)


async def test_a_worker_killed_while_idle_fails_no_task() -> None:
    async with open_worker_pool(1) as pool:
        with trio.fail_after(WAIT_S):
            first = await pool.run(workers_support.own_pid, deadline=trio.current_time() + WAIT_S)
            gone = os.pidfd_open(first)  # readable once the worker has exited
            os.kill(first, signal.SIGKILL)
            await trio.lowlevel.wait_readable(gone)
            os.close(gone)
            second = await pool.run(workers_support.own_pid, deadline=trio.current_time() + WAIT_S)
    assert second != first


@pytest.mark.slow
async def test_a_task_running_past_its_deadline_is_cut_and_its_worker_replaced() -> None:
    async with open_worker_pool(1) as pool:
        with trio.fail_after(WAIT_S):
            first = await pool.run(workers_support.own_pid, deadline=trio.current_time() + WAIT_S)
            with pytest.raises(OpError) as failed:
                await pool.run(workers_support.spin, deadline=trio.current_time() + 0.5)
            assert (failed.value.code, failed.value.detail) == (ErrorCode.WORKER_FAILED, "timeout")
            assert first not in children()  # killed and reaped, not left spinning
            second = await pool.run(workers_support.own_pid, deadline=trio.current_time() + WAIT_S)
    assert second != first


async def test_a_cancelled_task_kills_its_worker() -> None:
    async with open_worker_pool(1) as pool:
        with trio.fail_after(WAIT_S):
            first = await pool.run(workers_support.own_pid, deadline=trio.current_time() + WAIT_S)
            with trio.move_on_after(0.2):
                await pool.run(workers_support.spin, deadline=trio.current_time() + WAIT_S)
        assert first not in children()
        assert pool.pids == ()


async def test_an_answer_at_the_cap_is_read_and_one_byte_past_it_fails() -> None:
    value = b"x" * 1000
    inner = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    size = len(pickle.dumps(("ok", inner), protocol=pickle.HIGHEST_PROTOCOL))
    task = functools.partial(bytes, value)
    async with open_worker_pool(1, answer_max_bytes=size) as pool:
        with trio.fail_after(WAIT_S):
            assert await pool.run(task, deadline=trio.current_time() + WAIT_S) == value
    async with open_worker_pool(1, answer_max_bytes=size - 1) as pool:
        with trio.fail_after(WAIT_S), pytest.raises(OpError) as failed:
            await pool.run(task, deadline=trio.current_time() + WAIT_S)
    assert (failed.value.code, failed.value.detail) == (ErrorCode.WORKER_FAILED, "answer")


async def test_an_answer_that_would_run_code_in_the_daemon_is_refused(tmp_path: Path) -> None:
    mark = tmp_path / "ran"
    async with open_worker_pool(1) as pool:
        task = functools.partial(workers_support.forged_answer, str(mark))
        with trio.fail_after(WAIT_S), pytest.raises(OpError) as failed:
            await pool.run(task, deadline=trio.current_time() + WAIT_S)
    assert (failed.value.code, failed.value.detail) == (ErrorCode.WORKER_FAILED, "answer")
    assert not mark.exists()


async def test_a_worker_inherits_no_secret_and_no_socket_of_the_daemon() -> None:
    os.environ["CSP_TEST_SECRET"] = "hunter2"
    try:
        async with open_worker_pool(1) as pool:
            with trio.fail_after(WAIT_S):
                env = await pool.run(
                    workers_support.environment, deadline=trio.current_time() + WAIT_S
                )
                fds = await pool.run(
                    workers_support.open_descriptors, deadline=trio.current_time() + WAIT_S
                )
    finally:
        del os.environ["CSP_TEST_SECRET"]
    assert set(env) <= {"PATH", "LC_ALL", "LC_CTYPE"}
    assert not [fd for fd in fds if fd.startswith("socket:")]


async def test_closing_the_pool_leaves_no_worker_process() -> None:
    before = children()
    pool = WorkerPool(2)
    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            for _ in range(2):
                nursery.start_soon(
                    functools.partial(
                        pool.run, workers_support.own_pid, deadline=trio.current_time() + WAIT_S
                    )
                )
        assert len(pool.pids) == 2
        await pool.aclose()
    assert children() == before
