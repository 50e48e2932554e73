"""The guard's running settings: the one current ``GuardConfig`` a reload swaps."""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

from csp_web.config.guard import GuardConfig

# The settings of the operation running in this task (GuardSettings.operation).
_OPERATION: contextvars.ContextVar[GuardConfig] = contextvars.ContextVar("guard_operation")


class GuardSettings:
    """The one current ``GuardConfig`` that the guarded client and its connection backend
    both read. A reload swaps ``current``; an operation takes the settings current when it
    starts and keeps them to its end (every hop, connect and cap), so a reload applies to the
    operations that start after it and never changes one half-way."""

    def __init__(self, config: GuardConfig) -> None:
        self.current = config

    @contextmanager
    def operation(self) -> Iterator[GuardConfig]:
        """Run one operation (in this task) under the settings current now."""
        token = _OPERATION.set(self.current)
        try:
            yield self.current
        finally:
            _OPERATION.reset(token)

    def in_effect(self) -> GuardConfig:
        """The running operation's settings; outside one, the current settings."""
        return _OPERATION.get(self.current)
