"""What a shutdown tells the connections (SPEC R-1): stop reading, and when the work still
running must end (the grace period), with counts of how the tasks that met it were answered."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import trio

from csp_web.core.api.deadlines import GracePeriod


class Shutdown:
    """Tells every connection to stop reading; in-flight frames still finish and reply.

    ``cut_at(deadline)`` bounds the work still running: at the deadline each task's work is
    cancelled and the task answered ``shutting_down`` (by the dispatcher, in the task's one
    cancel scope: ``grace``). The counters say what happened to the tasks that met the
    shutdown: ``answered`` finished with their own reply, ``cut`` were cancelled by the grace
    period, ``refused`` were received but never started. ``stop_now`` (a second signal) ends
    the grace period at once.
    """

    def __init__(self) -> None:
        self.begun = trio.Event()
        self.grace = GracePeriod()
        self._scopes: set[trio.CancelScope] = set()
        self.answered = self.refused = 0
        self._closing: tuple[trio.CancelScope, float] | None = None

    @property
    def cut(self) -> int:
        return self.grace.cut

    def begin(self) -> None:
        self.begun.set()
        for scope in self._scopes:
            scope.cancel()

    def cut_at(self, deadline: float) -> None:
        """Cancel every task's work (running or yet to start) at ``deadline`` (or earlier,
        if an earlier call said so), and end the connections ``close_after`` gave one write
        limit later, to send the replies of that work."""
        self.grace.cut_at(deadline)
        if self._closing is not None:
            scope, after_s = self._closing
            scope.deadline = min(scope.deadline, self.grace.deadline + after_s)

    def close_after(self, connections: trio.CancelScope, write_timeout_s: float) -> None:
        """``connections`` ends ``write_timeout_s`` after the grace period does."""
        self._closing = (connections, write_timeout_s)

    def stop_now(self) -> None:
        """A second signal: the grace period is over now; the work it cuts is answered
        ``shutting_down`` and counted as any cut (the daemon exits 4)."""
        self.begin()
        self.cut_at(trio.current_time())

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
