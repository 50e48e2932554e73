"""Where a pool's workers come from: its template process, seen from the daemon (the
process itself: pool_template.py), or a fresh interpreter.

    starts = WorkerStarts("specialists.web.pages.loading", env=WORKER_ENV, ready_s=60)
    worker = await starts.open()   # a Forked (the daemon's child, on two pipes) or a Process
    await starts.aclose()          # ends the template; the workers are the pool's to end

A fresh worker is an interpreter that imports the web specialist: about 1 s of CPU per start,
a fifth of the daemon's processes' CPU per uncached page when workers are recycled
(docs/scaling.md, "Worker restarts"). The template is started once the way a worker is (the
same interpreter flags, the scrubbed environment, its own session), imports the pool's module,
then clones a worker per ``fork``. The worker is the daemon's own child (CLONE_PARENT): the
pool kills, reaps and reads the status of a ``Forked`` as of a ``trio.Process``, and the
template's death leaves the workers it made serving. A template that dies, hangs or breaks
its protocol raises ``Failed``; one the host refuses (EMFILE, EAGAIN) raises OSError.
"""

from __future__ import annotations

import array
import contextlib
import errno
import logging
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import trio

from csp_web.infra.pool_template import PID, READY

log = logging.getLogger(__name__)

TEMPLATE = Path(__file__).with_name("pool_template.py")
WORKER = Path(__file__).with_name("pool_worker.py")
INTERPRETER = (sys.executable, "-s", "-X", "utf8")  # a fresh worker's and the template's
# A template that fails this many times in a row (its import fails, it starts a thread, it
# dies, it hangs) is not started again: the pool's workers are fresh interpreters from then on.
TEMPLATE_TRIES = 3
# A template is replaced after this many forks or seconds (as a worker, workers.RECYCLE_S): its
# workers share its address layout and its hash seeds (str's, libxml2's dictionaries'), which a
# subverted worker could learn and a page could then aim at the next workers. One start is
# 0.55-0.70 s of CPU (bench/worker_starts.py): 32 forks make it 17-22 ms more per worker.
TEMPLATE_FORKS = 32
TEMPLATE_S = 600.0
FORK_S = 5.0  # a fork answers in ms; a template that takes this long is hung, and dropped
REAP_S = 5.0  # workers.REAP_S


class Failed(Exception):
    """The template died, hung or broke its protocol: the pool drops it."""


class Forked:
    """A worker a template forked: the daemon's child, with what the pool uses of a
    ``trio.Process`` (``pid``, ``stdin``, ``stdout``, ``returncode``, ``poll``, ``wait``,
    ``kill``). It owns its two pipe ends and a pidfd, closed once it is reaped."""

    def __init__(self, pid: int, tasks: int, answers: int) -> None:
        # Its pid stays this worker's until the daemon reaps it (it is the daemon's child).
        self._pidfd = os.pidfd_open(pid)  # first: it may fail (EMFILE) before the pipes are ours
        self.pid = pid
        self.returncode: int | None = None
        self.stdin = trio.lowlevel.FdStream(tasks)
        self.stdout = trio.lowlevel.FdStream(answers)
        self._waiting = trio.Lock()  # one task at a time may wait on the pidfd

    def poll(self) -> int | None:
        """Its exit status (negative: the signal that ended it), reaping it; None while it
        runs."""
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    async def wait(self) -> int:
        """Wait for it to end, reap it and return its status."""
        async with self._waiting:
            while (status := self.poll()) is None:
                await trio.lowlevel.wait_readable(self._pidfd)
            if self._pidfd >= 0:
                os.close(self._pidfd)
                self._pidfd = -1
        return status

    def kill(self) -> None:
        """SIGKILL it, through its pidfd (no pid reuse race); nothing once it is reaped."""
        if self._pidfd >= 0:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)


