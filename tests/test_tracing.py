"""A span per task (``otel:``), over the real socket, read from the SDK's in-memory exporter;
and TRACEPARENT as every frame may carry it (SPEC D-3)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from functools import partial

import pytest
import trio
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from csp_web.client.trio_client import open_client
from csp_web.config import Config, SocketConfig
from csp_web.core.api.context import Peer
from csp_web.core.api.fields import FRAME_FIELDS
from csp_web.core.daemon.compose import op_table
from csp_web.core.transports.unix import Lease, serve_unix
from csp_web.infra.otel import SCOPE, OtelTracer
from protocol import MAX_TRACEPARENT_CHARS, Connection, Reply, Status, Task, serialize
from tests.conftest import Daemon, Sink, start_daemon
from tests.harness import SLEEPS, TEST_OPS, given, open_harness

WAIT_S = 20.0
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE}-{PARENT}-01"
SECRET = "s3cr3t"  # a field value that must never reach a span


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    exporter.shutdown()


@pytest.fixture
def tracer(exporter: InMemorySpanExporter) -> OtelTracer:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ops = [(op.req, op.domain) for op in op_table([given(None, TEST_OPS)])]
    return OtelTracer(provider.get_tracer(SCOPE), ops)


@pytest.fixture
async def traced(
    nursery: trio.Nursery, config: Config, sink: Sink, sock_dir: str, tracer: OtelTracer
) -> Daemon:
    path = os.path.join(sock_dir, "csp.sock")
    return await start_daemon(nursery, config, path, TEST_OPS, tracer=tracer)


async def _call(daemon: Daemon, task: Task) -> Reply:
    async with open_client(daemon.socket_path) as client:
        return await client.call(task, timeout_s=WAIT_S)


def _echo(*fields: tuple[str, str]) -> Task:
    return Task("echo", "TEST", "ECHO", None, (("ID", "e-1"), *fields))


def _only(exporter: InMemorySpanExporter) -> ReadableSpan:
    (span,) = exporter.get_finished_spans()
    return span


def _words(span: ReadableSpan) -> str:
    """Everything a span says, as one text (to look for a value that must not be there)."""
    return json.dumps([span.name, dict(span.attributes or {}), str(span.status.description)])


async def test_a_task_gets_one_server_span_named_for_its_op_with_its_status(
    traced: Daemon, exporter: InMemorySpanExporter
) -> None:
    reply = await _call(traced, _echo(("TEXT", SECRET)))
    assert reply.status is Status.OK
    span = _only(exporter)
    assert span.name == "REQ:echo IN:TEST"
    assert span.kind is SpanKind.SERVER
    assert dict(span.attributes or {}) == {
        "csp.op": "echo",
        "csp.domain": "TEST",
        "csp.status": "OK",
    }
    assert span.status.status_code is StatusCode.UNSET
    assert span.parent is None  # no TRACEPARENT: a trace of its own
    assert SECRET not in _words(span)
    assert "e-1" not in _words(span)


async def test_a_span_joins_the_trace_its_frame_names_under_the_callers_span(
    traced: Daemon, exporter: InMemorySpanExporter
) -> None:
    await _call(traced, _echo(("TEXT", "x"), ("TRACEPARENT", TRACEPARENT)))
    span = _only(exporter)
    assert span.parent is not None
    assert span.parent.is_remote
    assert f"{span.parent.span_id:016x}" == PARENT
    assert f"{span.context.trace_id:032x}" == TRACE
    assert span.context.trace_flags.sampled


async def test_a_frame_not_sampled_by_its_caller_is_not_recorded(
    traced: Daemon, exporter: InMemorySpanExporter
) -> None:
    reply = await _call(traced, _echo(("TEXT", "x"), ("TRACEPARENT", f"00-{TRACE}-{PARENT}-00")))
    assert reply.status is Status.OK
    assert exporter.get_finished_spans() == ()


async def test_a_failed_task_span_has_its_error_code_and_never_its_detail(
    traced: Daemon, exporter: InMemorySpanExporter
) -> None:
    too_long = SECRET * 3  # TEXT takes 10 characters: refused, its value named nowhere
    reply = await _call(traced, _echo(("TEXT", too_long)))
    assert reply.get("ERROR") == "invalid_field:TEXT over 10 chars"
    span = _only(exporter)
    assert dict(span.attributes or {}) == {
        "csp.op": "echo",
        "csp.domain": "TEST",
        "csp.status": "FAIL",
        "csp.error_code": "invalid_field",
    }
    assert (span.status.status_code, span.status.description) == (
        StatusCode.ERROR,
        "invalid_field",
    )
    assert SECRET not in _words(span)
    assert "TEXT" not in _words(span)


async def test_an_internal_error_span_says_internal_error_without_its_reference(
    traced: Daemon, exporter: InMemorySpanExporter
) -> None:
    reply = await _call(traced, Task("boom", "TEST", "NOTHING", None, (("ID", "b-1"),)))
    assert (reply.get("ERROR") or "").startswith("internal_error:ref ")
    assert _only(exporter).attributes == {
        "csp.op": "boom",
        "csp.domain": "TEST",
        "csp.status": "FAIL",
        "csp.error_code": "internal_error",
    }


async def test_an_instant_op_answered_on_the_connection_has_its_span_too(
    traced: Daemon, exporter: InMemorySpanExporter
) -> None:
    reply = await _call(traced, Task("ping", "SYS", "PONG", None, (("ID", "p-1"),)))
    assert reply.get("DATA") == "pong"
    span = _only(exporter)
    assert (span.name, (span.attributes or {}).get("csp.status")) == ("REQ:ping IN:SYS", "OK")


async def test_an_unknown_op_span_is_named_unknown_op_not_for_the_clients_word(
    traced: Daemon, exporter: InMemorySpanExporter
) -> None:
    reply = await _call(traced, Task(SECRET, "TEST", "X", None, (("ID", "u-1"),)))
    assert (reply.get("ERROR") or "").startswith("unknown_op:")
    span = _only(exporter)
    assert span.name == "unknown_op"
    assert span.attributes == {"csp.status": "FAIL", "csp.error_code": "unknown_op"}


async def test_a_relayed_memory_frame_span_is_named_relay_without_the_clients_req(
    traced: Daemon, exporter: InMemorySpanExporter
) -> None:
    task = Task("read", "MEMORY", "CONTENT", None, (("ID", "m-1"), ("PATH", "nothing.md")))
    reply = await _call(traced, task)
    assert reply.id == "m-1"
    span = _only(exporter)
    assert span.name == "relay IN:MEMORY"
    assert (span.attributes or {})["csp.domain"] == "MEMORY"
    assert "csp.op" not in (span.attributes or {})


async def test_a_bad_traceparent_is_refused_and_its_span_starts_a_trace_of_its_own(
    traced: Daemon, exporter: InMemorySpanExporter
) -> None:
    reply = await _call(traced, _echo(("TEXT", "x"), ("TRACEPARENT", f"ff-{TRACE}-{PARENT}-01")))
    assert reply == Reply(
        Status.FAIL,
        (
            ("ID", "e-1"),
            ("SCOPE", "[]"),
            ("DATA", "none"),
            ("ERROR", "invalid_field:TRACEPARENT version ff is invalid"),
        ),
    )
    span = _only(exporter)
    assert span.parent is None
    assert (span.attributes or {})["csp.error_code"] == "invalid_field"


async def test_two_traceparents_refuse_the_task_and_its_span_starts_a_trace_of_its_own(
    traced: Daemon, exporter: InMemorySpanExporter
) -> None:
    twice = (("TRACEPARENT", TRACEPARENT), ("TRACEPARENT", TRACEPARENT))
    reply = await _call(traced, _echo(("TEXT", "x"), *twice))
    assert reply.get("ERROR") == "duplicate_field:TRACEPARENT"
    assert _only(exporter).parent is None


async def test_a_task_cancelled_unanswered_still_ends_its_span_without_a_status(
    config: Config, tracer: OtelTracer, exporter: InMemorySpanExporter
) -> None:
    async with open_harness(config) as harness:
        harness.dispatcher.tracer = tracer
        started = SLEEPS.started
        task = Task("sleep", "TEST", "SLEPT", None, (("MS", "60000"),))
        with trio.fail_after(WAIT_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(harness.dispatcher.run, task, Peer("test"))
                await SLEEPS.wait_started(started + 1)
                nursery.cancel_scope.cancel()
    span = _only(exporter)
    assert span.name == "REQ:sleep IN:TEST"
    assert "csp.status" not in (span.attributes or {})


@pytest.mark.parametrize(
    "value",
    [
        TRACEPARENT,  # version 00: exactly 55 characters
        f"01-{TRACE}-{PARENT}-01-" + "x" * (MAX_TRACEPARENT_CHARS - 56),  # at the bound
    ],
)
async def test_a_valid_traceparent_is_accepted_on_an_untraced_daemon(
    nursery: trio.Nursery, config: Config, sink: Sink, sock_dir: str, value: str
) -> None:
    daemon = await start_daemon(nursery, config, os.path.join(sock_dir, "c.sock"), TEST_OPS)
    assert daemon.dispatcher.tracer is None
    echo = await _call(daemon, _echo(("TEXT", "x"), ("TRACEPARENT", value)))
    ping = Task("ping", "SYS", "PONG", None, (("ID", "p-1"), ("TRACEPARENT", value)))
    assert echo.status is Status.OK
    assert await _call(daemon, ping) == Reply(
        Status.OK, (("ID", "p-1"), ("SCOPE", "[sys]"), ("DATA", "pong"))
    )


@pytest.mark.parametrize(
    ("value", "detail"),
    [
        (TRACEPARENT + "0", "version 00 is exactly 55 chars"),  # 56 characters
        (TRACEPARENT[:-1], "must be 2-32-16-2 lower-case hex digits joined by -"),  # 54
        (
            f"01-{TRACE}-{PARENT}-01-" + "x" * (MAX_TRACEPARENT_CHARS - 55),
            f"over {MAX_TRACEPARENT_CHARS} chars",
        ),
        (f"00-{'0' * 32}-{PARENT}-01", "trace id is all zero"),
        (f"00-{TRACE}-{'0' * 16}-01", "parent id is all zero"),
        (TRACEPARENT.upper(), "must be 2-32-16-2 lower-case hex digits joined by -"),
    ],
)
async def test_a_bad_traceparent_fails_invalid_field_on_any_op(
    nursery: trio.Nursery, config: Config, sink: Sink, sock_dir: str, value: str, detail: str
) -> None:
    daemon = await start_daemon(nursery, config, os.path.join(sock_dir, "c.sock"), TEST_OPS)
    ping = Task("ping", "SYS", "PONG", None, (("ID", "p-1"), ("TRACEPARENT", value)))
    memory = Task("read", "MEMORY", "CONTENT", None, (("ID", "m-1"), ("TRACEPARENT", value)))
    for task in (ping, _echo(("TEXT", "x"), ("TRACEPARENT", value)), memory):
        reply = await _call(daemon, task)
        assert reply.fields[-1] == ("ERROR", f"invalid_field:TRACEPARENT {detail}"), task


async def test_every_op_line_of_req_ops_lists_the_fields_every_frame_may_carry(
    nursery: trio.Nursery, config: Config, sink: Sink, sock_dir: str
) -> None:
    daemon = await start_daemon(nursery, config, os.path.join(sock_dir, "c.sock"), TEST_OPS)
    reply = await _call(daemon, Task("ops", "SYS", "OPS", None, (("ID", "o-1"),)))
    entries = [json.loads(value) for key, value in reply.fields if key == "OP"]
    assert len(entries) == len(op_table([given(None, TEST_OPS)]))
    expected = [
        {"name": "ID", "type": "text", "max_chars": 128, "doc": FRAME_FIELDS[0].spec.doc},
        {"name": "TIMEOUT_MS", "type": "int", "minimum": 1, "doc": FRAME_FIELDS[1].spec.doc},
        {"name": "TRACEPARENT", "type": "text", "max_chars": 128, "doc": FRAME_FIELDS[2].spec.doc},
        {"name": "BUDGET", "type": "text", "max_chars": 256, "doc": FRAME_FIELDS[3].spec.doc},
        {"name": "BUDGET_ID", "type": "text", "max_chars": 64, "doc": FRAME_FIELDS[4].spec.doc},
    ]
    assert all(entry["frame_fields"] == expected for entry in entries)


async def test_a_relayed_frame_reaches_the_memory_specialist_without_its_traceparent(
    nursery: trio.Nursery, config: Config, sock_dir: str
) -> None:
    """M-3, D-3: the trace goes on only to configured APIs; a Memory Specialist older than
    TRACEPARENT would refuse it as unknown_field. Its own error word reaches no span."""
    received: list[Task] = []

    async def memory(stream: trio.SocketStream, peer: Peer, _lease: Lease) -> None:
        """Stores the daemon's own writes; answers a relayed read in a word of its own."""
        codec = Connection()
        while data := await stream.receive_some(65536):
            codec.receive_data(data)
            while isinstance(event := codec.next_event(), Task):
                if event.req == "write":
                    answer = Reply(Status.OK, (("ID", event.id or ""), ("DATA", "stored")))
                else:
                    received.append(event)
                    answer = Reply(Status.FAIL, (("ID", event.id or ""), ("ERROR", "odd:x")))
                await stream.send_all(serialize(answer))

    assert config.memory.socket_path is not None
    await nursery.start(
        partial(
            serve_unix, config.memory.socket_path, SocketConfig(), memory, handler_nursery=nursery
        )
    )
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = OtelTracer(provider.get_tracer(SCOPE), [])
    daemon = await start_daemon(nursery, config, os.path.join(sock_dir, "c.sock"), tracer=tracer)
    fields = (("ID", "m-1"), ("PATH", "a.md"), ("TRACEPARENT", TRACEPARENT), ("TIMEOUT_MS", "9000"))
    reply = await _call(daemon, Task("read", "MEMORY", "CONTENT", None, fields))
    assert reply.get("ERROR") == "odd:x"
    (task,) = received
    assert task.fields == (("ID", "m-1"), ("PATH", "a.md"), ("TIMEOUT_MS", "9000"))
    assert _only(exporter).attributes == {
        "csp.domain": "MEMORY",
        "csp.status": "FAIL",
        "csp.error_code": "other",
    }
