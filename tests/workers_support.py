"""Tasks the worker-pool tests hand to a worker (``csp_web.infra.workers``). A worker imports
this module by name to unpickle a task, so it imports only the standard library."""

from __future__ import annotations

import ctypes
import fcntl
import os
import random  # seeded when imported: in a template, before it forks
import socket
import subprocess
import time


def spin() -> None:
    """CPU work that never ends, as a page that makes extraction loop for ever."""
    while True:
        pass


def announce_then_sleep(path: str) -> None:
    """Tell the test listening on the Unix socket ``path`` this worker's pid, then sleep:
    the test knows the task is running before it kills the worker."""
    with socket.socket(socket.AF_UNIX) as announcer:
        announcer.connect(path)
        announcer.sendall(str(os.getpid()).encode())
        time.sleep(3600)


def environment() -> dict[str, str]:
    return dict(os.environ)


def open_descriptors() -> list[str]:
    """What each open descriptor of this worker points at (sockets show as ``socket:[n]``)."""
    fds = os.listdir("/proc/self/fd")
    return [
        os.readlink(f"/proc/self/fd/{fd}") for fd in fds if os.path.exists(f"/proc/self/fd/{fd}")
    ]


def pipe_sizes() -> list[int]:
    """What each pipe this worker holds (its tasks' and its answers') can buffer."""
    sizes = []
    for fd in os.listdir("/proc/self/fd"):
        try:  # the listing's own descriptor is closed by now
            target = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:
            continue
        if target.startswith("pipe:"):
            sizes.append(fcntl.fcntl(int(fd), fcntl.F_GETPIPE_SZ))
    return sizes


def own_pid() -> int:
    return os.getpid()


class Payload:
    """An answer whose pickle runs a command where it is unpickled: what a subverted worker
    would send the daemon."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (f"touch {self.path}",)


def forged_answer(path: str) -> Payload:
    return Payload(path)


def bent_page() -> object:
    """A Page whose fields are not of their types, with an attribute it does not declare:
    what a subverted worker would answer to poison the cache."""
    from specialists.web.pages.loading import Page  # only in the tests that ask for it

    page = Page(url=["https://a.test/"], status=200, content_type="text/html", kind="html")  # type: ignore[arg-type]
    object.__setattr__(page, "markdown", 7)
    return page


def hoard() -> int:
    """Memory past a worker's address space, as a page that makes a parser grow without end."""
    return len(bytearray(4 << 30))


def error_of(act: str, where: str) -> str:
    """The class name of the error a worker meets trying ``act`` ("read" a file, "connect"
    to host:port, "write" a file) at ``where``; "" when it succeeds."""
    try:
        if act == "read":
            with open(where, "rb") as file:
                file.read()
        elif act == "connect":
            host, port = where.rsplit(":", 1)
            socket.create_connection((host, int(port)), timeout=5).close()
        else:
            with open(where, "wb") as file:
                file.write(b"planted")
    except OSError as exc:
        return type(exc).__name__
    return ""


def main_script() -> str:
    """The file name of the script this worker runs as (a forked worker: the template's)."""
    import __main__

    return os.path.basename(__main__.__file__)


def identity() -> tuple[str, int]:
    """(this worker's network namespace, 64 bits of its ``random``): what a fork must not
    share between workers."""
    return os.readlink("/proc/self/ns/net"), random.getrandbits(64)


def ptrace_error(pid: int) -> int:
    """The errno of PTRACE_ATTACH to ``pid`` from this worker (0: attached, then detached)."""
    libc = ctypes.CDLL(None, use_errno=True)
    ptrace_attach, ptrace_detach = 16, 17  # <sys/ptrace.h>
    if libc.ptrace(ptrace_attach, pid, None, None) == 0:
        libc.ptrace(ptrace_detach, pid, None, None)
        return 0
    return ctypes.get_errno()


def announce_then_wait(path: str) -> int:
    """Tell the test listening on the Unix socket ``path`` this worker's pid, wait for its
    one byte, then return the pid: the test acts while the task runs."""
    with socket.socket(socket.AF_UNIX) as announcer:
        announcer.connect(path)
        announcer.sendall(str(os.getpid()).encode())
        announcer.recv(1)
    return os.getpid()


def dumpable() -> int:
    """This worker's PR_GET_DUMPABLE (a forked worker inherits its template's)."""
    pr_get_dumpable = 3  # <linux/prctl.h>
    return int(ctypes.CDLL(None).prctl(pr_get_dumpable, 0, 0, 0, 0))


def identity_once_told(path: str) -> tuple[str, int]:
    """``identity`` once the test listening at ``path`` sends its byte (``announce_then_wait``):
    the test holds several workers alive at once."""
    announce_then_wait(path)
    return identity()


def parent_pid() -> int:
    """This worker's parent's pid (a forked worker's: its template's)."""
    return os.getppid()


def exit_now(status: int) -> None:
    """End this worker at once with ``status`` (no answer)."""
    os._exit(status)


def start_sleeper() -> int:
    """Start a ``sleep`` in this worker's process group and return its pid: left behind when
    the worker ends, unless the pool kills the group."""
    return subprocess.Popen(
        ["sleep", "1000"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
    ).pid


def exit_leaving_sleeper(path: str) -> None:
    """Start a ``sleep`` in this worker's process group, tell its pid to the test listening
    on the Unix socket ``path``, and end this worker at once (status 7)."""
    with socket.socket(socket.AF_UNIX) as announcer:
        announcer.connect(path)
        announcer.sendall(str(start_sleeper()).encode())
    os._exit(7)
