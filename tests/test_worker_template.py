"""The pool's template process (csp_web/infra/worker_template.py, pool_template.py): workers
are forked from it yet share nothing a fork could leak, its failures cost no task, and no
process the pool made outlives the pool or the daemon."""

from __future__ import annotations

import collections
import contextlib
import errno
import functools
import gc
import os
import resource
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from csp_web.core.api.errors import OpError
from csp_web.infra import worker_template
from csp_web.infra.workers import WORKER_ENV, WorkerPool, open_worker_pool
from protocol import ErrorCode
from tests import (
    workers_support,
    workers_support_forkdies,
    workers_support_impostor,
    workers_support_liar,
    workers_support_nofork,
    workers_support_quick,
    workers_support_threaded,
)
from tests.test_workers import WAIT_S, fill_descriptor_holes, run, warm_pool

SUPPORT = workers_support.__name__


def reaped(pid: int) -> bool:
    """True when ``pid``, once this process's child, is reaped (no zombie left)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def stat(pid: int) -> list[str]:
    """The fields of /proc/<pid>/stat past the command (state, ppid, ...); [] when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return []


def running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    return stat(pid)[:1] not in ([], ["Z"])


async def kill_template(pool: WorkerPool) -> int:
    """SIGKILL ``pool``'s template and return its pid once it no longer runs."""
    template = pool.template_pid
    assert template is not None
    os.kill(template, signal.SIGKILL)
    with trio.fail_after(WAIT_S):
        while running(template):
            await trio.sleep(0.01)
    return template


@asynccontextmanager
async def announced(path: str) -> AsyncIterator[trio.socket.SocketType]:
    """A Unix socket listening at ``path`` (a ``short_socket_path``) for
    ``workers_support.announce_then_wait``."""
    listener = trio.socket.socket(trio.socket.AF_UNIX)
    await listener.bind(path)
    listener.listen()
    try:
        yield listener
    finally:
        listener.close()
        os.unlink(path)
        os.rmdir(os.path.dirname(path))  # short_socket_path's own directory


async def told(listener: trio.socket.SocketType, pool: WorkerPool) -> trio.socket.SocketType:
    """The next connection of ``workers_support.announce_then_wait``, once it has told its
    pid (a pool's worker): a byte sent earlier could meet the worker still sending (EPIPE)."""
    connection, _ = await listener.accept()
    assert int(await connection.recv(16)) in pool.pids
    return connection


def zombies(*parents: int) -> list[int]:
    """The children of this process and of ``parents`` (templates: a worker is their
    child) that ended and nobody reaped."""
    watched = {str(pid) for pid in (os.getpid(), *parents)}
    found = []
    for entry in os.listdir("/proc"):
        fields = stat(int(entry)) if entry.isdigit() else []
        if fields[:1] == ["Z"] and fields[1] in watched:
            found.append(int(entry))
    return found


def short_socket_path() -> str:
    """A path for a Unix socket, short enough for sun_path, in a fresh directory."""
    return os.path.join(tempfile.mkdtemp(prefix="tmpl", dir="/tmp"), "s")


async def test_each_worker_is_forked_from_the_template_as_its_child() -> None:
    async with warm_pool(2) as pool:
        scripts = {await run(pool, workers_support.main_script, str) for _ in range(4)}
        parents = {await run(pool, workers_support.parent_pid) for _ in range(4)}
        assert parents == {pool.template_pid}
    assert scripts == {"pool_template.py"}


async def test_forked_workers_alive_at_once_share_no_network_namespace_and_no_random_state() -> (
    None
):
    path = short_socket_path()
    async with announced(path) as listener, warm_pool(4) as pool:
        seen: list[tuple[str, int]] = []

        async def identify() -> None:
            task = functools.partial(workers_support.identity_once_told, path)
            seen.append(await run(pool, task, tuple[str, int]))

        async with trio.open_nursery() as nursery:
            for _ in range(4):
                nursery.start_soon(identify)
            with trio.fail_after(WAIT_S):
                connections = [await told(listener, pool) for _ in range(4)]
            for connection in connections:  # four workers busy at once: four live namespaces
                await connection.send(b"g")
                connection.close()
    namespaces = {namespace for namespace, _ in seen}
    assert len(namespaces) == 4
    assert os.readlink("/proc/self/ns/net") not in namespaces
    assert len({bits for _, bits in seen}) == 4


