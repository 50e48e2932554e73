"""A warm module whose template is honest but slow to answer: each worker it forks exits at
once (as when confine fails in it) and is reaped before the daemon gets its pidfd, which then
reads ``Pid: -1`` (only in the template)."""

from __future__ import annotations

import os
import socket

import __main__


def adopt_reaped(forks: __main__.Forks, pid: int, status: int) -> None:
    pidfd = os.pidfd_open(pid)
    _, code = os.waitpid(pid, 0)
    os.write(status, __main__.STATUS.pack(os.waitstatus_to_exitcode(code)))
    os.close(status)
    socket.send_fds(forks.control, [__main__.PID.pack(pid)], [pidfd])
    os.close(pidfd)


if hasattr(__main__, "Forks"):
    __main__.become_worker = lambda control, tasks, answers: os._exit(1)
    __main__.Forks.adopt = adopt_reaped
