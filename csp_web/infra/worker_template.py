"""Where a pool's workers come from: its template process, seen from the daemon (the
process itself: pool_template.py), or a fresh interpreter.

    starts = WorkerStarts("specialists.web.pages.loading", env=WORKER_ENV, ready_s=60)
    worker = await starts.open()   # a Forked (the template's child, on two pipes) or a Process
    await starts.aclose()          # ends the templates; the workers are the pool's to end

A fresh worker is an interpreter that imports the web specialist: about 1 s of CPU per start,
a fifth of the daemon's processes' CPU per uncached page when workers are recycled
(docs/scaling.md, "Worker restarts"). The template is started once the way a worker is (the
same interpreter flags, the scrubbed environment, its own session), imports the pool's module,
then forks a worker per ``fork``. The worker is the template's child: the daemon holds a pidfd
of it (signals reach that worker and no other, whatever becomes of its pid) and reads its exit
status from the template, which reaps it. A template is retired (it forks no more, and exits
once its workers have ended) after its share of forks; one that dies, hangs or breaks its
protocol raises ``Failed`` and is killed, and its workers, whose status nobody can tell any
more, are killed by the pool as it meets them (``Forked.poll``). One the host refuses for now
(EMFILE, EAGAIN) raises OSError.
"""

from __future__ import annotations

import array
import contextlib
import errno
import logging
import os
import select
import signal
import socket
import subprocess
import sys
from pathlib import Path

import trio

from csp_web.infra.pool_template import PID, READY, STATUS

log = logging.getLogger(__name__)

TEMPLATE = Path(__file__).with_name("pool_template.py")
WORKER = Path(__file__).with_name("pool_worker.py")
INTERPRETER = (sys.executable, "-s", "-X", "utf8")  # a fresh worker's and the template's
# Templates that fail this many times in a row (the import fails, it starts a thread, it
# dies, hangs or breaks its protocol, before or during a fork) are not followed by another:
# the pool's workers are fresh interpreters from then on. A fork served resets the count; a
# fork refused for good (EPERM from a seccomp filter) ends templates at once.
TEMPLATE_TRIES = 3
# A template is retired after this many forks or seconds (as a worker, workers.RECYCLE_S): its
# workers share what a fork copies, its address layout, its hash seeds (str's, libxml2's
# dictionaries'), glibc's stack canary and pointer guard, which a subverted worker could
# learn, and a page could then aim a native bug at its siblings past those mitigations. One
# start is 0.6-0.8 s of CPU (bench/worker_starts.py): 8 forks make it 75-100 ms more per
# worker, 0.12x a fresh interpreter's start in all, and bound the siblings to 7.
TEMPLATE_FORKS = 8
TEMPLATE_S = 600.0
FORK_S = 5.0  # a fork answers in ms; a template that takes this long is hung, and dropped
REAP_S = 5.0  # workers.REAP_S
# A dead worker's status comes from its template in ms; one stopped (SIGSTOP by a subverted
# worker of its uid) or paged out must not hold a retirement: past this, the status is
# unknown. Under the 1 s workers._ask gives a dead worker's pipes to say how it ended.
STATUS_S = 0.5
# A worker's status when it ended after its template died: nobody reaped it who could tell.
UNKNOWN = -1000
# A fork refused for now: the pool backs off and tries again. Any other errno is for good.
FOR_NOW = (errno.EAGAIN, errno.ENOMEM, errno.EMFILE, errno.ENFILE)


class Failed(Exception):
    """The template died, hung or broke its protocol: the pool drops it. ``lasting``: its
    forks are refused for good, so no template follows."""

    def __init__(self, why: str, *, lasting: bool = False) -> None:
        super().__init__(why)
        self.lasting = lasting


