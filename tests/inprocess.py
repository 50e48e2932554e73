"""The csp-web command run in this process (``csp_web.app.main.main``), so the coverage of
its code is measured without following a subprocess.

``main`` sets up logging as the command does (the root logger's handlers and level); that is
undone after each call, so the tests after it log as before.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import trio

from csp_web.app.main import main


@contextmanager
def kept_logging() -> Iterator[None]:
    """The root logger's handlers and level as they were before the block."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def run_main(argv: Sequence[str]) -> int:
    """``csp-web ARGV...``'s exit code, run here (not inside a trio run: it starts its own)."""
    with kept_logging():
        return main(list(argv))


async def run_main_in_thread(argv: Sequence[str], *, timeout_s: float = 60.0) -> int:
    """``run_main`` from a trio test: in a worker thread (a thread runs its own trio), the
    wait bounded by ``timeout_s``."""
    with trio.fail_after(timeout_s):
        return await trio.to_thread.run_sync(run_main, argv, abandon_on_cancel=True)
