"""A warm module that makes the template die right after each fork, before it answers: the
worker exists, the daemon never hears of it (only in the template)."""

from __future__ import annotations

import functools
import os
import signal
from collections.abc import Callable

import __main__


def fork_then_die(fork: Callable[[], int]) -> int:
    pid = fork()
    if pid:
        os.kill(os.getpid(), signal.SIGKILL)
    return pid


if hasattr(__main__, "Forks"):
    os.fork = functools.partial(fork_then_die, os.fork)
elif hasattr(__main__, "clone_for_daemon"):  # the raw clone this replaced
    __main__.clone_for_daemon = functools.partial(fork_then_die, __main__.clone_for_daemon)