class Forked:
    """A worker a template forked, with what the pool uses of a ``trio.Process`` (``pid``,
    ``stdin``, ``stdout``, ``returncode``, ``poll``, ``wait``, ``kill``). It owns its two pipe
    ends, its pidfd and the read end of its status pipe, closed once its status is known."""

    def __init__(
        self, template: Template, pid: int, pidfd: int, tasks: int, answers: int, status: int
    ) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.stdin = trio.lowlevel.FdStream(tasks)
        self.stdout = trio.lowlevel.FdStream(answers)
        self._template = template
        self._pidfd = pidfd
        self._status = status
        os.set_blocking(status, False)
        self._waiting = trio.Lock()  # one task at a time may wait on the pidfd

    def poll(self) -> int | None:
        """None while it runs and may serve; else its status, ``UNKNOWN`` when it is not
        known yet (``wait`` learns it). A worker whose template died is killed here (no
        status of it could be known): the pool retires it as one found dead."""
        if self.returncode is not None:
            return self.returncode
        if _readable(self._pidfd):
            status = self._read_status()
            if status is not None:
                self._ended(status)
            return status if status is not None else UNKNOWN
        if self._template.process.poll() is not None:
            self.kill()
            return UNKNOWN
        return None

    async def wait(self) -> int:
        """Wait for it to end and return its status: the template's word (``UNKNOWN`` when
        it died or says nothing within ``STATUS_S``). Once it has ended its descriptors are
        closed, even when this wait is cancelled meanwhile (its status then unknown)."""
        async with self._waiting:
            if self.returncode is None:
                await trio.lowlevel.wait_readable(self._pidfd)
                status = None
                try:
                    with trio.move_on_after(STATUS_S):
                        await trio.lowlevel.wait_readable(self._status)
                        status = self._read_status()
                finally:
                    self._ended(UNKNOWN if status is None else status)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        """SIGKILL it and its process group, nothing once it has ended. It through its pidfd
        (no pid reuse race); its group is killed by its template before reaping it, or, when
        the template died, here by number while the pidfd says it runs: a live leader keeps
        its pid, and pids are handed out in a cycle, not reused between the two calls."""
        if self.returncode is not None or _readable(self._pidfd):
            return
        if self._template.process.poll() is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def _read_status(self) -> int | None:
        """The status the template wrote, ``UNKNOWN`` when it closed the pipe without one
        (or wrote one no process has), None while there is none yet."""
        try:
            data = os.read(self._status, STATUS.size)
        except BlockingIOError:
            return None
        if len(data) != STATUS.size:
            return UNKNOWN
        (status,) = STATUS.unpack(data)
        return status if -64 <= status <= 255 else UNKNOWN

    def _ended(self, status: int) -> None:
        self.returncode = status
        os.close(self._pidfd)
        os.close(self._status)


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
        """A new worker on fresh pipes. Raises OSError when the host refuses descriptors or,
        for now, the fork; Failed when the template is gone, hung, refused the fork for good
        or answered with a process that is not its child."""
        with contextlib.ExitStack() as ours, contextlib.ExitStack() as theirs:
            tasks_read, tasks_write = _pipe(theirs, ours)
            answers_read, answers_write = _pipe(ours, theirs)
            status_read, status_write = _pipe(ours, theirs)
            pid, pidfd = await self._ask(tasks_read, answers_write, status_write)
            if pidfd is None:
                raise refusal(-pid) if pid < 0 else Failed("broke its protocol: no pidfd")
            ours.callback(os.close, pidfd)
            self._check_child(pid, pidfd)
            self.forks += 1
            ours.pop_all()  # the worker owns them now
        return Forked(self, pid, pidfd, tasks_write, answers_read, status_read)

    async def retire(self) -> None:
        """Fork no more: close the socket, once a fork under way has its answer. The template
        exits when the workers it made have ended (``aclose`` ends it at once)."""
        with trio.CancelScope(shield=True):  # _ask is bounded by FORK_S
            async with self._asking:
                self._control.close()

    async def aclose(self) -> None:
        """Kill the template and reap it (waiting at most ``REAP_S``, even under
        cancellation). The workers it made live on, their status unknown (``Forked.poll``)."""
        await self.retire()
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
        with trio.CancelScope(shield=True), trio.move_on_after(REAP_S) as waited:
            await self.process.wait()
        if waited.cancelled_caught:
            log.warning(
                "template %d not reaped %.0f s after SIGKILL: left", self.process.pid, REAP_S
            )

    def _check_child(self, pid: int, pidfd: int) -> None:
        """Raise Failed unless ``pidfd`` is a pidfd of ``pid`` and ``pid`` the template's
        child. A pidfd of a process that ended and was reaped reads ``Pid: -1`` (the template
        reaps its worker at once): accepted, it can be neither signalled nor serve, its status
        comes on the status pipe and the pool retires it."""
        try:
            info = Path(f"/proc/self/fdinfo/{pidfd}").read_text()
        except OSError:
            info = ""
        if "\nPid:\t-1\n" in info and _readable(pidfd):
            return
        if f"\nPid:\t{pid}\n" not in info:
            raise Failed(f"broke its protocol: no pidfd of {pid}")
        try:
            parent: int | None = _parent(pid)
        except (OSError, ValueError, IndexError):
            parent = None  # gone already (then its pidfd is readable)
        # Read before the pidfd is seen live: the pid was that process's while /proc was read.
        if parent != self.process.pid and not _readable(pidfd):
            raise Failed(f"broke its protocol: {pid} is not its child")

    async def _wait_ready(self, ready_s: float) -> None:
        """Return once it is warm; else close it and raise Failed."""
        try:
            with trio.move_on_after(ready_s):
                if await self._control.recv(len(READY)) == READY:
                    return
            raise Failed(f"not ready (exit status {self.process.poll()})")
        except BaseException:
            await self.aclose()
            raise

    async def _ask(self, *fds: int) -> tuple[int, int | None]:
        """Send a fork request carrying ``fds``; its reply, within ``FORK_S``: the number and
        the one descriptor it carries, if any. Shielded: a request cancelled halfway would
        leave its reply to be read as the next one's."""
        async with self._asking:
            with trio.CancelScope(shield=True), trio.move_on_after(FORK_S):
                try:
                    rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
                    await self._control.sendmsg([b"f"], rights)
                    return await _reply(self._control)
                except (OSError, EOFError, trio.ClosedResourceError) as exc:
                    raise Failed(f"gone ({exc!r})") from None
            raise Failed("hung")


