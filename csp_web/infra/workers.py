"""A pool of worker processes for the daemon's CPU-heavy work (issue 26: every core works).

    async with open_worker_pool(size) as pool:
        page = await pool.run(functools.partial(build_page, result), deadline=d, answers=(Page,))

One event loop runs on one core; extraction, summaries and large JSON parses are pure
functions of bytes and strings, so they run in ``size`` worker processes
(``pool_worker.py``) and the loop only moves their inputs and answers. ``size`` 0 runs them
in a trio worker thread of the daemon, as before the pool.

A worker is a fresh interpreter (``python pool_worker.py``, not a fork): it inherits none of
the daemon's sockets (close_fds), environment (its credentials: ``WORKER_ENV`` holds only
PATH and the locale) or trio state. Workers start on first demand, one per task waiting for
one while fewer than ``size`` live, and then stay: bench/workers.py measures a start (an
interpreter and the imports of the first task's module) at about 0.3 s of CPU, which a daemon
that never extracts never pays. A task is the pickle of a callable and its arguments (the
daemon trusts its workers' code); an answer is read with an unpickler that builds only the
classes the caller names in ``answers``, so a worker that a hostile page subverted (a native
bug in lxml) cannot run code in the daemon through its answer.

A worker that dies mid-task (SIGKILL, the kernel's OOM killer, a segfault), or answers past
``ANSWER_MAX_BYTES`` or out of shape, fails that one task with ``worker_failed:<why>``; a task
still running at its ``deadline`` fails with ``worker_failed:timeout`` and a cancelled task's
worker is killed at once: in both cases that worker is killed and the next task starts a
fresh one. The daemon never waits for a worker that does not answer.
"""

from __future__ import annotations

import contextlib
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
from protocol import ErrorCode

log = logging.getLogger(__name__)

T = TypeVar("T")

WORKER = Path(__file__).with_name("pool_worker.py")
WORKER_ENV = {"PATH": os.defpath, "LC_ALL": "C.UTF-8"}
MAX_WORKERS = 64  # web.workers' bound: past the cores any host we serve has, workers only queue
# An answer's cap: a page's views of a body of guard.max_decoded_bytes run to a few times its
# size; far past that, the worker is broken or subverted.
ANSWER_MAX_BYTES = 256 << 20
_LENGTH = struct.Struct("!Q")  # every frame each way: its length, then that many bytes


def cores() -> int:
    """The cores this process may run on (its affinity mask, not the host's count)."""
    return len(os.sched_getaffinity(0))


class WorkerPool:
    """``size`` worker processes, or the daemon's own threads when ``size`` is 0.

    Made by ``open_worker_pool``, which owns and kills the processes.
    """

    def __init__(self, size: int, *, answer_max_bytes: int = ANSWER_MAX_BYTES) -> None:
        self.size = size
        self.answer_max_bytes = answer_max_bytes
        self._turns = trio.CapacityLimiter(max(size, 1))
        self._idle: list[trio.Process] = []
        self._live: set[trio.Process] = set()
        self._closed = False

    @property
    def pids(self) -> tuple[int, ...]:
        """The worker processes alive now (bench/workers.py sums their CPU)."""
        return tuple(process.pid for process in self._live)

    async def run(
        self, task: Callable[[], T], *, deadline: float, answers: Iterable[type] = ()
    ) -> T:
        """``task()``, run in a worker (or, for a pool of size 0, a thread of the daemon,
        abandoned on cancel). ``task`` and what it captures must pickle; its answer may hold
        builtins and the classes in ``answers``, and so may an exception it raises, which is
        raised here (one of another class: RuntimeError with the worker's traceback).

        Raises OpError(WORKER_FAILED): ``timeout`` when ``deadline`` (trio time) passes
        first, ``killed:<signal>`` / ``exit:<status>`` when the worker died, ``answer`` when
        its answer is past ``answer_max_bytes`` or not of the allowed classes."""
        if self.size == 0:
            return await trio.to_thread.run_sync(task, abandon_on_cancel=True)
        request = pickle.dumps(task, protocol=pickle.HIGHEST_PROTOCOL)
        with trio.move_on_at(deadline):
            async with self._turns:
                answer = await self._exchange(request)
            return _outcome(answer, answers)  # type: ignore[no-any-return]
        raise OpError(ErrorCode.WORKER_FAILED, "timeout")

    async def _exchange(self, request: bytes) -> bytes:
        """The answer of one worker (idle, else started) to ``request``; the worker goes back
        to the idle ones only when it answered whole."""
        worker = await self._idle_or_started()
        answered = False
        try:
            answer = await _ask(worker, request, self.answer_max_bytes)
            answered = True
            return answer
        finally:
            if answered and not self._closed:
                self._idle.append(worker)
            else:
                await self._retire(worker)

    async def _idle_or_started(self) -> trio.Process:
        """An idle worker still alive (one killed while idle, by the OOM killer say, is
        reaped and fails no task), else a new one."""
        while self._idle:
            worker = self._idle.pop()
            if worker.poll() is None:
                return worker
            await self._retire(worker)
        return await self._start()

    async def _start(self) -> trio.Process:
        if self._closed:
            raise OpError(ErrorCode.SHUTTING_DOWN, "workers")
        process = await trio.lowlevel.open_process(
            [sys.executable, "-s", "-X", "utf8", str(WORKER)],
            env=WORKER_ENV,  # no credential of the daemon's reaches a hostile page's worker
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # a subverted worker forges no log line
            start_new_session=True,  # a terminal's ^C goes to the daemon, which ends its workers
        )
        self._live.add(process)
        log.debug("worker %d started (%d live)", process.pid, len(self._live))
        return process

    async def _retire(self, process: trio.Process) -> None:
        """Kill ``process`` (and whatever it started) and reap it, even under cancellation."""
        self._live.discard(process)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with trio.CancelScope(shield=True):
            await process.wait()

    async def aclose(self) -> None:
        """Kill every worker, busy ones included (their tasks fail), and reap them."""
        self._closed = True
        self._idle.clear()
        for process in list(self._live):
            await self._retire(process)


@asynccontextmanager
async def open_worker_pool(
    size: int, *, answer_max_bytes: int = ANSWER_MAX_BYTES
) -> AsyncIterator[WorkerPool]:
    """A pool of ``size`` workers (0: threads of the daemon), all killed and reaped on exit."""
    pool = WorkerPool(size, answer_max_bytes=answer_max_bytes)
    try:
        yield pool
    finally:
        await pool.aclose()


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
    """Why a worker is gone, as ``worker_failed``'s detail: ``killed:SIGKILL``, ``exit:1``."""
    if status is None:
        return "gone"
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
    except (pickle.UnpicklingError, ValueError, TypeError, EOFError):
        raise OpError(ErrorCode.WORKER_FAILED, "answer") from None
    try:
        exc = _Allowed.loads(raised, answers)
    except (pickle.UnpicklingError, ValueError, TypeError, EOFError):
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
