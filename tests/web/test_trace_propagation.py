"""The trace a frame's TRACEPARENT names goes on only to configured APIs (SPEC D-3): REQ:api
sends a ``traceparent`` header, never carried to another origin; fetch, search and research
send none. A local HTTPS origin records the headers it receives."""

from __future__ import annotations

import re
import ssl

import pytest
import trio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from csp_web.app.memory_path import outbox_path
from csp_web.config import Config
from csp_web.core.api.context import Peer
from csp_web.infra.otel import SCOPE, OtelTracer
from csp_web.memory.outbox import open_outbox
from protocol import Reply, Status, Task
from specialists.web import WEB
from specialists.web.config import web_section
from specialists.web.pages.ops_api import OPS
from specialists.web.services import WebServices
from tests.harness import build_dispatcher
from tests.net._dns import FixedResolver
from tests.net._origin import Origin
from tests.net._origin import Reply as OriginReply
from tests.web.fixtures import open_web_dispatcher, run, serve, with_search
from tests.web.pages_support import serve as serve_page
from tests.web.test_api import TOKEN_ENV, with_github
from tests.web.test_research import searx_route

WAIT_S = 10.0
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE}-{PARENT}-01"
SENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
PAGE = "<html><head><title>Tides</title></head><body><article><h1>Tides</h1><p>Tides rise.</p>"


def _api(*more: tuple[str, str]) -> tuple[tuple[str, str], ...]:
    return (("ENDPOINT", "github:repos/python-trio/trio"), ("NO_CACHE", "true"), *more)


def _sent(origin: Origin) -> list[tuple[str, ...]]:
    """(trace id, parent id, flags) of each request's traceparent, in order."""
    out = []
    for seen in origin.requests:
        match = SENT.fullmatch(seen.headers["traceparent"])
        assert match is not None, seen.headers["traceparent"]
        out.append(match.groups())
    return out


async def test_api_sends_the_frames_trace_under_a_fresh_parent_id_per_request(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    origin.routes["/repos/python-trio/trio"] = serve("github_repo.json")
    config = with_github(web_config, origin)
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            for _ in range(2):
                reply = await run(
                    dispatcher, "api", "API_RESPONSE", *_api(("TRACEPARENT", TRACEPARENT))
                )
                assert reply.status is Status.OK
    (trace_1, parent_1, flags_1), (trace_2, parent_2, flags_2) = _sent(origin)
    assert (trace_1, trace_2, flags_1, flags_2) == (TRACE, TRACE, "01", "01")
    assert len({parent_1, parent_2, PARENT, "0" * 16}) == 4


async def test_api_sends_no_traceparent_when_the_frame_names_no_trace_and_none_is_traced(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    origin.routes["/repos/python-trio/trio"] = serve("github_repo.json")
    config = with_github(web_config, origin)
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            await run(dispatcher, "api", "API_RESPONSE", *_api())
    (seen,) = origin.requests
    assert "traceparent" not in seen.headers


@pytest.mark.parametrize("given", [True, False])
async def test_a_traced_api_call_is_parented_on_the_tasks_span(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    given: bool,
) -> None:
    """With tracing on the header carries the task's span as parent, in the frame's trace
    when it names one, else in the trace the task's span began."""
    origin.routes["/repos/python-trio/trio"] = serve("github_repo.json")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    config = with_github(web_config, origin)
    more = (("TRACEPARENT", TRACEPARENT),) if given else ()
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        dispatcher.tracer = OtelTracer(provider.get_tracer(SCOPE), [("api", "WEB")])
        with trio.fail_after(WAIT_S):
            await run(dispatcher, "api", "API_RESPONSE", *_api(*more))
    (span,) = exporter.get_finished_spans()
    trace_id, span_id = f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"
    flags = f"{int(span.context.trace_flags):02x}"  # 01 sampled (03 with W3C level 2's random bit)
    assert _sent(origin) == [(trace_id, span_id, flags)]
    assert span.context.trace_flags.sampled
    assert (trace_id == TRACE) is given


async def test_the_traceparent_follows_a_redirect_within_the_api_origin_and_no_further(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)  # no credential: redirects are followed
    elsewhere = origin.url("other.test", "/collect")
    origin.routes["/repos/python-trio/trio"] = lambda seen: OriginReply(
        302, [("location", "/repos/moved")]
    )
    origin.routes["/repos/moved"] = lambda seen: OriginReply(301, [("location", elsewhere)])
    origin.routes["/collect"] = serve("github_repo.json")
    config = with_github(web_config, origin)
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            reply = await run(
                dispatcher, "api", "API_RESPONSE", *_api(("TRACEPARENT", TRACEPARENT))
            )
    assert reply.get("STATUS_CODE") == "200"
    hosts = [seen.headers["host"].partition(":")[0] for seen in origin.requests]
    carried = ["traceparent" in seen.headers for seen in origin.requests]
    assert hosts == ["api.test", "api.test", "other.test"]
    assert carried == [True, True, False]
    assert origin.requests[0].headers["traceparent"] == origin.requests[1].headers["traceparent"]


async def test_fetch_search_and_research_send_no_trace_to_the_sites_they_read(
    web_config: Config, web: WebServices, origin: Origin
) -> None:
    page = serve_page(origin, "/tides", PAGE)
    serve_page(origin, "/surges", PAGE.replace("Tides", "Surges"))
    searx_route(origin, ["/surges"])
    config = with_search(web_config, origin, order=["searxng"])
    web.config = web_section(config)
    trace = ("TRACEPARENT", TRACEPARENT)
    tasks = [
        Task("fetch", "WEB", "CONTENT", None, (("URL", page), trace)),
        Task("search", "WEB", "URL_REFS", None, (("QUERY", "tides"), trace)),
        Task("research", "WEB", "RESEARCH", None, (("QUESTION", "tides?"), trace)),
    ]
    async with (
        open_outbox(config.outbox_path, config.outbox, config.memory) as outbox,
        trio.open_nursery() as jobs,
    ):
        await jobs.start(web.jobs.serve, None)
        dispatcher = build_dispatcher(config, outbox_path(config, outbox), WEB.ops, web)
        with trio.fail_after(WAIT_S):
            replies = [await dispatcher.run(task, Peer("test")) for task in tasks]
            job = replies[-1].get("JOB_ID")
            result = Task(
                "result",
                "WEB",
                "RESEARCH",
                None,
                (("JOB_ID", str(job)), ("WAIT_MS", "8000"), trace),
            )
            done: Reply = await dispatcher.run(result, Peer("test"))
        jobs.cancel_scope.cancel()
    assert [reply.status for reply in replies] == [Status.OK] * 3, replies
    assert (done.get("DATA") or "").startswith("status:done"), done
    paths = [seen.target.partition("?")[0] for seen in origin.requests]
    assert "/tides" in paths  # fetched
    assert "/surges" in paths  # found, read by search's prefetch or research itself
    assert paths.count("/searx/search") >= 2  # search's own, and research's
    assert all("traceparent" not in seen.headers for seen in origin.requests)
    assert all("tracestate" not in seen.headers for seen in origin.requests)
