"""The template process of a worker pool (``worker_template.py`` starts it): warmed once, it
forks each fresh worker the pool asks for, so a worker's start costs a fork, not an
interpreter and the web specialist's imports.

    python pool_template.py MODULE      (fd 0: a Unix socket to the daemon)

It imports ``MODULE`` (the pool's warm module), sends the daemon one byte (ready), then
answers each request, one byte carrying two descriptors (SCM_RIGHTS: the read end of a new
worker's tasks pipe, the write end of its answers pipe), with the pid of the worker it cloned
onto them, or minus the errno the kernel refused the clone with. The clone is made with
CLONE_PARENT: the worker is the *daemon's* child, so the daemon reaps it, reads its exit
status and kills it as a worker it started itself, and the template's death orphans nothing.

The template runs no task and reads no page (its one input is the daemon's socket), so no
state a page touched is in it, and each worker starts from that state. It is non-dumpable (a
subverted worker of the same uid can neither ptrace it nor read its memory, to plant code in
the workers to come; the workers inherit that), and it forks only while it has one thread: a
fork copies the calling thread alone, so a lock another thread held would stay held in the
worker, and confine's unshare refuses a threaded process. It exits at the end of its socket
(the daemon closed it, or died).
"""

from __future__ import annotations

import ctypes
import importlib
import os
import platform
import signal
import socket
import struct
import sys
from pathlib import Path
from typing import NoReturn

PID = struct.Struct("!q")  # worker_template.PID: a worker's pid, or -errno
READY = b"r"
THREADED_EXIT = 3  # the warm module started a thread: forking it would be unsound
CLONE_PARENT = 0x00008000  # <linux/sched.h>
# clone(2)'s number, <asm/unistd.h>: it differs per architecture; elsewhere the template exits
# and the pool starts fresh interpreters.
SYS_CLONE = {"x86_64": 56, "aarch64": 220}
PR_SET_DUMPABLE = 4  # <linux/prctl.h>
MAX_FD = 1 << 20
# What every worker imports before its first task, besides the pool's module.
WORKER_MODULES = ("csp_web.infra.pool_worker", "csp_web.infra.answers", "csp_web.infra.confine")

_python = ctypes.pythonapi  # PyDLL: its calls keep the GIL, as os.fork does around fork()
_libc = ctypes.PyDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def clone_for_daemon() -> int:
    """``os.fork()``, but the child is this process's parent's (CLONE_PARENT): 0 in the
    child, its pid here. Python's fork hooks run on both sides as for os.fork (the child's
    reseed ``random``). Raises OSError when the kernel refuses (EAGAIN, ENOMEM), KeyError on
    an architecture not in ``SYS_CLONE``. Unlike glibc's fork(), the raw call leaves the
    child's glibc thread record naming the template's thread id: glibc signals its own thread
    by gettid() and a mutex's owner only needs to be consistent within the child, so nothing a
    worker runs is misled (os.fork() offers no CLONE_PARENT)."""
    number = SYS_CLONE[platform.machine()]
    flags = ctypes.c_long(CLONE_PARENT | signal.SIGCHLD)
    _python.PyOS_BeforeFork()
    pid = int(_libc.syscall(ctypes.c_long(number), flags, 0, 0, 0, 0))
    if pid == 0:
        _python.PyOS_AfterFork_Child()
        return 0
    _python.PyOS_AfterFork_Parent()
    if pid < 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))
    return pid


def become_worker(control: socket.socket, tasks: int, answers: int) -> NoReturn:
    """In the clone: keep only the worker's two pipes (as its stdin and stdout) and stderr, lead
    a session of its own (as ``start_new_session`` gives a fresh worker), then serve tasks as
    a fresh worker does (``pool_worker.serve`` confines it first). Never returns."""
    status = 1
    try:
        control.detach()  # fd 0 becomes the tasks pipe: the socket object must not close it
        os.setsid()
        os.dup2(tasks, 0)
        os.dup2(answers, 1)
        os.closerange(3, MAX_FD)  # the template's own descriptors and the two received
        from csp_web.infra import pool_worker

        status = pool_worker.serve()
    finally:
        os._exit(status)


def single_threaded() -> bool:
    """True when this process has one thread (native ones counted, from /proc)."""
    return len(os.listdir("/proc/self/task")) == 1


def serve_forks(control: socket.socket) -> int:
    """Clone a worker for each request on ``control`` until it ends; the exit status."""
    while True:
        request, fds, _, _ = socket.recv_fds(control, 1, 2)
        if request != b"f" or len(fds) != 2:
            return 0  # the daemon closed the socket (or broke the protocol: nothing to serve)
        if not single_threaded():
            return THREADED_EXIT
        try:
            pid = clone_for_daemon()
        except OSError as exc:
            pid = -(exc.errno or 1)
        if pid == 0:
            become_worker(control, *fds)
        for fd in fds:
            os.close(fd)
        control.sendall(PID.pack(pid))


def main() -> int:
    sys.path[0] = str(Path(__file__).resolve().parents[2])  # the packages, not this folder
    control = socket.socket(fileno=0)
    if platform.machine() not in SYS_CLONE:
        return 1  # no clone number known here: the pool starts fresh interpreters
    if _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        return 1  # a worker could ptrace the template: better fresh interpreters
    for module in (*WORKER_MODULES, sys.argv[1]):
        importlib.import_module(module)
    if not single_threaded():
        return THREADED_EXIT
    control.sendall(READY)
    return serve_forks(control)


if __name__ == "__main__":
    raise SystemExit(main())
