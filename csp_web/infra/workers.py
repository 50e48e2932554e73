"""A pool of worker processes for the daemon's CPU-heavy work (issue 26: every core works).

    async with open_worker_pool(size, warm="specialists.web.pages.loading") as pool:
        page = await pool.run(functools.partial(build_page, result), deadline=d, shape=Page)

One event loop runs on one core; extraction, summaries and large JSON parses are pure
functions of bytes and strings, so they run in ``size`` worker processes
(``pool_worker.py``) and the loop only moves their inputs and answers. ``size`` 0 runs them
in a trio worker thread of the daemon, as before the pool.

A worker is never a fork of the daemon: it inherits none of the daemon's sockets,
environment (its credentials: ``WORKER_ENV`` holds only PATH and the locale) or trio state,
and before its first task it confines itself (no network, no file writes, bounded memory and
CPU: pool_worker.py). The daemon turns non-dumpable, so a worker of the same uid cannot read
its /proc/<pid>/environ either. Each worker is forked by the pool's template
(worker_template.py), an interpreter started like a fresh worker that imported the ``warm``
module once; a fresh interpreter (``python pool_worker.py``) starts one only while no
template serves (``WorkerStarts``), or when the pool is opened with ``template=False``. The
``size`` workers start in the background when the pool opens (the template's start is about
1 s of CPU, each fork a few ms against about 1 s for a fresh interpreter,
bench/worker_starts.py); a task waits, until its deadline, for an idle worker. A hostile
page's work never runs in the daemon: only a pool of size 0 runs tasks in its threads. A
task is the pickle of a callable and its arguments (the daemon trusts its workers' code); an
answer is JSON, rebuilt as the ``shape`` the caller names with every field's type checked
(answers.py), and at most a few times the task's size: a worker that a hostile page
subverted (a native bug in lxml) can neither run code in the daemon through its answer nor
make it expand (pickle's shared references could).
A worker is replaced after ``recycle_tasks`` tasks or ``RECYCLE_S`` seconds.

A worker that dies mid-task (SIGKILL, the kernel's OOM killer, a segfault), or answers past
``answer_max_bytes`` or out of shape, fails that one task with ``worker_failed:<why>``; a
task still running at its ``deadline`` fails with ``worker_failed:timeout``, and a cancelled
task's worker is killed at once: in each case that worker is killed and a fresh one warms up
in its place. The daemon never waits for a worker that does not answer. A worker that cannot
start (EMFILE, EAGAIN) is tried again with a back-off; meanwhile tasks fail
``worker_failed:start`` at their deadline and the daemon serves on.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import logging
import os
import pickle
import signal
import struct
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import trio

from csp_web.core.api.errors import OpError
from csp_web.infra import answers, pool_worker, worker_template
from protocol import ErrorCode

log = logging.getLogger(__name__)

T = TypeVar("T")
Worker = trio.Process | worker_template.Forked

WORKER_ENV = {"PATH": os.defpath, "LC_ALL": "C.UTF-8"}
MAX_WORKERS = 64  # web.workers' bound: past the cores any host we serve has, workers only queue
# An answer's cap: a page's views (Markdown, outline, text, compact JSON) of a body run to a
# few times its size, and JSON's escapes (\u0001 is 6 bytes) to a few times more: 16 times
# the task's pickle (which holds the body), plus 1 MiB for a small task's answer. Past that
# the worker is broken or subverted. ``answer_max_bytes`` bounds every answer whatever its task.
ANSWER_PER_TASK_BYTE = 16
ANSWER_FLOOR_BYTES = 1 << 20
ANSWER_MAX_BYTES = 256 << 20
WARM_UP_S = 60.0  # a start is about 1 s of CPU; a loaded host stretches it, a hung one not
# Starts under way at once: each is about 1 s of CPU, so more than the host's cores only
# slows the daemon's own loop while the pool fills (bench/workers.py).
START_AT_ONCE = max(1, len(os.sched_getaffinity(0)))
# A failed start (EMFILE, EAGAIN) is tried again after 0.1 s, doubling up to 5 s: a host out
# of descriptors or processes gets room back without the daemon spinning on it.
START_BACKOFF_S = 0.1
START_BACKOFF_MAX_S = 5.0
# A worker is replaced after this many tasks or seconds, so one a hostile page subverted (a
# native bug in a parser) serves other pages only that long (docs/scaling.md, "Every core").
RECYCLE_TASKS = 200
RECYCLE_S = 600.0
REAP_S = 5.0  # a SIGKILLed worker is reaped in ms; one in uninterruptible sleep is left
PR_SET_DUMPABLE = 4  # <linux/prctl.h>
_LENGTH = struct.Struct("!Q")  # every frame each way: its length, then that many bytes
# Each pipe to and from a worker holds this much (F_SETPIPE_SZ; Linux's fs.pipe-max-size by
# default, so an unprivileged daemon may ask it): a task's pickle holds a page's body (a median
# dev page is 122 KB), which the default 64 KiB took in pieces, the event loop waking for
# each: the loop's CPU per build_page task 0.80-1.00x (one round of 9: 1.27x), median 0.89x,
# about 0.12 ms a page (``python bench/pool_exchange.py``, load 3.8-4.1; issue 26).
PIPE_BYTES = 1 << 20


def cores() -> int:
    """The cores this process may run on (its affinity mask, not the host's count)."""
    return len(os.sched_getaffinity(0))


class WorkerPool:
    """``size`` worker processes, or the daemon's own threads when ``size`` is 0.

    Made by ``open_worker_pool``, which owns the processes (it keeps ``size`` of them started
    in its nursery and kills them on exit).
    """

    def __init__(
        self,
        size: int,
        nursery: trio.Nursery | None = None,
        *,
        warm: str = "builtins",
        answer_max_bytes: int = ANSWER_MAX_BYTES,
        recycle_tasks: int = RECYCLE_TASKS,
        template: bool = True,
    ) -> None:
        """Workers start in ``nursery``, which only a pool of size 0 may go without; each
        imports ``warm`` before it takes a task, forked from a template warmed on it unless
        ``template`` is False."""
        if size and nursery is None:
            raise ValueError("a pool of workers needs a nursery to start them in")
        self.size = size
        self.answer_max_bytes = answer_max_bytes
        self.recycle_tasks = recycle_tasks
        self._nursery = nursery
        self._module = warm
        # Warm workers not running a task; a buffer of ``size``, so returning one never waits.
        self._give, self._take = trio.open_memory_channel[Worker](max(size, 1))
        self._live: set[Worker] = set()  # every worker: warming, idle or busy
        self._starting = 0  # workers asked for whose process is not made yet
        self._warm: set[Worker] = set()  # those that finished warming: idle or busy
        self._served: dict[Worker, int] = {}  # tasks each warm worker has answered
        self._born: dict[Worker, float] = {}  # when each warm worker finished warming
        self._failures = 0  # starts failed in a row (OSError, or no warm-up): the back-off
        self._changed = trio.Event()  # set (and replaced) when a worker warms, fails or ends
        self._closed = False
        self._starts = worker_template.WorkerStarts(
            warm, env=WORKER_ENV, ready_s=WARM_UP_S, template=template
        )

    @property
    def pids(self) -> tuple[int, ...]:
        """The worker processes alive now (bench/workers.py sums their CPU)."""
        return tuple(process.pid for process in self._live)

    @property
    def template_pid(self) -> int | None:
        """The template process's, while one serves."""
        return self._starts.template_pid

    async def run(
        self,
        task: Callable[[], T],
        *,
        deadline: float,
        shape: Any = None,
        raises: tuple[type[BaseException], ...] = (),
    ) -> T:
        """``task()``, run in a worker, waiting (until ``deadline``) for one to be idle; in a
        thread of the daemon (abandoned on cancel) only for a pool of size 0. ``task`` and
        what it captures must pickle; its answer is rebuilt as ``shape`` (the type ``task``
        returns: ``Page``, ``tuple[str, ...]``); an exception it raises of a class in
        ``raises`` is raised here, one of another class as RuntimeError with the worker's
        traceback.

        Raises OpError(WORKER_FAILED): ``timeout`` when ``deadline`` (trio time) passes
        first, ``start`` when it passes while no worker could start, ``killed:<signal>`` /
        ``exit:<status>`` / ``memory`` when the worker died, ``answer`` when its answer is
        past its cap (``ANSWER_PER_TASK_BYTE``) or not of ``shape``."""
        if not self.size:
            with trio.move_on_at(deadline):
                return await trio.to_thread.run_sync(task, abandon_on_cancel=True)
            raise OpError(ErrorCode.WORKER_FAILED, "timeout")
        request = pickle.dumps(task, pickle.HIGHEST_PROTOCOL)
        with trio.move_on_at(deadline):
            worker = await self._idle_worker()
            return await self._exchange(worker, request, shape, raises)  # type: ignore[no-any-return]
        raise OpError(ErrorCode.WORKER_FAILED, "start" if self._failures else "timeout")

    async def wait_warm(self) -> None:
        """Return once all ``size`` workers are warm: for a caller that measures or tests the
        warm pool (bench/workers.py). Raises OpError(WORKER_FAILED, "start") when a start
        fails meanwhile (the pool keeps trying, backing off)."""
        while len(self._warm) < self.size:
            changed = self._changed
            await changed.wait()
            if self._failures:
                raise OpError(ErrorCode.WORKER_FAILED, "start")

    async def serve_workers(self) -> None:
        """Keep ``size`` workers started until the pool closes: at once when it opens (in the
        background: the daemon serves meanwhile) and after any worker ends. A failed start
        (EMFILE, EAGAIN, a worker that does not warm) is logged once per run of failures and
        tried again after a back-off doubling up to ``START_BACKOFF_MAX_S``."""
        assert self._nursery is not None  # __init__: a pool with workers has one
        while not self._closed:
            for _ in range(min(self._room(), START_AT_ONCE - self._starting)):
                self._starting += 1
                self._nursery.start_soon(self._warm_up)
            changed = self._changed
            await changed.wait()
            if self._failures:
                await trio.sleep(
                    min(START_BACKOFF_S * 2 ** (self._failures - 1), START_BACKOFF_MAX_S)
                )

    async def _idle_worker(self) -> Worker:
        """An idle worker, waiting for one. A worker found dead (killed while idle) is reaped
        and fails no task."""
        while True:
            worker = await self._take.receive()
            if worker.poll() is None:
                return worker
            await self._retire(worker)

    async def _exchange(
        self,
        worker: Worker,
        request: bytes,
        shape: Any,
        raises: tuple[type[BaseException], ...],
    ) -> Any:
        """``worker``'s answer to ``request``, rebuilt as ``shape``; the worker goes back to
        the idle ones only when it answered whole and well formed and has not served its
        time (``recycle_tasks`` tasks or ``RECYCLE_S`` seconds), else it is killed and a
        fresh one starts."""
        healthy = False
        cap = min(self.answer_max_bytes, ANSWER_FLOOR_BYTES + ANSWER_PER_TASK_BYTE * len(request))
        try:
            answer = await _ask(worker, request, cap)
            healthy = True  # the task's own error, raised from its answer, leaves it sound
            return answers.decode(answer, shape, raises)
        except answers.Malformed:
            healthy = False
            raise OpError(ErrorCode.WORKER_FAILED, "answer") from None
        except answers.TaskRaised as exc:
            # A bug in the task: its traceback repr'd (a subverted worker forges no log line).
            raise RuntimeError(f"worker task raised: {exc.text!r}") from None
        finally:
            if healthy and not self._closed and not self._served_its_time(worker):
                self._give.send_nowait(worker)
            else:
                await self._retire(worker)

    def _served_its_time(self, worker: Worker) -> bool:
        """Count one more task for ``worker``; True when it is due for replacement (a worker
        a hostile page subverted serves no longer than that)."""
        self._served[worker] = self._served.get(worker, 0) + 1
        age = trio.current_time() - self._born.get(worker, trio.current_time())
        return self._served[worker] >= self.recycle_tasks or age >= RECYCLE_S

    def _room(self) -> int:
        """How many more workers may start."""
        return self.size - len(self._live) - self._starting

    async def _warm_up(self) -> None:
        """Start a worker, have it import the pool's module, then add it to the idle ones
        (or, when it fails to or the pool closed meanwhile, kill it)."""
        try:
            process = await self._starts.open()
        except OSError as exc:
            self._started(False, exc)
            return
        finally:
            self._starting -= 1
        self._live.add(process)
        for pipe in (process.stdin, process.stdout):
            _widen(pipe)
        warm = pickle.dumps(functools.partial(pool_worker.warm, self._module))
        warmed = False
        try:
            with trio.fail_after(WARM_UP_S):
                answers.decode(await _ask(process, warm, ANSWER_FLOOR_BYTES), None)
            warmed = not self._closed
        except (OpError, answers.Malformed, answers.TaskRaised, trio.TooSlowError) as exc:
            self._started(False, exc)
        finally:
            if warmed:
                self._started(True, None)
                self._warm.add(process)
                self._born[process] = trio.current_time()
                self._give.send_nowait(process)
            else:
                await self._retire(process)

    def _started(self, ok: bool, error: BaseException | None) -> None:
        """Count a start that worked or failed, logging the first failure of a run and the
        recovery after one, and wake whoever waits on the pool's workers."""
        if ok and self._failures:
            log.warning("workers start again after %d failed starts", self._failures)
        elif not ok and not self._failures and not self._closed:  # closing kills starts
            log.warning("a worker did not start (%s): trying again, backing off", error)
        self._failures = 0 if ok else self._failures + 1
        self._changed.set()
        self._changed = trio.Event()

    async def _retire(self, process: Worker) -> None:
        """Kill ``process`` (and whatever it started) and reap it, even under cancellation,
        waiting at most ``REAP_S`` (a process in uninterruptible sleep is left, logged);
        ``serve_workers`` starts its replacement."""
        self._live.discard(process)
        self._warm.discard(process)
        self._served.pop(process, None)
        self._born.pop(process, None)
        if process.returncode is None:  # once reaped, its pid may name another process
            if isinstance(process, trio.Process):  # the daemon's child: it reaps it
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
            process.kill()  # a forked worker kills its group itself, by its pidfd's word
        with trio.CancelScope(shield=True), trio.move_on_after(REAP_S) as waited:
            await process.wait()
        if waited.cancelled_caught:
            log.warning("worker %d not reaped %.0f s after SIGKILL: left", process.pid, REAP_S)
        self._changed.set()
        self._changed = trio.Event()

    async def aclose(self) -> None:
        """Kill every worker, busy ones included (their tasks fail), and reap them."""
        self._closed = True
        for process in list(self._live):
            await self._retire(process)
        await self._starts.aclose()


@asynccontextmanager
async def open_worker_pool(
    size: int,
    *,
    warm: str = "builtins",
    answer_max_bytes: int = ANSWER_MAX_BYTES,
    recycle_tasks: int = RECYCLE_TASKS,
    template: bool = True,
) -> AsyncIterator[WorkerPool]:
    """A pool of ``size`` workers (0: threads of the daemon), each warmed on the module
    ``warm`` (forked from a template warmed on it, unless ``template`` is False); they start
    in the background at once, and are all killed and reaped on exit. With workers, the
    daemon turns non-dumpable first (``seal_daemon``). The block's own exception comes back
    as itself, not inside the nursery's group: the daemon's start-up errors (a bad cron.json
    opened inside this block) stay what callers catch."""
    try:
        async with trio.open_nursery() as nursery:
            pool = WorkerPool(
                size,
                nursery,
                warm=warm,
                answer_max_bytes=answer_max_bytes,
                recycle_tasks=recycle_tasks,
                template=template,
            )
            if size:
                seal_daemon()
                nursery.start_soon(pool.serve_workers)
            try:
                yield pool
            finally:
                await pool.aclose()
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


def seal_daemon() -> None:
    """Make this process non-dumpable (prctl PR_SET_DUMPABLE 0): a process of the same uid
    (a worker a hostile page subverted, a sandboxed command) can then neither ptrace it nor
    read its /proc/<pid>/environ or mem, where the daemon's credentials live. The daemon's
    own /proc/self reads still work; a same-uid debugger (py-spy) then needs root."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        log.warning("could not make the daemon non-dumpable (errno %d)", ctypes.get_errno())


def _backoff_s(failures: int) -> float:
    """The wait before the next start after ``failures`` failed starts in a row."""
    return float(min(START_BACKOFF_S * 2 ** min(failures - 1, 32), START_BACKOFF_MAX_S))


def _widen(pipe: trio.abc.SendStream | trio.abc.ReceiveStream | None) -> None:
    """Make ``pipe`` hold ``PIPE_BYTES``; a host that caps pipes lower keeps the default."""
    if isinstance(pipe, trio.lowlevel.FdStream):
        with contextlib.suppress(OSError):
            fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)


async def _ask(worker: Worker, request: bytes, cap: int) -> bytes:
    """Send ``request`` to ``worker`` and read its answer. Raises OpError(WORKER_FAILED) when
    the worker dies first (its status names why) or announces an answer past ``cap`` bytes."""
    assert worker.stdin is not None
    assert worker.stdout is not None
    try:
        await worker.stdin.send_all(_LENGTH.pack(len(request)) + request)
        head = await _exactly(worker.stdout, _LENGTH.size)
        (length,) = _LENGTH.unpack(head)
        if length > cap:
            raise OpError(ErrorCode.WORKER_FAILED, "answer")
        return await _exactly(worker.stdout, length)
    except (trio.BrokenResourceError, EOFError):
        with trio.move_on_after(1):  # its pipes closed: it is dead or dying
            await worker.wait()
        raise OpError(ErrorCode.WORKER_FAILED, _death(worker.returncode)) from None


async def _exactly(stream: trio.abc.ReceiveStream, size: int) -> bytes:
    """``size`` bytes of ``stream``; EOFError when it ends first."""
    data = bytearray()
    while len(data) < size:
        chunk = await stream.receive_some(min(size - len(data), 1 << 20))
        if not chunk:
            raise EOFError
        data += chunk
    return bytes(data)


def _death(status: int | None) -> str:
    """Why a worker is gone, as ``worker_failed``'s detail: ``killed:SIGKILL``, ``memory``
    (past its address space, ``pool_worker.MEMORY_BYTES``), ``exit:1``, ``exit:unknown``."""
    if status is None:
        return "gone"
    if status == worker_template.UNKNOWN:
        return "exit:unknown"  # it ended after its template, which would have said how, died
    if status == pool_worker.MEMORY_EXIT:
        return "memory"
    if status < 0:
        with contextlib.suppress(ValueError):
            return f"killed:{signal.Signals(-status).name}"
        return f"killed:{-status}"
    return f"exit:{status}"
