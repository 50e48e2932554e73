"""A span per task through OpenTelemetry's SDK (``otel:``, the ``csp-web[otel]`` extra).

Imported only when ``otel.enabled`` (``csp_web.app.tracing``). A span is named for its op
(``REQ:fetch IN:WEB``) and carries the op, the reply's status and its error code: never a
field's value, a detail or an ID, which may hold a secret or a URL with credentials. A
frame's valid TRACEPARENT makes its span a child of the caller's; a frame with none (or a
bad one, which its reply refuses) starts a trace of its own.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status as SpanStatus
from opentelemetry.trace.status import StatusCode

from csp_web.config import OtelConfig
from csp_web.core.api.trace import TraceContext
from protocol import ErrorCode, Reply, Status, Task, TraceParentError, parse_traceparent

_CODES = frozenset(ErrorCode)
SCOPE = "csp_web"  # the instrumentation scope's name


class OtelTracer:
    """``TaskTracer`` over an OpenTelemetry tracer; ``ops`` the (REQ, IN) pairs of the op
    table, the only names a span takes from a frame (any other REQ is a client's word)."""

    def __init__(self, tracer: trace.Tracer, ops: Iterable[tuple[str, str]]) -> None:
        self._tracer = tracer
        self._ops = frozenset(ops)

    def start(self, task: Task) -> OtelSpan:
        known = (task.req, task.domain) in self._ops
        if known:
            name = f"REQ:{task.req} IN:{task.domain}"
            attributes = {"csp.op": task.req, "csp.domain": task.domain}
        elif task.domain == "MEMORY":  # relayed to the Memory Specialist (SPEC M-3)
            name, attributes = "relay IN:MEMORY", {"csp.domain": "MEMORY"}
        else:
            name, attributes = "unknown_op", {}
        span = self._tracer.start_span(
            name, context=_parent(task), kind=SpanKind.SERVER, attributes=attributes
        )
        return OtelSpan(span)


class OtelSpan:
    """``TaskSpan`` over one OpenTelemetry span."""

    def __init__(self, span: trace.Span) -> None:
        self._span = span
        self._ended = False
        own = span.get_span_context()
        self.context = TraceContext(
            f"{own.trace_id:032x}", f"{int(own.trace_flags):02x}", f"{own.span_id:016x}"
        )

    def end(self, reply: Reply | None) -> None:
        if self._ended:
            return
        self._ended = True
        if reply is not None:
            self._span.set_attribute("csp.status", str(reply.status))
        if reply is not None and reply.status is Status.FAIL:
            code = (reply.get("ERROR") or "").partition(":")[0]
            code = code if code in _CODES else "other"  # a relayed reply's own word
            self._span.set_attribute("csp.error_code", code)
            self._span.set_status(SpanStatus(StatusCode.ERROR, code))
        self._span.end()


def _parent(task: Task) -> Context:
    """The context ``task``'s span starts in: under its TRACEPARENT's remote span when it
    carries exactly one valid value, else empty (a new trace)."""
    values = task.get_all("TRACEPARENT")
    if len(values) != 1:
        return Context()
    try:
        parent = parse_traceparent(values[0])
    except TraceParentError:
        return Context()
    remote = SpanContext(
        trace_id=int(parent.trace_id, 16),
        span_id=int(parent.parent_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(int(parent.flags, 16)),
    )
    return trace.set_span_in_context(NonRecordingSpan(remote), Context())


def open_provider(config: OtelConfig) -> TracerProvider:
    """A provider exporting in batches (a thread of the SDK's: the loop never waits on an
    export) to the configured exporter; the caller shuts it down."""
    provider = TracerProvider(resource=Resource.create({"service.name": "csp-web"}))
    provider.add_span_processor(BatchSpanProcessor(_exporter(config)))
    return provider


def _exporter(config: OtelConfig) -> SpanExporter:
    if config.exporter == "console":  # stderr: stdout is the wire
        return ConsoleSpanExporter(out=sys.stderr, formatter=_one_line)
    # Checked installed at start (csp_web.app.tracing.check_tracing).
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=config.endpoint)


def _one_line(span: ReadableSpan) -> str:
    text: str = span.to_json(indent=None)
    return text + "\n"