class Template:
    """A running template process and the daemon's end of its socket; made by ``start``."""

    def __init__(self, process: trio.Process, control: trio.socket.SocketType) -> None:
        self.process = process
        self.forks = 0
        self.born = trio.current_time()
        self._control = control
        self._asking = trio.Lock()  # one request on the socket at a time: replies come in order

    @classmethod
    async def start(cls, module: str, *, env: dict[str, str], ready_s: float) -> Template:
        """A template warmed on ``module``, once it says it is ready (within ``ready_s``).
        Raises OSError when the host refuses a process or descriptors, Failed when it exits
        or does not get ready in time; the caller owns the template (``aclose``)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            process = await trio.lowlevel.open_process(
                [*INTERPRETER, str(TEMPLATE), module],
                env=env,  # no credential of the daemon's reaches the workers it forks
                stdin=theirs.fileno(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        template = cls(process, trio.socket.from_stdlib_socket(ours))
        await template._wait_ready(ready_s)
        return template

    def due(self) -> bool:
        """True once it has served its time (``TEMPLATE_FORKS`` forks or ``TEMPLATE_S``)."""
        return self.forks >= TEMPLATE_FORKS or trio.current_time() - self.born >= TEMPLATE_S

    async def fork(self) -> Forked:
        """A new worker on two fresh pipes. Raises OSError when the host refuses descriptors
        or, for now, the clone (``refusal``); Failed when the template is gone or hung."""
        with contextlib.ExitStack() as ours, contextlib.ExitStack() as theirs:
            tasks_read, tasks_write = _pipe(theirs, ours)
            answers_read, answers_write = _pipe(ours, theirs)
            (pid,) = PID.unpack(await self._ask(tasks_read, answers_write))
            if pid < 0:
                raise refusal(-pid)
            self.forks += 1
            try:
                worker = Forked(pid, tasks_write, answers_read)
            except OSError:  # no descriptor for its pidfd: end it, or it would stay a zombie
                os.kill(pid, signal.SIGKILL)  # not reaped yet, so still this worker's pid
                await trio.to_thread.run_sync(os.waitpid, pid, 0)
                raise
            ours.pop_all()  # the worker owns them now
        return worker

    async def aclose(self) -> None:
        """Kill the template and reap it (waiting at most ``REAP_S``, even under
        cancellation). The workers it made are the daemon's and live on."""
        self._control.close()
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
        with trio.CancelScope(shield=True), trio.move_on_after(REAP_S):
            await self.process.wait()

    async def _wait_ready(self, ready_s: float) -> None:
        """Return once it is warm; else close it and raise Failed."""
        try:
            with trio.move_on_after(ready_s):
                if await self._control.recv(len(READY)) == READY:
                    return
            raise Failed("not ready")
        except BaseException:
            await self.aclose()
            raise

    async def _ask(self, *fds: int) -> bytes:
        """Send a fork request carrying ``fds`` and read its reply, within ``FORK_S``. Shielded:
        a request cancelled halfway would leave its reply to be read as the next one's."""
        async with self._asking:
            with trio.CancelScope(shield=True), trio.move_on_after(FORK_S):
                try:
                    rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
                    await self._control.sendmsg([b"f"], rights)
                    return await _exactly(self._control, PID.size)
                except (OSError, EOFError, trio.ClosedResourceError) as exc:
                    raise Failed(f"gone ({exc!r})") from None
            raise Failed("hung")


def refusal(error: int) -> OSError | Failed:
    """What the template's clone refused with ``error`` means: OSError (a failed start, tried
    again after a back-off) when the host is short of processes or memory for now; Failed
    (the template dropped: fresh interpreters after ``TEMPLATE_TRIES``) for any other errno,
    as EPERM from a seccomp filter that forbids CLONE_PARENT, which no back-off ends."""
    if error in (errno.EAGAIN, errno.ENOMEM):
        return OSError(error, os.strerror(error))
    return Failed(f"clone refused: {os.strerror(error)}")