async def test_a_forked_worker_is_non_dumpable_and_can_ptrace_neither_template_nor_daemon() -> None:
    async with warm_pool(1) as pool:
        # Its user namespace already denies it; the template is non-dumpable besides (for a
        # host without user namespaces), which its fork inherits.
        assert await run(pool, workers_support.dumpable) == 0
        assert pool.template_pid is not None
        targets = (pool.template_pid, os.getpid())
        failures = [
            await run(pool, functools.partial(workers_support.ptrace_error, pid)) for pid in targets
        ]
        reads = [
            await run(
                pool,
                functools.partial(workers_support.error_of, "read", f"/proc/{pid}/environ"),
                str,
            )
            for pid in targets
        ]
    assert failures == [errno.EPERM, errno.EPERM]
    assert reads == ["PermissionError", "PermissionError"]


async def test_a_forked_worker_holds_only_its_two_pipes_and_stderr() -> None:
    async with warm_pool(1) as pool:
        held = await run(pool, workers_support.open_descriptors, list[str])
    # stdin (tasks), stdout and stderr (both /dev/null), the answers' pipe: as a fresh worker
    assert sorted(target.split(":")[0] for target in held) == [
        "/dev/null",
        "/dev/null",
        "pipe",
        "pipe",
    ]


async def test_the_template_killed_while_a_worker_is_busy_loses_no_task_and_a_new_one_follows() -> (
    None
):
    path = short_socket_path()
    async with announced(path) as listener, warm_pool(1, recycle_tasks=1) as pool:
        killed = pool.template_pid
        assert killed is not None
        async with trio.open_nursery() as nursery:
            task = functools.partial(workers_support.announce_then_wait, path)
            nursery.start_soon(run, pool, task)
            with trio.fail_after(WAIT_S):
                connection = await told(listener, pool)
                os.kill(killed, signal.SIGKILL)
                while running(killed):
                    await trio.sleep(0.01)
                await connection.send(b"g")
        connection.close()
        # The busy worker answered; its replacement is forked from a new template.
        assert await run(pool, workers_support.main_script, str) == "pool_template.py"
        assert pool.template_pid not in (None, killed)
    assert reaped(killed)


async def test_a_hung_template_is_killed_and_the_start_that_met_it_is_a_fresh_interpreter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worker_template, "FORK_S", 0.5)
    async with warm_pool(1, recycle_tasks=1) as pool:
        hung = pool.template_pid
        assert hung is not None
        os.kill(hung, signal.SIGSTOP)
        scripts = [await run(pool, workers_support.main_script, str) for _ in range(3)]
        assert pool.template_pid not in (None, hung)
    # The first ran in the worker forked before; the second's start met the hung template.
    assert scripts == ["pool_template.py", "pool_worker.py", "pool_template.py"]
    assert reaped(hung)


async def test_a_template_refused_descriptors_is_a_failed_start_and_the_pool_forks_after() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    highest, fillers = fill_descriptor_holes()
    resource.setrlimit(resource.RLIMIT_NOFILE, (highest + 2, hard))  # no socket pair
    try:
        async with open_worker_pool(1, warm=SUPPORT) as pool:
            with trio.fail_after(WAIT_S), pytest.raises(OpError) as failed:
                await pool.run(workers_support.own_pid, deadline=trio.current_time() + 0.5)
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            assert (failed.value.code, failed.value.detail) == (ErrorCode.WORKER_FAILED, "start")
            assert await run(pool, workers_support.main_script, str) == "pool_template.py"
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        for fd in fillers:
            os.close(fd)


@pytest.mark.parametrize("error", [errno.EAGAIN, errno.ENOMEM, errno.EMFILE, errno.ENFILE])
def test_a_fork_the_host_refuses_for_now_is_a_failed_start(error: int) -> None:
    refused = worker_template.refusal(error)
    assert isinstance(refused, OSError)
    assert refused.errno == error


@pytest.mark.parametrize("error", [errno.EPERM, errno.ENOSYS, errno.EINVAL])
def test_a_fork_refused_for_good_is_a_lasting_failure(error: int) -> None:
    refused = worker_template.refusal(error)
    assert isinstance(refused, worker_template.Failed)
    assert refused.lasting


