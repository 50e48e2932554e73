"""The threads every command is forked from: they live as long as the daemon's process.

bubblewrap's ``--die-with-parent`` is ``PR_SET_PDEATHSIG``, and the kernel sends that signal
when the *thread* that forked the process exits, not the process (prctl(2): "the 'parent' in
this case is considered to be the thread that created this process"). trio's worker threads
retire after 10 s idle, so every sandbox forked from one was SIGKILLed 10 s after it started
on a quiet daemon (issue 21 §1). These threads never retire: they end only with the process,
which is when the sandboxes must die (``kill -9`` included).

A few threads rather than one, so that one ``exec`` stuck in the kernel (a binary on a hung
mount) does not hold up every later spawn; a spawn takes a few ms (bench/exec_spawn.py).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from typing import TypeVar

import outcome
import trio

T = TypeVar("T")

_THREADS = 4
_jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
_started: list[threading.Thread] = []
_start_lock = threading.Lock()


async def run_in_spawner(fn: Callable[[], T]) -> T:
    """Run ``fn`` (a fork of a child that must outlive this call) on a spawner thread and
    return or raise what it did.

    Not cancellable: once ``fn`` is queued the caller waits for its outcome, so a child it
    started is never lost to a cancellation (as ``trio.to_thread.run_sync`` by default); the
    cancellation is delivered at the caller's next checkpoint.
    """
    _start_threads()
    token = trio.lowlevel.current_trio_token()
    done = trio.Event()
    box: list[outcome.Outcome[T]] = []

    def job() -> None:
        box.append(outcome.capture(fn))
        token.run_sync_soon(done.set)

    _jobs.put(job)
    with trio.CancelScope(shield=True):
        await done.wait()
    return box[0].unwrap()


def _start_threads() -> None:
    with _start_lock:
        while len(_started) < _THREADS:
            thread = threading.Thread(target=_serve, name="csp-spawner", daemon=True)
            thread.start()
            _started.append(thread)


def _serve() -> None:
    """Run jobs until the process ends; a job's own errors are in its outcome, and nothing
    here may end the thread early (its end would kill what it forked)."""
    while True:
        job = _jobs.get()
        with contextlib.suppress(trio.RunFinishedError):  # the caller's run is gone
            job()
