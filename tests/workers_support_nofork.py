"""A warm module that makes the template's forks fail with EPERM, as a seccomp filter that
forbids them would (only in the template: a worker's ``__main__`` is pool_worker.py)."""

from __future__ import annotations

import errno
import os

import __main__


def refuse() -> int:
    raise OSError(errno.EPERM, "refused by the test")


if hasattr(__main__, "Forks"):
    os.fork = refuse
elif hasattr(__main__, "clone_for_daemon"):  # the raw clone this replaced
    __main__.clone_for_daemon = refuse
