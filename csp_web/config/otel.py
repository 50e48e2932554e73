"""The ``otel:`` section: OpenTelemetry traces of tasks, a span per task (docs/metrics.md).

Off by default: tracing needs the ``csp-web[otel]`` extra, and the OTLP exporter its own
package, which a daemon checks at start (``csp_web.app.tracing``), never on a task's path.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class OtelConfig:
    # A span per task (op, status, error code; never a field's value), parented on the
    # frame's TRACEPARENT. Needs csp-web[otel]; off: OpenTelemetry is never imported.
    enabled: bool = False
    # console: each span as JSON on stderr (stdout is the wire); otlp: OTLP over HTTP, with
    # opentelemetry-exporter-otlp-proto-http installed (the extra does not pull it in).
    exporter: Literal["console", "otlp"] = "console"
    # otlp only: the collector's traces URL (http:// or https://, no user:password: it
    # would be logged); null: the exporter's own default (OTEL_EXPORTER_OTLP_* variables,
    # else http://localhost:4318/v1/traces).
    endpoint: str | None = None

    def __post_init__(self) -> None:
        if self.endpoint is None:
            return
        if self.exporter != "otlp":
            raise ValueError("endpoint: only with exporter otlp")
        parts = urllib.parse.urlsplit(self.endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("endpoint: expected an http:// or https:// URL")
        if parts.username is not None or parts.password is not None:
            raise ValueError("endpoint: no credentials in the URL (use OTEL_EXPORTER_OTLP_HEADERS)")
