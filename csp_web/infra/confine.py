"""What a worker process does to itself before it reads hostile input (pool_worker.py,
document_worker.py): standard library only, as both run as scripts and import little."""

from __future__ import annotations

import ctypes

CLONE_NEWUSER = 0x10000000  # <linux/sched.h>
CLONE_NEWNET = 0x40000000


def offline() -> bool:
    """Move this process into a network namespace of its own (no interface but a loopback
    that is down), through a user namespace of its own so no privilege is needed: a worker
    subverted by a hostile input reaches no host. False where the kernel refuses unprivileged
    user namespaces; the other bounds still hold there. Must run while the process has one
    thread (unshare(2) refuses CLONE_NEWUSER to a threaded process)."""
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0)
