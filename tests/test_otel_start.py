"""``otel:``: its strict settings, the start-time checks of its packages, and what a daemon
exports (console on stderr, OTLP to a local collector); off, OpenTelemetry is never imported."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from csp_web.app.catalog import config_from_mapping
from csp_web.app.tracing import OTLP_EXPORTER, SDK, check_tracing, open_tracer
from csp_web.config import ConfigError, OtelConfig
from protocol import Task

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PING = f"TASK REQ:ping IN:SYS OUT:PONG\nTRACEPARENT 00-{TRACE}-00f067aa0ba902b7-01\n\n"
PONG = "STATUS OK\nSCOPE [sys]\nDATA pong\n\n"


@pytest.mark.parametrize(
    ("otel", "message"),
    [
        ({"enabled": "yes"}, r"^otel\.enabled: expected bool$"),
        ({"exporter": "jaeger"}, r"^otel\.exporter: expected one of console, otlp$"),
        ({"sampler": 1}, r"^otel\.sampler: unknown key$"),
        ({"endpoint": "http://c.test/v1/traces"}, r"^otel: endpoint: only with exporter otlp$"),
        (
            {"exporter": "otlp", "endpoint": "ftp://c.test/"},
            r"^otel: endpoint: expected an http:// or https:// URL$",
        ),
        ({"exporter": "otlp", "endpoint": "http:///v1"}, r"expected an http:// or https:// URL"),
        (
            {"exporter": "otlp", "endpoint": "https://user:pw@c.test/v1/traces"},
            r"^otel: endpoint: no credentials in the URL",
        ),
        ({"exporter": "otlp", "endpoint": "https://user@c.test/"}, r"no credentials in the URL"),
    ],
)
def test_a_bad_otel_setting_is_a_config_error_naming_it(
    otel: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        config_from_mapping({"otel": otel})


def test_otel_is_off_by_default_and_an_otlp_endpoint_is_kept() -> None:
    assert config_from_mapping({}).otel == OtelConfig(enabled=False, exporter="console")
    given = {"enabled": True, "exporter": "otlp", "endpoint": "https://c.test:4318/v1/traces"}
    assert config_from_mapping({"otel": given}).otel == OtelConfig(
        True, "otlp", "https://c.test:4318/v1/traces"
    )


def _config(tmp_path: Path, otel: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(f"daemon:\n  state_dir: {tmp_path / 'state'}\notel:\n{otel}", "utf-8")
    return str(path)


def _serve(
    tmp_path: Path, otel: str, *, flags: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run(
        [sys.executable, *flags, "-m", "csp_web", "serve", "--config", _config(tmp_path, otel)],
        input=PING,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


# Runs the csp-web command with the modules under a prefix made unimportable (as in an
# environment without them; tests/test_packaging.py blocks whole extras the same way).
_BLOCKED_RUN = """
import importlib.abc, sys
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.startswith(sys.argv[1]):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Blocker())
from csp_web.app.start import main
sys.exit(main(sys.argv[2:]))
"""
TRANSCRIPT = str(Path(__file__).parent / "transcripts" / "sys_ops.csp")


def _blocked(
    tmp_path: Path, prefix: str, otel: str, *argv: str
) -> subprocess.CompletedProcess[str]:
    config = _config(tmp_path, otel)
    return subprocess.run(
        [sys.executable, "-c", _BLOCKED_RUN, prefix, argv[0], "--config", config, *argv[1:]],
        input=PING,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )


@pytest.mark.slow
@pytest.mark.parametrize("argv", [("serve",), ("mcp",), ("replay", TRANSCRIPT)])
def test_otel_enabled_without_the_sdk_stops_an_in_process_daemon_naming_csp_web_otel(
    tmp_path: Path, argv: tuple[str, ...]
) -> None:
    """serve, and mcp and replay without --socket (their daemon runs in their process)."""
    done = _blocked(tmp_path, "opentelemetry.sdk", "  enabled: true\n", *argv)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "csp-web: config: otel.enabled is true: otel (install csp-web[otel])\n"


@pytest.mark.slow
def test_otlp_without_its_exporter_package_exits_2_naming_it(tmp_path: Path) -> None:
    otel = "  enabled: true\n  exporter: otlp\n"
    done = _blocked(tmp_path, "opentelemetry.exporter", otel, "serve")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "csp-web: config: otel.exporter is otlp: opentelemetry-exporter-otlp-proto-http "
        "(install it, or use exporter: console)\n"
    )


@pytest.mark.slow
def test_otel_off_never_imports_opentelemetry_and_on_traces_to_stderr(tmp_path: Path) -> None:
    """Off: the daemon answers a traced frame and no opentelemetry module was imported
    (``-X importtime`` lists every import on stderr). On, with the console exporter: the same
    reply on stdout (the wire) and the span as one JSON line on stderr."""
    off = _serve(tmp_path, "  enabled: false\n", flags=("-X", "importtime"))
    assert (off.returncode, off.stdout) == (0, PONG)
    assert "import time:" in off.stderr
    assert "opentelemetry" not in off.stderr
    on = _serve(tmp_path, "  enabled: true\n")
    assert (on.returncode, on.stdout) == (0, PONG)
    spans = [line for line in on.stderr.splitlines() if line.startswith("{")]
    assert len(spans) == 1, on.stderr
    assert '"name": "REQ:ping IN:SYS"' in spans[0]
    assert f'"trace_id": "0x{TRACE}"' in spans[0]
    assert '"csp.status": "OK"' in spans[0]


class _Collector(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP collector that keeps each export request's path and body."""

    received: list[tuple[str, bytes]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        self.received.append((self.path, body))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[tuple[str, list[tuple[str, bytes]]]]:
    received: list[tuple[str, bytes]] = []
    handler = type("Collector", (_Collector,), {"received": received})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


async def test_the_otlp_exporter_sends_each_span_to_the_configured_endpoint_at_close(
    collector: tuple[str, list[tuple[str, bytes]]],
) -> None:
    endpoint, received = collector
    config = OtelConfig(enabled=True, exporter="otlp", endpoint=endpoint)
    with trio.fail_after(30):
        async with open_tracer(config, [("ping", "SYS")]) as tracer:
            assert tracer is not None
            tracer.start(Task("ping", "SYS", "PONG")).end(None)
    ((path, body),) = received
    assert path == "/v1/traces"
    request = ExportTraceServiceRequest.FromString(body)
    spans = [span for rs in request.resource_spans for ss in rs.scope_spans for span in ss.spans]
    assert [span.name for span in spans] == ["REQ:ping IN:SYS"]


async def test_tracing_off_gives_no_tracer() -> None:
    async with open_tracer(OtelConfig(), [("ping", "SYS")]) as tracer:
        assert tracer is None


def test_check_tracing_names_the_extra_when_the_sdk_cannot_be_imported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In process: a None in sys.modules is Python's own "this module cannot be imported"."""
    monkeypatch.setitem(sys.modules, SDK, None)
    with pytest.raises(ConfigError, match=r"csp-web\[otel\]"):
        check_tracing(OtelConfig(enabled=True))
    check_tracing(OtelConfig(enabled=False))  # off: nothing is checked


def test_check_tracing_names_the_otlp_package_when_its_parent_cannot_be_imported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(sys.modules, OTLP_EXPORTER, raising=False)
    monkeypatch.setitem(sys.modules, OTLP_EXPORTER.rpartition(".")[0], None)
    with pytest.raises(ConfigError, match="opentelemetry-exporter-otlp-proto-http"):
        check_tracing(OtelConfig(enabled=True, exporter="otlp"))
    check_tracing(OtelConfig(enabled=True, exporter="console"))


async def test_the_console_exporter_writes_each_span_as_one_json_line_on_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async with open_tracer(OtelConfig(enabled=True), [("ping", "SYS")]) as tracer:
        assert tracer is not None
        tracer.start(Task("ping", "SYS", "PONG")).end(None)
    out, err = capsys.readouterr()
    (line,) = err.splitlines()
    assert out == ""
    assert json.loads(line)["name"] == "REQ:ping IN:SYS"
