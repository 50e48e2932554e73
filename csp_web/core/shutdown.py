"""What a shutdown tells the connections (SPEC R-1): stop reading, and when the work still
running must end (the grace period), with counts of how the tasks that met it were answered."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import trio

from csp_web.core.deadlines import GracePeriod


class Shutdown:
    """Tells every connection to stop reading; in-flight frames still finish and reply.

    ``cut_at(deadline)`` bounds the work still running: at the deadline each task's work is
    cancelled and the task answered ``shutting_down`` (by the dispatcher, in the task's one
    cancel scope: ``grace``). The counters say what happened to the tasks that met the
    shutdown: ``answered`` finished with their own reply, ``cut`` were cancelled by the grace
    period, ``refused`` were received but never started.
    """

    def __init__(self) -> None:
        self.begun = trio.Event()
        self.grace = GracePeriod()
        self._scopes: set[trio.CancelScope] = set()
        self.answered = self.refused = 0

    @property
    def cut(self) -> int:
        return self.grace.cut

    def begin(self) -> None:
        self.begun.set()
        for scope in self._scopes:
            scope.cancel()

    def cut_at(self, deadline: float) -> None:
        """Cancel every task's work (running or yet to start) at ``deadline``."""
        self.grace.cut_at(deadline)

    @contextmanager
    def reader_scope(self) -> Iterator[None]:
        with trio.CancelScope() as scope:
            if self.begun.is_set():
                scope.cancel()
            self._scopes.add(scope)
            try:
                yield
            finally:
                self._scopes.discard(scope)