def refusal(error: int) -> OSError | Failed:
    """What a fork refused with ``error`` means: OSError (a failed start, tried again after a
    back-off) when the host is short of processes, memory or descriptors for now; a lasting
    Failed (no template follows) for any other errno, as EPERM from a seccomp filter."""
    if error in FOR_NOW:
        return OSError(error, os.strerror(error))
    return Failed(f"fork refused: {os.strerror(error)}", lasting=True)


def _readable(fd: int) -> bool:
    """True when ``fd`` is readable now (a pidfd: its process has ended)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


def _parent(pid: int) -> int:
    """``pid``'s parent's pid, from /proc."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


async def _reply(control: trio.socket.SocketType) -> tuple[int, int | None]:
    """A template's reply: ``PID`` and at most one descriptor (close-on-exec). Raises Failed
    when it carries more descriptors, EOFError when the socket ends first."""
    space = socket.CMSG_SPACE(array.array("i", [0]).itemsize * 2)
    data, ancillary, flags, _ = await control.recvmsg(PID.size, space, socket.MSG_CMSG_CLOEXEC)
    fds = array.array("i")
    for level, kind, payload in ancillary:
        if (level, kind) == (socket.SOL_SOCKET, socket.SCM_RIGHTS):
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    if len(fds) > 1 or flags & socket.MSG_CTRUNC:
        for fd in fds:
            os.close(fd)
        raise Failed("broke its protocol: descriptors")
    if not data:
        raise EOFError
    try:
        data += await _exactly(control, PID.size - len(data))
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    (number,) = PID.unpack(data)
    return number, (fds[0] if fds else None)


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
    interpreters. Owns the templates (``aclose``); the workers are the caller's."""

    def __init__(self, module: str, *, env: dict[str, str], ready_s: float, template: bool) -> None:
        """Workers and template warm on ``module``, with the environment ``env``; a template
        not ready within ``ready_s`` fails. ``template`` False: fresh interpreters only."""
        self._module = module
        self._env = env
        self._ready_s = ready_s
        self._template: Template | None = None
        self._retired: set[Template] = set()  # forking no more, until their workers end
        self._tries = TEMPLATE_TRIES if template else 0  # failures left before fresh ones only
        self._starting = trio.Lock()  # one template starts at a time
        self._closed = False

    @property
    def template_pid(self) -> int | None:
        """The template process's, while one serves."""
        return self._template.process.pid if self._template else None

    async def open(self) -> trio.Process | Forked:
        """A new worker: forked from the template when one serves, else a fresh interpreter.
        A template that fails is dropped. Raises OSError when the host refuses a process, a
        fork or descriptors (the pool backs off), or the pool is closing."""
        # A fork costs 15-16 ms of CPU against 750-800 ms for a fresh interpreter warmed on
        # the extractor; with the template's own start (0.6-0.8 s) spread over its 8 forks,
        # 92-115 ms (0.12x); python bench/worker_starts.py, load 2.9.
        template = await self._serving()
        if template is not None:
            try:
                worker = await template.fork()
            except Failed as exc:
                await self._drop(template, exc)
            else:
                self._tries = TEMPLATE_TRIES  # failures count in a row
                return worker
        if self._closed:  # a start met the pool's closing: no fresh interpreter for it
            raise OSError(errno.ECANCELED, "the pool is closing")
        return await open_fresh(self._env)

    async def aclose(self) -> None:
        """End the templates (the pool ended their workers first); no other starts one."""
        self._closed = True
        if self._template is not None:
            await self._drop(self._template, None)
        for template in list(self._retired):
            await template.aclose()
        self._retired.clear()

    async def _serving(self) -> Template | None:
        """The template to fork from: a new one when there is none, or the last one served its
        time (retired) or died meanwhile (a failure), unless ``TEMPLATE_TRIES`` failed in a
        row. Templates retired before and ended since are reaped."""
        async with self._starting:
            for ended in [old for old in self._retired if old.process.poll() is not None]:
                self._retired.discard(ended)
                await ended.aclose()
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
        return template

    async def _drop(self, template: Template, failure: Failed | None) -> None:
        """Stop forking from ``template``: retire it when it served its time (its workers
        serve on), kill it on a ``failure``, which counts against ``TEMPLATE_TRIES`` (all of
        them when it is lasting)."""
        if self._template is template:
            self._template = None
            if failure is not None:
                self._tries = 0 if failure.lasting else self._tries - 1
                log.warning("the workers' template failed (%s): dropped", failure)
        if failure is None and not self._closed:
            await template.retire()
            self._retired.add(template)
        else:
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
