"""The worker process a document reader runs in (``documents.read_document`` starts it).

    python document_worker.py < header-line + document bytes > Document as JSON

Run as a script, not as ``-m``: importing ``specialists.web`` would load the whole specialist
(about 1 s); this imports only the one reader module it is told to. Before it reads the
document it lowers its own address space (RLIMIT_AS) and CPU time (RLIMIT_CPU, past which the
kernel sends SIGXCPU, then SIGKILL) to the bounds the header names, so a hostile file meets
those limits here and never in the daemon; it may write no file (RLIMIT_FSIZE 0), has a
network namespace of its own (no route out) where the kernel allows an unprivileged one, and
exits when the daemon's end of its stdout closes (the daemon died). Its answer is the
Document as JSON on stdout (exit 0), or ``{"code", "detail"}`` (exit 3) for an ``Unreadable``
file, a MemoryError or a RecursionError (a file nested deeper than a converter walks:
``<format>:too_deep``).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import resource
import select
import signal
import sys
import threading
from pathlib import Path
from typing import Any

HEADER_MAX_BYTES = 65_536
REPORTED_EXIT = 3  # documents.REPORTED_EXIT
ORPHANED_EXIT = 4  # nobody reads the answer: the daemon is gone


def bound(header: dict[str, Any]) -> None:
    """Lower this process's address space and CPU time to the header's bounds, and let it
    write no file: a reader does no I/O, so a file that makes one write (a native bug) gets
    EFBIG (SIGXFSZ ignored: the write fails, the worker goes on) and never a byte on disk."""
    memory, cpu = int(header["memory_bytes"]), int(header["cpu_s"])
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))


def die_with_reader() -> None:
    """End this process when the daemon's end of stdout is gone (the daemon died, even by
    SIGKILL, or closed it): a thread waits for the pipe's POLLERR. Not PR_SET_PDEATHSIG: the
    daemon forks workers from trio's worker threads, and the kernel sends that signal when
    the forking *thread* retires (issue 21), which would kill a worker mid-read."""

    def watch() -> None:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)  # POLLERR and POLLHUP are always reported
        while True:
            for _, events in poller.poll():
                if events & (select.POLLERR | select.POLLHUP | select.POLLNVAL):
                    os._exit(ORPHANED_EXIT)

    threading.Thread(target=watch, name="die_with_reader", daemon=True).start()


def read(header: dict[str, Any], data: bytes) -> tuple[int, dict[str, Any]]:
    """The exit status and the JSON-able answer of the reader the header names over ``data``."""
    from specialists.formats import Limits, Unreadable

    module, function = str(header["reader"]).split(":")
    reader = getattr(importlib.import_module(f"specialists.formats.{module}"), function)
    try:
        document = reader(data, Limits(**header["limits"]))
    except Unreadable as exc:
        return REPORTED_EXIT, {"code": exc.code, "detail": exc.detail}
    except MemoryError:
        return REPORTED_EXIT, {"code": "too_large", "detail": "reader_memory"}
    except RecursionError:  # elements nested past what a converter walks (ET.tostring, ...)
        kind = function.removeprefix("read_")
        return REPORTED_EXIT, {"code": "corrupt_document", "detail": f"{kind}:too_deep"}
    return 0, dataclasses.asdict(document)


def main() -> int:
    sys.path[0] = str(Path(__file__).resolve().parents[3])  # the packages, not this folder
    from csp_web.infra.confine import offline  # once sys.path names this checkout

    offline()
    die_with_reader()
    header = json.loads(sys.stdin.buffer.readline(HEADER_MAX_BYTES))
    bound(header)
    status, answer = read(header, sys.stdin.buffer.read())
    # UTF-8, a lone surrogate a broken font map may yield replaced rather than a crash.
    sys.stdout.buffer.write(json.dumps(answer, ensure_ascii=False).encode("utf-8", "replace"))
    return status


if __name__ == "__main__":
    raise SystemExit(main())
