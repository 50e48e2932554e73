"""Tasks the worker-pool tests hand to a worker (``csp_web.infra.workers``). A worker imports
this module by name to unpickle a task, so it imports only the standard library."""

from __future__ import annotations

import fcntl
import os
import socket
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