def count_template_starts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The pids of the templates started from now on (``Template.start`` runs as ever)."""
    started: list[int] = []
    start = worker_template.Template.start

    async def counted(module: str, **options: Any) -> worker_template.Template:
        template = await start(module, **options)
        started.append(template.process.pid)
        return template

    monkeypatch.setattr(worker_template.Template, "start", counted)
    return started


async def test_a_template_whose_forks_are_refused_for_good_is_the_only_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started = count_template_starts(monkeypatch)
    async with open_worker_pool(1, warm=workers_support_nofork.__name__, recycle_tasks=1) as pool:
        tries = worker_template.TEMPLATE_TRIES + 2
        scripts = [await run(pool, workers_support.main_script, str) for _ in range(tries)]
        assert pool.template_pid is None
    assert scripts == ["pool_worker.py"] * tries
    assert len(started) == 1


async def test_templates_dying_at_each_fork_stop_after_the_tries_and_leave_no_zombie(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started = count_template_starts(monkeypatch)
    warm = workers_support_forkdies.__name__
    async with open_worker_pool(1, warm=warm, recycle_tasks=1) as pool:
        tries = worker_template.TEMPLATE_TRIES + 2
        scripts = [await run(pool, workers_support.main_script, str) for _ in range(tries)]
        assert pool.template_pid is None
    assert scripts == ["pool_worker.py"] * tries
    assert len(started) == worker_template.TEMPLATE_TRIES  # the 3rd failure ends them, not the 2nd
    assert zombies() == []


@pytest.mark.parametrize(
    ("liar", "lie"),
    [
        (workers_support_liar.__name__, "no pidfd of"),  # a pidfd of another process
        (workers_support_impostor.__name__, "is not its child"),  # pid and pidfd of itself
    ],
)
async def test_a_template_answering_with_a_process_not_its_child_is_dropped(
    caplog: pytest.LogCaptureFixture, liar: str, lie: str
) -> None:
    async with open_worker_pool(1, warm=liar, recycle_tasks=1) as pool:
        scripts = [await run(pool, workers_support.main_script, str) for _ in range(2)]
    assert scripts == ["pool_worker.py"] * 2
    assert lie in caplog.text


@pytest.mark.parametrize("template", [True, False])
async def test_a_retired_worker_takes_the_processes_of_its_group_along(template: bool) -> None:
    async with open_worker_pool(1, warm=SUPPORT, recycle_tasks=1, template=template) as pool:
        sleeper = await run(pool, workers_support.start_sleeper)  # then its worker retires
        with trio.fail_after(WAIT_S):
            while running(sleeper):
                await trio.sleep(0.01)


async def test_a_template_whose_workers_end_at_once_is_kept_and_their_status_known(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started = count_template_starts(monkeypatch)
    starts = worker_template.WorkerStarts(
        workers_support_quick.__name__, env=WORKER_ENV, ready_s=WAIT_S, template=True
    )
    ended = []
    with trio.fail_after(WAIT_S):
        for _ in range(5):
            worker = await starts.open()
            ended.append((type(worker), await worker.wait()))
        await starts.aclose()
    assert ended == [(worker_template.Forked, 1)] * 5
    assert len(started) == 1


async def test_workers_whose_template_died_are_retired_before_another_task() -> None:
    async with warm_pool(2) as pool:
        orphans = set(pool.pids)
        await kill_template(pool)
        served = {await run(pool, workers_support.own_pid) for _ in range(4)}
        assert not served & orphans
        with trio.fail_after(WAIT_S):
            while any(running(pid) for pid in orphans):
                await trio.sleep(0.01)


async def test_a_busy_worker_ending_after_its_template_died_fails_its_task_exit_unknown() -> None:
    path = short_socket_path()
    failures: list[OpError] = []

    async def doomed(pool: WorkerPool) -> None:
        with pytest.raises(OpError) as failed:
            await run(pool, functools.partial(workers_support.announce_then_wait, path))
        failures.append(failed.value)

    async with announced(path) as listener, warm_pool(1) as pool:
        with trio.fail_after(WAIT_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(doomed, pool)
                connection, _ = await listener.accept()
                worker = int(await connection.recv(16))
                await kill_template(pool)
                os.kill(worker, signal.SIGKILL)
        connection.close()
    assert [(failed.code, failed.detail) for failed in failures] == [
        (ErrorCode.WORKER_FAILED, "exit:unknown")
    ]


async def failure(pool: WorkerPool, task: Callable[..., object], *args: object) -> str:
    """The detail of the WORKER_FAILED that ``task(*args)`` ends with on ``pool``."""
    with pytest.raises(OpError) as failed:
        await run(pool, functools.partial(task, *args))
    assert failed.value.code == ErrorCode.WORKER_FAILED
    return failed.value.detail


async def test_a_forked_worker_that_ends_on_its_own_takes_its_group_along() -> None:
    path = short_socket_path()
    async with announced(path) as listener, warm_pool(1) as pool:
        detail = await failure(pool, workers_support.exit_leaving_sleeper, path)
        with trio.fail_after(WAIT_S):
            connection, _ = await listener.accept()
            sleeper = int(await connection.recv(16))
            connection.close()
            while running(sleeper):  # its template kills the group before reaping it
                await trio.sleep(0.01)
    assert detail == "exit:7"


async def test_a_worker_whose_template_died_is_retired_with_its_group() -> None:
    async with warm_pool(1) as pool:
        sleeper = await run(pool, workers_support.start_sleeper)
        await kill_template(pool)
        with trio.fail_after(WAIT_S):
            await run(pool, workers_support.own_pid)  # meets the orphan first: retires it
            while running(sleeper):
                await trio.sleep(0.01)


async def test_a_stopped_template_leaves_a_dead_workers_status_unknown_and_holds_nothing(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker_template, "FORK_S", 0.5)  # the replacements' starts meet it
    gc.collect()  # earlier tests' garbage holds descriptors too
    held = len(os.listdir("/proc/self/fd"))
    with trio.fail_after(WAIT_S):
        async with warm_pool(2) as pool:
            template = pool.template_pid
            assert template is not None
            os.kill(template, signal.SIGSTOP)  # as a subverted worker of its uid may
            details = [await failure(pool, workers_support.exit_now, 7) for _ in range(2)]
    assert details == ["exit:unknown"] * 2  # never a guess at the status the template keeps
    gc.collect()  # the workers' task pipes, held by the failures' tracebacks till then
    assert len(os.listdir("/proc/self/fd")) == held  # pidfds and status pipes closed
    assert "not reaped" not in caplog.text
    assert reaped(template)


async def test_a_warm_module_that_starts_a_thread_leaves_fresh_interpreters_serving() -> None:
    async with open_worker_pool(1, warm=workers_support_threaded.__name__, recycle_tasks=1) as pool:
        scripts = [await run(pool, workers_support.main_script, str) for _ in range(5)]
        assert pool.template_pid is None
    assert scripts == ["pool_worker.py"] * 5


async def test_a_pool_without_template_starts_fresh_interpreters() -> None:
    async with open_worker_pool(1, warm=SUPPORT, template=False) as pool:
        assert await run(pool, workers_support.main_script, str) == "pool_worker.py"
        assert pool.template_pid is None


@pytest.mark.parametrize("forks", [2, 3])
async def test_a_template_forks_exactly_its_share_of_workers(
    monkeypatch: pytest.MonkeyPatch, forks: int
) -> None:
    monkeypatch.setattr(worker_template, "TEMPLATE_FORKS", forks)
    async with warm_pool(1, recycle_tasks=1) as pool:
        parents = [await run(pool, workers_support.parent_pid) for _ in range(forks * 3)]
    assert sorted(collections.Counter(parents).values()) == [forks] * 3
    assert all(reaped(pid) for pid in parents)


async def test_a_template_is_replaced_after_its_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_template, "TEMPLATE_S", 0.0)
    async with warm_pool(1, recycle_tasks=1) as pool:
        parents = [await run(pool, workers_support.parent_pid) for _ in range(3)]
    assert len(set(parents)) == 3


async def test_renewing_the_template_under_concurrent_starts_loses_no_fork_and_no_child(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worker_template, "TEMPLATE_FORKS", 2)
    started = count_template_starts(monkeypatch)
    scripts: list[str] = []

    async def script(pool: WorkerPool) -> None:
        scripts.append(await run(pool, workers_support.main_script, str))

    async with warm_pool(4, recycle_tasks=1) as pool:
        for _ in range(6):  # four workers retire at once, four starts meet each renewal
            async with trio.open_nursery() as nursery:
                for _ in range(4):
                    nursery.start_soon(script, pool)
        left = zombies(*started)  # a template keeps no worker unreaped, nor the daemon one
    assert scripts == ["pool_template.py"] * 24
    assert left == []


async def every_pid(pool: WorkerPool, tasks: int) -> set[int]:
    """The pids of the workers that ran ``tasks`` tasks and of the templates seen meanwhile,
    the template killed halfway."""
    pids = set()
    for turn in range(tasks):
        pids.add(await run(pool, workers_support.own_pid))
        template = pool.template_pid
        if template is not None:
            pids.add(template)
            if turn == tasks // 2:
                os.kill(template, signal.SIGKILL)
    return pids


async def test_closing_the_pool_reaps_every_process_it_ever_made_the_templates_included() -> None:
    async with warm_pool(2, recycle_tasks=1) as pool:
        pids = await every_pid(pool, 8)
    assert len(pids) >= 8
    assert [pid for pid in pids if not reaped(pid)] == []


POOL_THEN_SLEEP = """
import os, sys, trio
from csp_web.infra.workers import open_worker_pool

