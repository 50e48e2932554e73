"""``otel:``: the tracer a daemon's dispatcher gets, a span per task (docs/metrics.md).

Off (the default), nothing here imports OpenTelemetry and the dispatcher gets None: its one
check per task. On, the packages are checked before the daemon starts, so a missing extra is
one line at start (``csp-web: config: ...``), never a task's failure.
"""

from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager

import trio

from csp_web.config import ConfigError, OtelConfig
from csp_web.core.api.extras import install_hint
from csp_web.core.api.trace import TaskTracer

SDK = "opentelemetry.sdk.trace"
OTLP_EXPORTER = "opentelemetry.exporter.otlp.proto.http.trace_exporter"


def check_tracing(config: OtelConfig) -> None:
    """Raise ConfigError when ``config`` enables tracing without its packages installed."""
    if not config.enabled:
        return
    if not _installed(SDK):  # the SDK, not only the API beside it (one namespace package)
        raise ConfigError(f"otel.enabled is true: {install_hint('otel')}")
    if config.exporter == "otlp" and not _installed(OTLP_EXPORTER):
        raise ConfigError(
            "otel.exporter is otlp: opentelemetry-exporter-otlp-proto-http "
            "(install it, or use exporter: console)"
        )


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported (found, not imported: ``extras.installed``)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent missing or not a package; a None entry
        return False


@asynccontextmanager
async def open_tracer(
    config: OtelConfig, ops: Iterable[tuple[str, str]]
) -> AsyncIterator[TaskTracer | None]:
    """The tracer of a daemon serving the (REQ, IN) ``ops``, or None when tracing is off.
    Raises ConfigError as ``check_tracing``. On exit the spans still queued are exported
    (off the loop) and the exporter is shut down."""
    check_tracing(config)
    if not config.enabled:
        yield None
        return
    from csp_web.infra.otel import SCOPE, OtelTracer, open_provider

    provider = open_provider(config)
    try:
        yield OtelTracer(provider.get_tracer(SCOPE), ops)
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(provider.shutdown)
