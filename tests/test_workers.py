"""The pool of worker processes (csp_web/infra/workers.py): a task's answer and errors come
back as in process; a worker that dies, hangs or lies fails only its own task, and the pool
replaces it; workers inherit no socket or secret of the daemon and outlive no pool."""

from __future__ import annotations

import functools
import operator
import os
import resource
import signal
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trio

from csp_web.core.api.errors import OpError
from csp_web.infra import answers
from csp_web.infra.workers import (
    ANSWER_FLOOR_BYTES,
    ANSWER_PER_TASK_BYTE,
    PIPE_BYTES,
    WorkerPool,
    open_worker_pool,
)
from protocol import ErrorCode
from specialists.web.pages.loading import Page
from tests import workers_support

T = TypeVar("T")
SUPPORT = workers_support.__name__  # what the tests' workers warm up on
WAIT_S = 30.0  # a worker's first task imports its module: seconds on a loaded machine


def children() -> set[int]:
    """The live (not zombie) processes this test process started, from /proc: its children,
    and theirs (a worker forked by the pool's template is the template's child)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if state != "Z":
            parents[int(entry)] = int(ppid)
    mine = {pid for pid, ppid in parents.items() if ppid == os.getpid()}
    return mine | {pid for pid, ppid in parents.items() if ppid in mine}


async def warm(size: int, **options: Any) -> AsyncIterator[WorkerPool]:
    """A pool of ``size`` workers, every one warm."""
    async with open_worker_pool(size, warm=SUPPORT, **options) as pool:
        with trio.fail_after(WAIT_S):
            await pool.wait_warm()
        yield pool


warm_pool = asynccontextmanager(warm)


async def run(
    pool: WorkerPool,
    task: Callable[[], T],
    shape: Any = int,
    *,
    raises: tuple[type[BaseException], ...] = (),
) -> T:
    with trio.fail_after(WAIT_S):
        deadline = trio.current_time() + WAIT_S
        return await pool.run(task, deadline=deadline, shape=shape, raises=raises)


async def test_a_task_arriving_before_any_worker_is_warm_waits_for_one_not_the_daemon() -> None:
    async with open_worker_pool(1, warm=SUPPORT) as pool:
        assert await run(pool, workers_support.own_pid) == pool.pids[0] != os.getpid()


async def test_a_task_arriving_while_a_dead_worker_is_replaced_runs_in_the_fresh_worker() -> None:
    async with warm_pool(1) as pool:
        with pytest.raises(OpError):
            await run(pool, workers_support.hoard)
        assert await run(pool, workers_support.own_pid) == pool.pids[0] != os.getpid()


async def test_a_task_waiting_for_a_busy_worker_fails_timeout_at_its_deadline() -> None:
    async with warm_pool(1) as pool, trio.open_nursery() as nursery:
        nursery.start_soon(run, pool, workers_support.spin)
        await trio.sleep(0.1)
        with trio.fail_after(WAIT_S), pytest.raises(OpError) as failed:
            await pool.run(workers_support.own_pid, deadline=trio.current_time() + 0.2)
        assert (failed.value.code, failed.value.detail) == (ErrorCode.WORKER_FAILED, "timeout")
        nursery.cancel_scope.cancel()


async def test_a_pool_of_size_zero_runs_every_task_in_the_daemon() -> None:
    async with open_worker_pool(0) as pool:
        for _ in range(3):
            assert await run(pool, workers_support.own_pid) == os.getpid()
        assert pool.pids == ()


async def test_a_task_error_of_an_allowed_class_is_raised_as_itself() -> None:
    async with warm_pool(1) as pool:
        with pytest.raises(ValueError, match="invalid literal"):
            await run(pool, functools.partial(int, "x"), raises=(ValueError,))


async def test_a_task_error_of_another_class_is_a_runtime_error_with_its_traceback() -> None:
    async with warm_pool(1) as pool:
        with pytest.raises(RuntimeError, match="ValueError"):
            await run(pool, functools.partial(int, "x"))


async def test_a_worker_killed_mid_task_fails_that_task_and_a_fresh_worker_takes_its_place() -> (
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

    async with warm_pool(1) as pool:
        [killed] = pool.pids
        with trio.fail_after(WAIT_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(kill_when_announced)
                with pytest.raises(OpError) as failed:
                    await run(pool, task)
            await pool.wait_warm()  # its place warms up without a task asking
        assert (failed.value.code, failed.value.detail) == (
            ErrorCode.WORKER_FAILED,
            "killed:SIGKILL",
        )
        assert await run(pool, workers_support.own_pid) == pool.pids[0] != killed
    listener.close()
    os.unlink(path)


async def exited(pid: int) -> None:
    """Return once the process ``pid`` has exited (its pidfd turns readable, or it is reaped
    already: a forked worker's template reaps it at once)."""
    try:
        gone = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        await trio.lowlevel.wait_readable(gone)
    finally:
        os.close(gone)


async def test_a_worker_killed_while_idle_fails_no_task() -> None:
    async with warm_pool(1) as pool:
        [killed] = pool.pids
        os.kill(killed, signal.SIGKILL)
        with trio.fail_after(WAIT_S):
            await exited(killed)
        assert await run(pool, workers_support.own_pid) in pool.pids
        assert killed not in pool.pids


@pytest.mark.slow
async def test_a_task_running_past_its_deadline_is_cut_and_its_worker_replaced() -> None:
    async with warm_pool(1) as pool:
        [cut] = pool.pids
        with trio.fail_after(WAIT_S), pytest.raises(OpError) as failed:
            await pool.run(workers_support.spin, deadline=trio.current_time() + 0.5)
        assert (failed.value.code, failed.value.detail) == (ErrorCode.WORKER_FAILED, "timeout")
        assert cut not in children()  # killed and reaped, not left spinning
        with trio.fail_after(WAIT_S):
            await pool.wait_warm()
        assert pool.pids != (cut,)


async def test_a_cancelled_task_kills_its_worker() -> None:
    async with warm_pool(1) as pool:
        [cancelled] = pool.pids
        with trio.move_on_after(0.2):
            await pool.run(workers_support.spin, deadline=trio.current_time() + WAIT_S)
        assert cancelled not in children()


async def test_an_answer_at_the_cap_is_read_and_one_byte_past_it_fails() -> None:
    value = "x" * 1000
    size = len(answers.encode_value(value))
    task = functools.partial(str, value)
    async with warm_pool(1, answer_max_bytes=size) as pool:
        assert await run(pool, task, str) == value
    async with warm_pool(1, answer_max_bytes=size - 1) as pool:
        with pytest.raises(OpError) as failed:
            await run(pool, task, str)
    assert (failed.value.code, failed.value.detail) == (ErrorCode.WORKER_FAILED, "answer")


async def test_an_answer_far_larger_than_its_task_fails_answer_and_its_worker_is_replaced() -> None:
    size = ANSWER_FLOOR_BYTES + 1000 * ANSWER_PER_TASK_BYTE  # past the cap of a task this small
    async with warm_pool(1) as pool:
        [bloated] = pool.pids
        with pytest.raises(OpError) as failed:
            await run(pool, functools.partial(operator.mul, "x", size), str)
        assert (failed.value.code, failed.value.detail) == (ErrorCode.WORKER_FAILED, "answer")
        assert await run(pool, workers_support.own_pid) not in (bloated, os.getpid())


async def test_an_answer_not_of_the_tasks_shape_fails_answer_and_its_worker_is_replaced() -> None:
    async with warm_pool(1) as pool:
        [bent] = pool.pids
        with pytest.raises(OpError) as failed:
            await run(pool, workers_support.bent_page, Page)
        assert (failed.value.code, failed.value.detail) == (ErrorCode.WORKER_FAILED, "answer")
        assert await run(pool, workers_support.own_pid) not in (bent, os.getpid())


async def test_an_answer_that_would_run_code_in_the_daemon_never_leaves_its_worker(
    tmp_path: Path,
) -> None:
    mark = tmp_path / "ran"
    async with warm_pool(1) as pool:
        with pytest.raises(RuntimeError, match="TypeError"):
            await run(pool, functools.partial(workers_support.forged_answer, str(mark)))
    assert not mark.exists()


async def test_a_worker_inherits_no_secret_and_no_socket_of_the_daemon() -> None:
    os.environ["CSP_TEST_SECRET"] = "hunter2"
    try:
        async with warm_pool(1) as pool:
            env = await run(pool, workers_support.environment, dict[str, str])
            fds = await run(pool, workers_support.open_descriptors, list[str])
    finally:
        del os.environ["CSP_TEST_SECRET"]
    assert set(env) <= {"PATH", "LC_ALL", "LC_CTYPE"}
    assert not [fd for fd in fds if fd.startswith("socket:")]


async def test_closing_the_pool_leaves_no_worker_process() -> None:
    before = children()
    async with warm_pool(2) as pool:
        assert len(set(pool.pids) & children()) == 2
    assert children() == before


async def test_a_task_past_the_workers_address_space_fails_memory_and_a_fresh_worker_follows() -> (
    None
):
    async with warm_pool(1) as pool:
        [hoarder] = pool.pids
        with pytest.raises(OpError) as failed:
            await run(pool, workers_support.hoard)
        assert (failed.value.code, failed.value.detail) == (ErrorCode.WORKER_FAILED, "memory")
        with trio.fail_after(WAIT_S):
            await pool.wait_warm()
        assert pool.pids != (hoarder,)


def fill_descriptor_holes() -> tuple[int, list[int]]:
    """(the highest descriptor number open, the descriptors opened to fill every free number
    below it). RLIMIT_NOFILE bounds descriptor numbers, not their count: a hole left by a
    descriptor closed earlier would let a pipe be made under a limit meant to forbid it."""
    open_now = {int(name) for name in os.listdir("/proc/self/fd")}
    highest = max(open_now)
    fillers: list[int] = []
    while True:
        fd = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
        if fd > highest:
            os.close(fd)
            return highest, fillers
        fillers.append(fd)


async def test_a_worker_that_cannot_start_fails_its_tasks_start_and_the_pool_serves_on() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    highest, fillers = fill_descriptor_holes()
    resource.setrlimit(resource.RLIMIT_NOFILE, (highest + 2, hard))  # one more fd: no pipe
    try:
        async with open_worker_pool(1, warm=SUPPORT) as pool:
            with trio.fail_after(WAIT_S), pytest.raises(OpError) as failed:
                await pool.run(workers_support.own_pid, deadline=trio.current_time() + 0.5)
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            assert (failed.value.code, failed.value.detail) == (ErrorCode.WORKER_FAILED, "start")
            assert await run(pool, workers_support.own_pid) == pool.pids[0] != os.getpid()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        for fd in fillers:
            os.close(fd)


async def test_a_worker_cannot_read_the_daemons_environment_reach_the_network_or_write_files(
    tmp_path: Path,
) -> None:
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    environ = functools.partial(workers_support.error_of, "read", f"/proc/{os.getpid()}/environ")
    connect = functools.partial(workers_support.error_of, "connect", f"127.0.0.1:{port}")
    write = functools.partial(workers_support.error_of, "write", str(tmp_path / "planted"))
    async with warm_pool(1) as pool:
        errors = [await run(pool, task, str) for task in (environ, connect, write)]
    listener.close()
    assert errors[0] == "PermissionError"
    assert errors[1] in ("OSError", "ConnectionRefusedError")  # no route, or a loopback down
    assert errors[2] == "OSError"  # EFBIG: the worker may write no byte
    assert not (tmp_path / "planted").exists() or not (tmp_path / "planted").stat().st_size


async def test_a_worker_is_replaced_after_its_share_of_tasks() -> None:
    async with warm_pool(1, recycle_tasks=2) as pool:
        first = [await run(pool, workers_support.own_pid) for _ in range(2)]
        third = await run(pool, workers_support.own_pid)
    assert first[0] == first[1] != third


async def test_a_workers_task_runs_under_a_cpu_limit() -> None:
    async with warm_pool(1) as pool:
        limit = functools.partial(resource.getrlimit, resource.RLIMIT_CPU)
        soft, _ = await run(pool, limit, tuple[int, int])
    assert soft != resource.RLIM_INFINITY


async def test_a_workers_pipes_each_hold_a_large_page_in_one_write() -> None:
    async with warm_pool(1) as pool:
        sizes = await run(pool, workers_support.pipe_sizes, list[int])
    assert sizes == [PIPE_BYTES, PIPE_BYTES]