async def main():
    async with open_worker_pool(2, warm="tests.workers_support") as pool:
        await pool.wait_warm()
        print(*pool.pids, pool.template_pid, flush=True)
        await trio.sleep_forever()

trio.run(main)
"""


@pytest.mark.slow
@pytest.mark.parametrize("ending", [signal.SIGKILL, signal.SIGINT])
async def test_a_daemon_that_ends_leaves_no_worker_and_no_template_running(
    ending: signal.Signals,
) -> None:
    daemon = await trio.lowlevel.open_process(
        [sys.executable, "-c", POOL_THEN_SLEEP], stdout=subprocess.PIPE
    )
    assert daemon.stdout is not None
    line = b""
    try:
        with trio.fail_after(WAIT_S):
            while not line.endswith(b"\n"):
                line += await daemon.stdout.receive_some()
    finally:
        daemon.send_signal(ending)  # SIGINT: trio raises KeyboardInterrupt, the pool closes
        with trio.fail_after(WAIT_S):
            await daemon.wait()
        await daemon.stdout.aclose()
    pids = [int(pid) for pid in line.split()]
    assert len(pids) == 3
    with trio.fail_after(WAIT_S):
        while any(running(pid) for pid in pids):
            await trio.sleep(0.05)


def pool_processes(daemon: int) -> set[int]:
    """The daemon's processes that run the pool's scripts: its template, and the template's
    children, the workers (which show the template's command line)."""
    found = set()
    for parent in (daemon, None):
        for entry in os.listdir("/proc"):
            ppid = stat(int(entry))[1:2] if entry.isdigit() else []
            if ppid == [str(daemon)] or (parent is None and ppid and int(ppid[0]) in found):
                with contextlib.suppress(OSError):
                    if b"pool_" in Path(f"/proc/{entry}/cmdline").read_bytes():
                        found.add(int(entry))
    return found


@pytest.mark.slow
async def test_the_daemon_forks_its_web_workers_from_a_template_and_leaves_none_on_exit(
    sock_dir: str,
) -> None:
    config = Path(sock_dir) / "csp.yaml"
    config.write_text(f"daemon: {{state_dir: {sock_dir}/state}}\nweb: {{workers: 2}}\n")
    command = ["serve", "--config", str(config), "--no-stdin", "--socket", f"{sock_dir}/s.sock"]
    daemon = await trio.lowlevel.open_process(
        [sys.executable, "-m", "csp_web", *command], stderr=subprocess.DEVNULL
    )
    try:
        with trio.fail_after(WAIT_S * 2):
            while len(made := pool_processes(daemon.pid)) < 3:  # the template and 2 workers
                await trio.sleep(0.05)
            scripts = {Path(f"/proc/{pid}/cmdline").read_text().split("\0")[4] for pid in made}
            daemon.send_signal(signal.SIGINT)
            assert await daemon.wait() == 0
    finally:
        daemon.kill()
    assert [Path(script).name for script in scripts] == ["pool_template.py"]
    assert [pid for pid in made if running(pid)] == []
