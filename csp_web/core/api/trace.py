"""Trace context, as the core sees it (SPEC D-3): what a task's calls to configured APIs pass
on, and the tracer the dispatcher asks for a span per task when ``otel.enabled``.

The core never imports OpenTelemetry: ``csp_web.infra.otel`` implements ``TaskTracer`` and the
composition root hands it in (``csp_web.app.tracing``), so a daemon without ``otel`` loads none
of it.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Protocol

from protocol import Reply, Task, TraceParent, parse_traceparent


@dataclass(frozen=True, slots=True)
class TraceContext:
    """The trace a task's calls to configured APIs join: its trace id and flags, and the
    task's own span id when the daemon traces it."""

    trace_id: str
    flags: str
    span_id: str | None = None

    @classmethod
    def joining(cls, parent: TraceParent) -> TraceContext:
        """The context of an untraced task whose frame carried ``parent`` (TRACEPARENT)."""
        return cls(parent.trace_id, parent.flags)

    def traceparent(self) -> str:
        """The ``traceparent`` header of one outgoing call: this trace, parented on the
        task's span, else on a fresh random id (W3C: a new parent id per request sent)."""
        parent = self.span_id or f"{secrets.randbits(64) or 1:016x}"  # never all zero
        return f"00-{self.trace_id}-{parent}-{self.flags}"


def frame_trace(task: Task) -> TraceContext | None:
    """The trace ``task``'s TRACEPARENT names, if it carries one (already validated: D-3)."""
    value = task.get("TRACEPARENT")
    return None if value is None else TraceContext.joining(parse_traceparent(value))


class TaskSpan(Protocol):
    """One task's span, open from its frame's start to its reply."""

    @property
    def context(self) -> TraceContext: ...

    def end(self, reply: Reply | None) -> None:
        """Close the span with ``reply``'s status and error code (None: the task was
        cancelled unanswered); a span already ended stays as it was."""


class TaskTracer(Protocol):
    """Opens a span per task, parented on its TRACEPARENT when it carries a valid one."""

    def start(self, task: Task) -> TaskSpan: ...
