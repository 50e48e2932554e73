"""One worker process of the daemon's pool (``workers.py`` starts it).

    python pool_worker.py   < tasks (length, pickle)   > answers (length, pickle)

Run as a script, not as ``-m``: it imports nothing of the daemon's until a task names its
module (unpickling the task imports it, once per worker). Each task is the pickle of a
callable taking no argument; the answer is ``("ok", pickled value)`` or ``("raised",
(traceback text, pickled exception))``. The worker exits at the end of its input (the pool
closed it) and when the daemon's end of its answers closes (the daemon died, even by SIGKILL)
while it is busy. What a task prints goes to stderr, never into an answer.
"""

from __future__ import annotations

import importlib
import os
import pickle
import resource
import select
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


def warm(module: str) -> None:
    """The pool's first task for a new worker: import ``module`` (and what it imports)."""
    importlib.import_module(module)


def answer_of(task: Callable[[], object]) -> bytes:
    """The pickled outcome of ``task()``: its value, or the exception it raised (or met
    pickling the value)."""
    try:
        payload = pickle.dumps(task(), protocol=pickle.HIGHEST_PROTOCOL)
    except MemoryError:  # its heap may be left in pieces: a fresh worker takes its place
        os._exit(MEMORY_EXIT)
    except Exception as exc:  # the task's own error goes back to its caller
        text = traceback.format_exc(limit=-8)
        try:
            raised = pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # an exception that does not pickle: its traceback alone
            raised = b""
        return pickle.dumps(("raised", (text, raised)), protocol=pickle.HIGHEST_PROTOCOL)
    return pickle.dumps(("ok", payload), protocol=pickle.HIGHEST_PROTOCOL)


def read_frame(stream: BinaryIO) -> bytes | None:
    """The next length-prefixed frame of ``stream``, or None at its end."""
    head = stream.read(LENGTH.size)
    if len(head) < LENGTH.size:
        return None
    (length,) = LENGTH.unpack(head)
    body = stream.read(length)
    return body if len(body) == length else None


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
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a task's print goes to stderr, never into an answer
    die_with_daemon(answers.fileno())
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    tasks = sys.stdin.buffer
    while (request := read_frame(tasks)) is not None:
        answer = answer_of(pickle.loads(request))
        answers.write(LENGTH.pack(len(answer)) + answer)
        answers.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
