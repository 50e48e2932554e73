"""A pool of worker processes for the daemon's CPU-heavy work (issue 26: every core works).

    async with open_worker_pool(size) as pool:
        page = await pool.run(functools.partial(build_page, result), deadline=d, answers=(Page,))

One event loop runs on one core; extraction, summaries and large JSON parses are pure
functions of bytes and strings, so they run in ``size`` worker processes
(``pool_worker.py``) and the loop only moves their inputs and answers. ``size`` 0 runs them
in a trio worker thread of the daemon, as before the pool.

A worker is a fresh interpreter (``python pool_worker.py``, not a fork): it inherits none of
the daemon's sockets (close_fds), environment (its credentials: ``WORKER_ENV`` holds only
PATH and the locale) or trio state. Workers start on demand and then stay: while no worker is
idle and fewer than ``size`` are warm, a task runs in a thread of the daemon and one more
worker warms up in the background (an interpreter and the imports of the task's module:
about 1 s of CPU, bench/workers.py), so no task waits for a start and a daemon that never
extracts never pays one. A task is the pickle of a callable and its arguments (the daemon
trusts its workers' code); an answer is read with an unpickler that builds only the classes
the caller names in ``answers``, so a worker that a hostile page subverted (a native bug in
lxml) cannot run code in the daemon through its answer.

A worker that dies mid-task (SIGKILL, the kernel's OOM killer, a segfault), or answers past
``answer_max_bytes`` or out of shape, fails that one task with ``worker_failed:<why>``; a
task still running at its ``deadline`` fails with ``worker_failed:timeout``, and a cancelled
task's worker is killed at once: in each case that worker is killed and a fresh one warms up
in its place. The daemon never waits for a worker that does not answer.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import os
import pickle
import signal
import struct
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import trio

from csp_web.core.api.errors import OpError
from csp_web.infra import pool_worker
from protocol import ErrorCode

log = logging.getLogger(__name__)

T = TypeVar("T")

WORKER = Path(__file__).with_name("pool_worker.py")
WORKER_ENV = {"PATH": os.defpath, "LC_ALL": "C.UTF-8"}
MAX_WORKERS = 64  # web.workers' bound: past the cores any host we serve has, workers only queue
# An answer's cap: a page's views of a body of guard.max_decoded_bytes run to a few times its
# size; far past that, the worker is broken or subverted.
ANSWER_MAX_BYTES = 256 << 20
WARM_UP_S = 60.0  # a start is about 1 s of CPU; a loaded host stretches it, a hung one not
_LENGTH = struct.Struct("!Q")  # every frame each way: its length, then that many bytes


def cores() -> int:
    """The cores this process may run on (its affinity mask, not the host's count)."""
    return len(os.sched_getaffinity(0))


class WorkerPool:
    """``size`` worker processes, or the daemon's own threads when ``size`` is 0.

    Made by ``open_worker_pool``, which owns the processes (it starts them in its nursery and
    kills them on exit).
    """

    def __init__(
        self,
        size: int,
        nursery: trio.Nursery | None = None,
        *,
        answer_max_bytes: int = ANSWER_MAX_BYTES,
    ) -> None:
        """Workers start in ``nursery``, which only a pool of size 0 may go without."""
        if size and nursery is None:
            raise ValueError("a pool of workers needs a nursery to start them in")
        self.size = size
        self.answer_max_bytes = answer_max_bytes
        self._nursery = nursery
        # Warm workers not running a task; a buffer of ``size``, so returning one never waits.
        self._give, self._take = trio.open_memory_channel[trio.Process](max(size, 1))
        self._live: set[trio.Process] = set()  # every worker: warming, idle or busy
        self._starting = 0  # workers asked for whose process is not made yet
        self._warm: set[trio.Process] = set()  # those that finished warming: idle or busy
        self._module = "builtins"  # what the last worker warmed on: its replacement does too
        self._changed = trio.Event()  # set (and replaced) when a worker ends its warm-up
        self._closed = False

    @property
    def pids(self) -> tuple[int, ...]:
        """The worker processes alive now (bench/workers.py sums their CPU)."""
        return tuple(process.pid for process in self._live)

    async def run(
        self, task: Callable[[], T], *, deadline: float, answers: Iterable[type] = ()
    ) -> T:
        """``task()``, run in a worker; in a thread of the daemon (abandoned on cancel) for a
        pool of size 0, and while no worker is idle and fewer than ``size`` are warm (a
        worker's start, an interpreter and the imports of ``task``'s module, about 1 s of
        CPU, runs in the background: no task waits for it). ``task`` and what it captures
        must pickle; its answer may hold builtins and the classes in ``answers``, and so may
        an exception it raises, which is raised here (one of another class: RuntimeError
        with the worker's traceback).

        Raises OpError(WORKER_FAILED): ``timeout`` when ``deadline`` (trio time) passes
        first, ``killed:<signal>`` / ``exit:<status>`` when the worker died, ``answer`` when
        its answer is past ``answer_max_bytes`` or not of the allowed classes."""
        with trio.move_on_at(deadline):
            worker = await self._idle_worker(task) if self.size else None
            if worker is None:
                return await trio.to_thread.run_sync(task, abandon_on_cancel=True)
            answer = await self._exchange(worker, pickle.dumps(task, pickle.HIGHEST_PROTOCOL))
            return _outcome(answer, answers)  # type: ignore[no-any-return]
        raise OpError(ErrorCode.WORKER_FAILED, "timeout")

    async def wait_warm(self, module: str) -> None:
        """Start every worker (warming on ``module``) and return once all are warm: for a
        caller that measures or tests the warm pool (bench/workers.py). A worker that does
        not start is tried again."""
        while len(self._warm) < self.size:
            for _ in range(self._room()):
                self._start_soon(module)
            changed = self._changed
            await changed.wait()

    async def _idle_worker(self, task: Callable[[], object]) -> trio.Process | None:
        """An idle worker, waiting for one when every worker is warm and busy; None when none
        is idle and fewer than ``size`` are warm (one more then starts warming on ``task``'s
        module). A worker found dead (killed while idle) is reaped and fails no task."""
        while True:
            if len(self._warm) >= self.size:
                worker = await self._take.receive()
            else:
                try:
                    worker = self._take.receive_nowait()
                except trio.WouldBlock:
                    if self._room():
                        self._start_soon(_module_of(task))
                    return None
            if worker.poll() is None:
                return worker
            await self._retire(worker)

    async def _exchange(self, worker: trio.Process, request: bytes) -> bytes:
        """``worker``'s answer to ``request``; the worker goes back to the idle ones only
        when it answered whole, else it is killed and a fresh one starts warming."""
        answered = False
        try:
            answer = await _ask(worker, request, self.answer_max_bytes)
            answered = True
            return answer
        finally:
            if answered and not self._closed:
                self._give.send_nowait(worker)
            else:
                await self._retire(worker)

    def _room(self) -> int:
        """How many more workers may start."""
        return self.size - len(self._live) - self._starting

    def _start_soon(self, module: str) -> None:
        if not self._closed:
            self._module = module
            self._starting += 1
            assert self._nursery is not None  # __init__: a pool with workers has one
            self._nursery.start_soon(self._warm_up, module)

    async def _warm_up(self, module: str) -> None:
        """Start a worker, have it import ``module``, then add it to the idle ones (or, when
        it fails to or the pool closed meanwhile, kill it)."""
        try:
            process = await trio.lowlevel.open_process(
                [sys.executable, "-s", "-X", "utf8", str(WORKER)],
                env=WORKER_ENV,  # no credential of the daemon's reaches a hostile page's worker
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,  # a subverted worker forges no log line
                start_new_session=True,  # a terminal's ^C goes to the daemon, which ends them
            )
        finally:
            self._starting -= 1
        self._live.add(process)
        warm = pickle.dumps(functools.partial(pool_worker.warm, module))
        warmed = False
        try:
            with trio.fail_after(WARM_UP_S):
                _outcome(await _ask(process, warm, self.answer_max_bytes), ())
            warmed = not self._closed
        except (OpError, RuntimeError, trio.TooSlowError) as exc:
            log.warning("a worker did not start (%s): its tasks run in the daemon", exc)
        finally:
            if warmed:
                self._warm.add(process)
                self._give.send_nowait(process)
            else:
                await self._retire(process)
            self._changed.set()
            self._changed = trio.Event()

    async def _retire(self, process: trio.Process) -> None:
        """Kill ``process`` (and whatever it started) and reap it, even under cancellation;
        a warm worker's place starts warming again at once, so that tasks waiting for a
        worker are served."""
        self._live.discard(process)
        if process in self._warm:
            self._warm.discard(process)
            self._start_soon(self._module)
        if process.returncode is None:  # once reaped, its pid may name another process
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
        with trio.CancelScope(shield=True):
            await process.wait()

    async def aclose(self) -> None:
        """Kill every worker, busy ones included (their tasks fail), and reap them."""
        self._closed = True
        for process in list(self._live):
            await self._retire(process)


@asynccontextmanager
async def open_worker_pool(
    size: int, *, answer_max_bytes: int = ANSWER_MAX_BYTES
) -> AsyncIterator[WorkerPool]:
    """A pool of ``size`` workers (0: threads of the daemon), all killed and reaped on exit."""
    async with trio.open_nursery() as nursery:
        pool = WorkerPool(size, nursery, answer_max_bytes=answer_max_bytes)
        try:
            yield pool
        finally:
            await pool.aclose()
            nursery.cancel_scope.cancel()


def _module_of(task: Callable[[], object]) -> str:
    """The module a task's function lives in: what a new worker imports while it warms."""
    function = task.func if isinstance(task, functools.partial) else task
    return str(getattr(function, "__module__", None) or "builtins")


async def _ask(worker: trio.Process, request: bytes, cap: int) -> bytes:
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
    (past its address space, ``pool_worker.MEMORY_BYTES``), ``exit:1``."""
    if status is None:
        return "gone"
    if status == pool_worker.MEMORY_EXIT:
        return "memory"
    if status < 0:
        with contextlib.suppress(ValueError):
            return f"killed:{signal.Signals(-status).name}"
        return f"killed:{-status}"
    return f"exit:{status}"


def _outcome(answer: bytes, answers: Iterable[type]) -> Any:
    """The value a worker's answer carries, or the exception it carries raised."""
    try:
        kind, payload = _Allowed.loads(answer, ())
        if kind == "ok":
            return _Allowed.loads(payload, answers)
        if kind != "raised":
            raise ValueError(kind)
        text, raised = payload
    except Exception:  # a broken pickle raises almost anything (IndexError, KeyError, ...)
        raise OpError(ErrorCode.WORKER_FAILED, "answer") from None
    try:
        exc = _Allowed.loads(raised, answers)
    except Exception:  # not of an allowed class, or broken: the traceback tells the bug
        exc = None
    if isinstance(exc, BaseException):
        raise exc
    # A bug in the task: its traceback, repr'd (a subverted worker's text forges no log line).
    raise RuntimeError(f"worker task raised: {text!r}")


class _Allowed(pickle.Unpickler):
    """An unpickler that builds builtins' containers and scalars and the classes given."""

    def __init__(self, data: bytes, allowed: Iterable[type]) -> None:
        super().__init__(io.BytesIO(data))
        self._allowed = {(cls.__module__, cls.__qualname__): cls for cls in allowed}

    def find_class(self, module: str, name: str) -> Any:
        try:
            return self._allowed[module, name]
        except KeyError:
            raise pickle.UnpicklingError(f"{module}.{name} is not an allowed answer") from None

    @classmethod
    def loads(cls, data: bytes, allowed: Iterable[type]) -> Any:
        return cls(data, allowed).load()
