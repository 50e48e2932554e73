"""Restart delays for a crashing server: exponential, capped, forgiven after a healthy run."""

from __future__ import annotations


class Backoff:
    """Delays that double from ``initial_s`` up to ``max_s`` on each consecutive failure.

    A connection that stayed up for ``reset_after_s`` counts as healthy, and the next delay
    starts again from ``initial_s`` (Kubernetes' CrashLoopBackOff rule): one crash a day
    never waits as long as a server that crashes on every start.
    """

    def __init__(self, *, initial_s: float, max_s: float, reset_after_s: float) -> None:
        self._initial_s = initial_s
        self._max_s = max_s
        self._reset_after_s = reset_after_s
        self._next_s = initial_s

    def next_delay(self, ran_s: float) -> float:
        """The delay before the next start, given how long the last connection ran."""
        if ran_s >= self._reset_after_s:
            self._next_s = self._initial_s
        delay = self._next_s
        self._next_s = min(self._next_s * 2, self._max_s)
        return delay
