"""One worker process of the daemon's pool (``workers.py`` starts it).

    python pool_worker.py   < tasks (length, pickle)   > answers (length, JSON)

Run as a script, not as ``-m``: it imports nothing of the daemon's until a task names its
module (unpickling the task imports it, once per worker). Each task is the pickle of a
callable taking no argument; the answer is its value or the exception it raised, as JSON
(``answers.py``: no shared references, so its size bounds what it becomes in the daemon).
The worker exits at the end of its input (the pool closed it) and when the daemon's end
of its answers closes (the daemon died, even by SIGKILL) while it is busy. What a task
prints goes to stderr, never into an answer.

Before its first task it confines itself (``confine``): a network namespace of its own, no
file writes, no core dump, a bounded address space, and CPU time bounded per task (the
backstop for a task stuck in a C call that holds the GIL after the daemon died, when the
watching thread cannot run). Not PR_SET_PDEATHSIG: trio forks workers from its worker
threads, and the kernel sends that signal when the forking *thread* retires (issue 21).
"""

from __future__ import annotations

import importlib
import os
import pickle
import resource
import select
import signal
import struct
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

LENGTH = struct.Struct("!Q")  # workers._LENGTH
ORPHANED_EXIT = 4  # nobody reads the answers: the daemon is gone
MEMORY_EXIT = 5  # a task ran out of the address space below: workers.py says "memory"
# A worker's address space (RLIMIT_AS): a hostile page that makes a parser grow without end
# meets it here, not the kernel's OOM killer choosing the daemon. Twice the document
# reader's default (fetch.reader_memory_bytes): a worker holds the whole web specialist.
MEMORY_BYTES = 2 << 30
# CPU seconds one task may use (RLIMIT_CPU's soft limit, moved before each task; SIGXCPU past
# it): far past any deadline the pool gives a task, so it only ends an orphan's runaway C call.
TASK_CPU_S = 120


def warm(module: str) -> None:
    """The pool's first task for a new worker: import ``module`` (and what it imports)."""
    importlib.import_module(module)


def answer_of(task: Callable[[], object]) -> bytes:
    """The outcome of ``task()`` as an answer (``answers.py``, JSON): its value, or the
    exception it raised (or met encoding the value)."""
    from csp_web.infra import answers  # once sys.path names this checkout

    try:
        return answers.encode_value(task())
    except MemoryError:  # its heap may be left in pieces: a fresh worker takes its place
        os._exit(MEMORY_EXIT)
    except Exception as exc:  # the task's own error goes back to its caller
        return answers.encode_raised(exc, traceback.format_exc(limit=-8))


def read_frame(stream: BinaryIO) -> bytes | None:
    """The next length-prefixed frame of ``stream``, or None at its end."""
    head = stream.read(LENGTH.size)
    if len(head) < LENGTH.size:
        return None
    (length,) = LENGTH.unpack(head)
    body = stream.read(length)
    return body if len(body) == length else None


def confine() -> None:
    """Bound this process before it reads hostile input: no network (``offline``), no file
    written (RLIMIT_FSIZE 0, SIGXFSZ ignored: the write fails with EFBIG), no core dump, an
    address space of ``MEMORY_BYTES``. Must run while the process has one thread."""
    from csp_web.infra.confine import offline  # once sys.path names this checkout

    offline()
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))


def allow_cpu(seconds: int) -> None:
    """Let the next task use ``seconds`` more of CPU before the kernel's SIGXCPU ends it."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    used = int(usage.ru_utime + usage.ru_stime) + 1
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    soft = used + seconds
    resource.setrlimit(
        resource.RLIMIT_CPU, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard)
    )


def die_with_daemon(answers: int) -> None:
    """End this process when the daemon's end of ``answers`` is gone: a thread waits for the
    pipe's POLLERR (as document_worker.py; not PR_SET_PDEATHSIG, which fires when the forking
    *thread* of the daemon retires)."""

    def watch() -> None:
        poller = select.poll()
        poller.register(answers, 0)  # POLLERR and POLLHUP are always reported
        while True:
            for _, events in poller.poll():
                if events & (select.POLLERR | select.POLLHUP | select.POLLNVAL):
                    os._exit(ORPHANED_EXIT)

    threading.Thread(target=watch, name="die_with_daemon", daemon=True).start()


def main() -> int:
    sys.path[0] = str(Path(__file__).resolve().parents[2])  # the packages, not this folder
    return serve()


def serve() -> int:
    """Confine this process, then answer the tasks of stdin on stdout until stdin ends (a
    fresh worker's ``main``, and each worker a template forks: pool_template.py). Must run
    while the process has one thread."""
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a task's print goes to stderr, never into an answer
    confine()
    die_with_daemon(answers.fileno())
    tasks = sys.stdin.buffer
    while (request := read_frame(tasks)) is not None:
        allow_cpu(TASK_CPU_S)
        answer = answer_of(pickle.loads(request))
        answers.write(LENGTH.pack(len(answer)) + answer)
        answers.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
