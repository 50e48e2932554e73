"""The template process of a worker pool (``worker_template.py`` starts it): warmed once, it
forks each fresh worker the pool asks for, so a worker's start costs a fork, not an
interpreter and the web specialist's imports.

    python pool_template.py MODULE      (fd 0: a Unix socket to the daemon)

It imports ``MODULE`` (the pool's warm module), sends the daemon one byte (ready), then
answers each request, one byte carrying three descriptors (SCM_RIGHTS: the read end of a new
worker's tasks pipe, the write end of its answers pipe and of its status pipe), with the pid
of the worker it forked onto them and a pidfd of it (SCM_RIGHTS), or minus the errno the
fork was refused with and no descriptor. The worker is the template's child (``os.fork``:
glibc's fork and every at-fork hook, Python's included, run as for any fork): the template
reaps it and writes its exit status (``STATUS``, as ``Popen.returncode``) on its status pipe;
the daemon signals it through its pidfd and sees it end by the pidfd becoming readable.

The template runs no task and reads no page (its one input is the daemon's socket), so no
state a page touched is in it, and each worker starts from that state. It is non-dumpable (a
subverted worker of the same uid can neither ptrace it nor read its memory, to plant code in
the workers to come; the workers inherit that), and it forks only while it has one thread: a
fork copies the calling thread alone, so a lock another thread held would stay held in the
worker, and confine's unshare refuses a threaded process. At the end of its socket (the daemon
retired it, or died) it forks no more, and exits once the last worker it made has ended.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import importlib
import os
import select
import signal
import socket
import struct
import sys
from pathlib import Path
from typing import NoReturn

PID = struct.Struct("!q")  # worker_template.PID: a worker's pid, or -errno
STATUS = struct.Struct("!q")  # worker_template.STATUS: a worker's exit status
READY = b"r"
THREADED_EXIT = 3  # the warm module started a thread: forking it would be unsound
PR_SET_DUMPABLE = 4  # <linux/prctl.h>
FD_MAX = (1 << 31) - 1  # closerange's bound: past any fs.nr_open (close_range(2) takes it at once)
# What every worker imports before its first task, besides the pool's module.
WORKER_MODULES = ("csp_web.infra.pool_worker", "csp_web.infra.answers", "csp_web.infra.confine")


def become_worker(control: socket.socket, tasks: int, answers: int) -> NoReturn:
    """In the child: keep only the worker's two pipes (as its stdin and stdout) and stderr,
    lead a session of its own (as ``start_new_session`` gives a fresh worker), then serve
    tasks as a fresh worker does (``pool_worker.serve`` confines it first). Never returns."""
    status = 1
    try:
        control.detach()  # fd 0 becomes the tasks pipe: the socket object must not close it
        os.setsid()
        os.dup2(tasks, 0)
        os.dup2(answers, 1)
        os.closerange(3, FD_MAX)  # the template's socket, pidfds, status pipes, these two
        from csp_web.infra import pool_worker

        status = pool_worker.serve()
    finally:
        os._exit(status)


def single_threaded() -> bool:
    """True when this process has one thread (native ones counted, from /proc)."""
    return len(os.listdir("/proc/self/task")) == 1


class Forks:
    """The workers this template forked and has not reaped: pidfd -> (pid, status pipe)."""

    def __init__(self, control: socket.socket) -> None:
        self.control = control
        self.children: dict[int, tuple[int, int]] = {}
        self.poller = select.poll()  # no descriptor of its own for a worker to inherit
        self.poller.register(control, select.POLLIN)

    def serve(self) -> int:
        """Fork a worker per request until the socket ends, relaying each exit; return (the
        exit status) once the socket ended and every worker is reaped."""
        serving = True
        while serving or self.children:
            for fd, _ in self.poller.poll():
                if fd in self.children:
                    self.relay_exit(fd)
                elif not self.answer():
                    if not single_threaded():
                        return THREADED_EXIT
                    serving = False
                    self.poller.unregister(self.control)
        return 0

    def answer(self) -> bool:
        """Answer one request on the socket; False at its end (or a request out of protocol,
        whose descriptors are closed: nothing more to serve)."""
        request, fds, _, _ = socket.recv_fds(self.control, 1, 3)
        if request != b"f" or len(fds) != 3 or not single_threaded():
            for fd in fds:
                os.close(fd)
            return False
        tasks, answers, status = fds
        try:
            pid = os.fork()
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            self.control.sendall(PID.pack(-(exc.errno or errno.EIO)))
            return True
        if pid == 0:
            become_worker(self.control, tasks, answers)
        os.close(tasks)
        os.close(answers)
        self.adopt(pid, status)
        return True

    def adopt(self, pid: int, status: int) -> None:
        """Watch the worker ``pid`` through a pidfd and send the daemon its pid and a pidfd;
        a worker whose pidfd cannot open (EMFILE) is killed, reaped, and refused."""
        try:
            pidfd = os.pidfd_open(pid)
        except OSError as exc:
            os.kill(pid, signal.SIGKILL)  # our child, not reaped: the pid is still its own
            os.waitpid(pid, 0)
            os.close(status)
            self.control.sendall(PID.pack(-(exc.errno or errno.EIO)))
            return
        self.children[pidfd] = (pid, status)
        self.poller.register(pidfd, select.POLLIN)
        socket.send_fds(self.control, [PID.pack(pid)], [pidfd])

    def relay_exit(self, pidfd: int) -> None:
        """Kill what is left of the process group of the worker whose ``pidfd`` turned
        readable, reap it and write its exit status on its status pipe (the daemon may have
        closed it: nothing to tell). Unreaped, the worker holds its pid, so its group's
        number names no one else's group: no reuse race, which a fresh worker's daemon has."""
        pid, status = self.children.pop(pidfd)
        self.poller.unregister(pidfd)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)  # it leads its group (become_worker's setsid)
        _, code = os.waitpid(pid, 0)
        with contextlib.suppress(OSError):
            os.write(status, STATUS.pack(os.waitstatus_to_exitcode(code)))
        os.close(status)
        os.close(pidfd)


def main() -> int:
    sys.path[0] = str(Path(__file__).resolve().parents[2])  # the packages, not this folder
    control = socket.socket(fileno=0)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        return 1  # a worker could ptrace the template: better fresh interpreters
    for module in (*WORKER_MODULES, sys.argv[1]):
        importlib.import_module(module)
    if not single_threaded():
        return THREADED_EXIT
    control.sendall(READY)
    return Forks(control).serve()


if __name__ == "__main__":
    raise SystemExit(main())
