"""A search backend's circuit breaker (state kept in ``SearchServices.breakers``)."""

from __future__ import annotations

import trio


class Breaker:
    """One backend's circuit: closed until ``failures`` consecutive failures, then open for
    ``reset_s``, then half-open: one probe call goes through, and its outcome closes or
    re-opens the circuit. Times are trio's, so MockClock drives it in tests."""

    def __init__(self, failures: int, reset_s: float) -> None:
        self.threshold = failures
        self.reset_s = reset_s
        self.failures = 0
        self.opened_at: float | None = None
        self.probing = False

    @property
    def state(self) -> str:
        """``closed``, ``open`` or ``half_open``."""
        if self.opened_at is None:
            return "closed"
        if self.probing or trio.current_time() >= self.opened_at + self.reset_s:
            return "half_open"
        return "open"

    def admit(self) -> bool | None:
        """None when the call may not go; True when it goes as the half-open probe."""
        if self.opened_at is None:
            return False
        if self.probing or trio.current_time() < self.opened_at + self.reset_s:
            return None
        self.probing = True
        return True

    def settle(self, probe: bool, ok: bool | None) -> None:
        """Record a call's outcome; ``ok`` None means it ended without a verdict."""
        if probe:
            self.probing = False
        if ok is None:
            return
        if ok:
            self.failures, self.opened_at = 0, None
            return
        self.failures += 1
        if probe or self.failures >= self.threshold:
            self.opened_at = trio.current_time()