def _pipe(reader: contextlib.ExitStack, writer: contextlib.ExitStack) -> tuple[int, int]:
    """A pipe whose read end ``reader`` closes and write end ``writer`` does."""
    read, write = os.pipe2(os.O_CLOEXEC)
    reader.callback(os.close, read)
    writer.callback(os.close, write)
    return read, write


async def _exactly(control: trio.socket.SocketType, size: int) -> bytes:
    """``size`` bytes of ``control``; EOFError when it ends first."""
    data = b""
    while len(data) < size:
        chunk = await control.recv(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


class WorkerStarts:
    """A pool's worker starts: forked from its template while one serves, else fresh
    interpreters. Owns the template (``aclose``); the workers are the caller's."""

    def __init__(self, module: str, *, env: dict[str, str], ready_s: float, template: bool) -> None:
        """Workers and template warm on ``module``, with the environment ``env``; a template
        not ready within ``ready_s`` fails. ``template`` False: fresh interpreters only."""
        self._module = module
        self._env = env
        self._ready_s = ready_s
        self._template: Template | None = None
        self._tries = TEMPLATE_TRIES if template else 0  # failures left before fresh ones only
        self._starting = trio.Lock()  # one template starts at a time
        self._closed = False

    @property
    def template_pid(self) -> int | None:
        """The template process's, while one serves."""
        return self._template.process.pid if self._template else None

    async def open(self) -> trio.Process | Forked:
        """A new worker: forked from the template when one serves, else a fresh interpreter.
        A template that fails is dropped (the workers it made serve on). Raises OSError when
        the host refuses a process, a clone or descriptors (the pool backs off)."""
        # A fork costs 12-16 ms of CPU against 640-770 ms for a fresh interpreter warmed on
        # the extractor (the template's own start, 0.55-0.70 s, spread over its 32 forks:
        # 17-22 ms more); python bench/worker_starts.py, two runs, load 2.6-2.8.
        template = await self._serving()
        if template is not None:
            try:
                return await template.fork()
            except Failed as exc:
                await self._drop(template, exc)
        return await open_fresh(self._env)

    async def aclose(self) -> None:
        """End the template; no other starts one."""
        self._closed = True
        if self._template is not None:
            await self._drop(self._template, None)

    async def _serving(self) -> Template | None:
        """The template to fork from: a new one when there is none, or the last one served its
        time or died meanwhile (a failure), unless ``TEMPLATE_TRIES`` failed in a row."""
        async with self._starting:
            template = self._template
            if template is not None and template.process.poll() is not None:
                await self._drop(template, Failed("it died"))
            elif template is not None and template.due():
                await self._drop(template, None)
            if self._template is None and self._tries and not self._closed:
                self._template = await self._start()
            return self._template

    async def _start(self) -> Template | None:
        """A template warmed on the module, or None when it failed to get ready (a failure)
        or the pool closed meanwhile."""
        try:
            template = await Template.start(self._module, env=self._env, ready_s=self._ready_s)
        except Failed as exc:
            self._tries -= 1
            log.warning("the workers' template did not start (%s)", exc)
            return None
        if self._closed:
            await template.aclose()
            return None
        self._tries = TEMPLATE_TRIES
        return template

    async def _drop(self, template: Template, failure: Failed | None) -> None:
        """Stop forking from ``template`` and end it; a ``failure`` counts against
        ``TEMPLATE_TRIES``."""
        if self._template is template:
            self._template = None
            if failure is not None:
                self._tries -= 1
                log.warning("the workers' template failed (%s): dropped", failure)
        await template.aclose()


async def open_fresh(env: dict[str, str]) -> trio.Process:
    """A fresh worker: a new interpreter running ``pool_worker.py``. Raises OSError when the
    host refuses one (EMFILE, EAGAIN, ENOMEM)."""
    return await trio.lowlevel.open_process(
        [*INTERPRETER, str(WORKER)],
        env=env,  # no credential of the daemon's reaches a hostile page's worker
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # a subverted worker forges no log line
        start_new_session=True,  # a terminal's ^C goes to the daemon, which ends them
    )
