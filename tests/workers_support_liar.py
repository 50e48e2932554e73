"""A warm module that makes the template answer each fork with a pidfd of itself, not of
the worker it forked: a process that is not its child (only in the template)."""

from __future__ import annotations

import os

import __main__


def own_pidfd(pid: int, flags: int = 0, pidfd_open=os.pidfd_open) -> int:  # type: ignore[no-untyped-def]
    return int(pidfd_open(os.getpid(), flags))


if hasattr(__main__, "Forks"):
    os.pidfd_open = own_pidfd
