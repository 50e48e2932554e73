"""Budgets where the web spends (SPEC D-3): fetches and bytes of fetch, model tokens of
summarize and research, and a research job drawing on the budget of the frame that started it,
against the local origin playing the pages, SearXNG and an OpenAI-compatible model."""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
import trio

from csp_web.app.memory_path import outbox_path
from csp_web.config import Config
from csp_web.core.dispatch.dispatcher import Dispatcher, DispatchPort
from csp_web.memory.outbox import open_outbox
from protocol import Reply, Status
from specialists.web import WEB
from specialists.web.config import SummarizeConfig, web_section
from specialists.web.search.ops_search import OPS as SEARCH_OPS
from specialists.web.services import WebServices
from tests.harness import build_dispatcher
from tests.net._dns import FixedResolver
from tests.net._origin import Origin, Seen
from tests.net._origin import Reply as OriginReply
from tests.web.conftest import DispatcherFactory
from tests.web.fixtures import open_web_dispatcher, with_search
from tests.web.fixtures import run as search
from tests.web.pages_support import fetch, run, serve
from tests.web.test_research import QUESTION, SURGES, TIDES, configure, run_job, searx_route, steps
from tests.web.test_search_filters import WAIT_S, searx_json
from tests.web.test_summarize import KEY, KEY_ENV, TEXT, completion, llm_dispatcher

PAGE = (
    "<html><head><title>T</title></head><body><p>"
    + "Tides rise and fall. " * 20
    + "</p></body></html>"
)


@pytest.fixture
async def research(
    web_config: Config, web: WebServices, origin: Origin
) -> AsyncIterator[tuple[Dispatcher, WebServices]]:
    """Every web op with the research jobs' nursery running (test_research's fixture)."""
    config = configure(web_config, origin)
    web.config = web_section(config)
    async with (
        open_outbox(config.outbox_path, config.outbox, config.memory) as outbox,
        trio.open_nursery() as jobs,
    ):
        await jobs.start(web.jobs.serve, None)
        yield build_dispatcher(config, outbox_path(config, outbox), WEB.ops, web), web
        jobs.cancel_scope.cancel()


def _exhausted(reply: Reply, dimension: str) -> bool:
    return (reply.status, reply.get("ERROR")) == (Status.PARTIAL, f"budget_exhausted:{dimension}")


async def test_a_fetch_of_several_urls_fetches_as_many_as_its_budget_allows(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    dispatcher = make_dispatcher(list(WEB.ops))
    urls = [serve(origin, f"/p{n}", PAGE) for n in range(3)]
    at = await fetch(dispatcher, urls[0], ("BUDGET", "fetches:1"))
    over = await run(
        dispatcher, "fetch", "CONTENT", None, *(("URL", u) for u in urls), ("BUDGET", "fetches:2")
    )
    assert (at.status, at.get("BUDGET_LEFT")) == (Status.OK, "fetches:0")
    assert _exhausted(over, "fetches")
    assert over.get("DATA") == "fetched:2,failed:1"
    assert len(over.get_all("FETCH")) == 2  # what was done so far
    (error,) = over.get_all("FETCH_ERROR")
    assert error.endswith(" budget_exhausted:fetches")
    assert over.get("BUDGET_LEFT") == "fetches:0"


async def test_bytes_allow_a_body_of_exactly_the_budget_and_cut_one_a_byte_over(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    dispatcher = make_dispatcher(list(WEB.ops))
    size = len(PAGE.encode())
    await fetch(dispatcher, serve(origin, "/warm", PAGE))  # robots.txt is read and cached
    at = await fetch(dispatcher, serve(origin, "/a", PAGE), ("BUDGET", f"bytes:{size}"))
    over = await fetch(dispatcher, serve(origin, "/b", PAGE), ("BUDGET", f"bytes:{size - 1}"))
    assert (at.status, at.get("BUDGET_LEFT")) == (Status.OK, "bytes:0")
    assert _exhausted(over, "bytes")
    assert over.get("DATA") == "none"  # its length does not fit: cut before a byte is read
    assert over.get("BUDGET_LEFT") == f"bytes:{size - 1}"  # and charged nothing
    spent = await fetch(dispatcher, serve(origin, "/c", PAGE), ("BUDGET", "bytes:0"))
    assert _exhausted(spent, "bytes")
    assert spent.get("DATA") == "none"  # refused before a byte was asked for
    assert origin.paths().count("/c") == 0


async def test_summarize_charges_the_models_usage_to_llm_tokens(
    web_config: Config, web: WebServices, origin: Origin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The completion's usage says 15 tokens: 15 allowed, 14 answered PARTIAL with the
    model's bullets kept; none left, the bullets are extractive (no model call), a complete
    answer (OK: the refusal did not end the work), and the model is asked for at most what
    is left as its max_tokens."""
    monkeypatch.setenv(KEY_ENV, KEY)
    calls: list[Seen] = []

    def model(request: Seen) -> OriginReply:
        calls.append(request)
        answer = "- Tides follow the moon.\n- Surges flood coasts."
        return OriginReply(200, [("content-type", "application/json")], completion(answer))

    origin.routes["/v1/chat/completions"] = model
    async with llm_dispatcher(web_config, web, origin) as dispatcher:
        at = await summarize_with(dispatcher, "llm_tokens:15")
        over = await summarize_with(dispatcher, "llm_tokens:14")
        none = await summarize_with(dispatcher, "llm_tokens:0")
    assert (at.status, at.get("METHOD"), at.get("BUDGET_LEFT")) == (
        Status.OK,
        "llm",
        "llm_tokens:0",
    )
    assert _exhausted(over, "llm_tokens")
    assert (over.get("METHOD"), over.get_all("BULLET")) == (
        "llm",
        ["Tides follow the moon.", "Surges flood coasts."],
    )
    assert (none.status, none.get("METHOD"), none.get("BUDGET_LEFT")) == (
        Status.OK,
        "extractive",
        "llm_tokens:0",
    )
    assert [json.loads(call.body)["max_tokens"] for call in calls] == [15, 14]


def _held_model(origin: Origin) -> None:
    """The model reads the request and never answers: a call cut by its own timeout."""
    never = trio.Event()
    answer = completion("- Tides follow the moon.")
    origin.routes["/v1/chat/completions"] = lambda _: OriginReply(
        200, [("content-type", "application/json")], answer, hold=never
    )


async def test_a_summarize_model_call_cut_by_its_timeout_keeps_its_max_tokens_charged(
    web_config: Config, web: WebServices, origin: Origin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model has the request but answers past summarize's deadline (the guard's
    timeout_s): the bullets are extractive, and the 2048 tokens it was asked for stay
    charged, since the provider may have billed them."""
    monkeypatch.setenv(KEY_ENV, KEY)
    _held_model(origin)
    web.config = replace(web.config, guard=replace(web.config.guard, timeout_s=0.5))
    async with llm_dispatcher(web_config, web, origin) as dispatcher:
        reply = await summarize_with(dispatcher, "llm_tokens:5000")
    assert (reply.status, reply.get("METHOD"), reply.get("BUDGET_LEFT")) == (
        Status.OK,
        "extractive",
        "llm_tokens:2952",
    )
    assert origin.paths() == ["/v1/chat/completions"]


async def test_a_summarize_model_call_that_never_left_gives_its_max_tokens_back(
    web_config: Config, web: WebServices, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model whose host does not resolve was never asked: extractive, nothing charged."""
    monkeypatch.setenv(KEY_ENV, KEY)
    nowhere = SummarizeConfig(llm_base_url="https://nowhere.test/v1/", llm_api_key_env=KEY_ENV)
    services = replace(web, config=replace(web.config, summarize=nowhere))
    async with open_outbox(web_config.outbox_path, web_config.outbox, web_config.memory) as box:
        dispatcher = build_dispatcher(web_config, outbox_path(web_config, box), WEB.ops, services)
        reply = await summarize_with(dispatcher, "llm_tokens:5000")
    assert (reply.status, reply.get("METHOD"), reply.get("BUDGET_LEFT")) == (
        Status.OK,
        "extractive",
        "llm_tokens:5000",
    )


async def summarize_with(dispatcher: Dispatcher, budget: str) -> Reply:
    return await run(dispatcher, "summarize", "SUMMARY", TEXT, ("BUDGET", budget))


def _research(web: WebServices, origin: Origin, **research: Any) -> None:
    serve(origin, "/surges", SURGES)
    serve(origin, "/tides", TIDES)
    searx_route(origin, ["/surges", "/tides"])
    config = replace(web.config.docs.research, **research)
    web.config = replace(web.config, docs=replace(web.config.docs, research=config))


async def test_a_research_job_draws_on_its_frames_budget_and_answers_with_what_it_read(
    research: tuple[Dispatcher, WebServices], origin: Origin
) -> None:
    """searches:1,fetches:1 for two sources: one search and one page, then the job answers
    from that page, PARTIAL budget_exhausted:fetches, the refused fetch in its steps."""
    dispatcher, web = research
    _research(web, origin)
    reply = await run_job(dispatcher, ("MAX_SOURCES", "2"), ("BUDGET", "searches:1,fetches:1"))
    assert _exhausted(reply, "fetches")
    assert reply.get("BUDGET_LEFT") == "searches:0,fetches:0"
    data = reply.get("DATA") or ""  # which of the two pages came first is the race's
    assert data.startswith("status:done,bullets:")
    assert data.endswith(",sources:1")
    assert reply.get_all("BULLET")
    assert len(reply.get_all("CITE")) == 1
    outcomes = sorted(outcome for kind, _, outcome in steps(reply) if kind == "fetch")
    assert outcomes == ["budget_exhausted:fetches", "ok"]


async def test_a_research_job_within_its_budget_answers_ok_with_what_is_left(
    research: tuple[Dispatcher, WebServices], origin: Origin
) -> None:
    dispatcher, web = research
    _research(web, origin)
    reply = await run_job(dispatcher, ("MAX_SOURCES", "2"), ("BUDGET", "searches:1,fetches:2"))
    assert (reply.status, reply.get("BUDGET_LEFT")) == (Status.OK, "searches:0,fetches:0")
    assert reply.get("DATA") == "status:done,bullets:5,sources:2"


async def test_a_research_job_without_a_search_left_answers_partial_with_its_steps(
    research: tuple[Dispatcher, WebServices], origin: Origin
) -> None:
    dispatcher, web = research
    _research(web, origin)
    reply = await run_job(dispatcher, ("BUDGET", "searches:0"))
    assert _exhausted(reply, "searches")
    assert (reply.get("DATA"), reply.get("JOB_STATUS")) == ("status:failed", "failed")
    assert steps(reply) == [("search", f'"{QUESTION}"', "budget_exhausted:searches")]
    assert origin.paths().count("/searx/search") == 0


async def test_a_research_model_is_asked_for_no_more_tokens_than_are_left(
    research: tuple[Dispatcher, WebServices], origin: Origin
) -> None:
    dispatcher, web = research
    seen: list[Seen] = []
    content = "- Wind pushes water ashore. [1]"
    answer = {"choices": [{"message": {"content": content}}], "usage": {"total_tokens": 90}}

    def model(request: Seen) -> OriginReply:
        seen.append(request)
        return OriginReply(200, [("content-type", "application/json")], json.dumps(answer).encode())

    origin.routes["/v1/chat/completions"] = model
    _research(web, origin, llm_base_url=origin.url("api.test", "/v1"), llm_max_tokens=321)
    reply = await run_job(dispatcher, ("MAX_SOURCES", "1"), ("BUDGET", "llm_tokens:100"))
    (request,) = seen
    assert json.loads(request.body)["max_tokens"] == 100
    assert (reply.status, reply.get("METHOD"), reply.get("BUDGET_LEFT")) == (
        Status.OK,
        "llm",
        "llm_tokens:10",
    )
    assert reply.get("QUESTION") == QUESTION


async def test_a_prefetch_loads_under_the_search_frames_budget(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    nursery: trio.Nursery,
) -> None:
    """searches:1,fetches:1 with three results to prefetch: the search, then one page."""
    for n in range(3):
        serve(origin, f"/page{n}", PAGE)
    origin.routes["/searx/search"] = searx_json(
        *((origin.url("origin.test", f"/page{n}"), None) for n in range(3))
    )
    config = with_search(web_config, origin, order=["searxng"])
    fields = [("QUERY", "q"), ("PREFETCH", "3"), ("BUDGET", "searches:1,fetches:1")]
    async with open_web_dispatcher(config, SEARCH_OPS, dns=dns, trust=trust) as (dispatcher, web):
        await nursery.start(web.prefetch.serve, DispatchPort(dispatcher))  # WEB's background
        with trio.fail_after(WAIT_S):
            reply = await search(dispatcher, "search", "URL_REFS", *fields)
            await web.prefetch.wait_idle()
    assert (reply.status, reply.get("PREFETCHED")) == (Status.OK, "3")
    assert len([p for p in origin.paths() if p.startswith("/page")]) == 1


async def test_a_fetch_of_several_urls_reads_no_byte_past_its_bytes(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    """Three pages read at once under bytes for two, in whatever order their headers come:
    the two that come first reserve their length and are kept, the third finds nothing left
    and is cut before a byte of it is read, and what is left is 0, never less. (Before the
    rule that spares paid bodies, the cut cancelled the two when they were still reading.)"""
    dispatcher = make_dispatcher(list(WEB.ops))
    size = len(PAGE.encode())
    await fetch(dispatcher, serve(origin, "/warm", PAGE))  # robots.txt is read and cached
    urls = [serve(origin, f"/q{n}", PAGE) for n in range(3)]
    reply = await run(
        dispatcher,
        "fetch",
        "CONTENT",
        None,
        *(("URL", u) for u in urls),
        ("BUDGET", f"bytes:{2 * size}"),
    )
    assert _exhausted(reply, "bytes")
    assert (reply.get("DATA"), reply.get("BUDGET_LEFT")) == ("fetched:2,failed:1", "bytes:0")
    (error,) = reply.get_all("FETCH_ERROR")
    assert error.endswith(" budget_exhausted:bytes")


async def test_a_research_model_call_cut_by_its_timeout_keeps_its_max_tokens_charged(
    research: tuple[Dispatcher, WebServices], origin: Origin
) -> None:
    """The model has the request but answers past llm_timeout_s: the job answers from its
    sources without it, and the 321 tokens it asked for stay charged."""
    dispatcher, web = research
    _held_model(origin)
    _research(
        web,
        origin,
        llm_base_url=origin.url("api.test", "/v1"),
        llm_max_tokens=321,
        llm_timeout_s=0.5,
    )
    reply = await run_job(dispatcher, ("MAX_SOURCES", "1"), ("BUDGET", "llm_tokens:1000"))
    assert "/v1/chat/completions" in origin.paths()
    assert (reply.status, reply.get("BUDGET_LEFT")) == (Status.OK, "llm_tokens:679")


async def test_a_model_answer_nested_past_what_json_reads_is_charged_its_max_tokens(
    web_config: Config, web: WebServices, origin: Origin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """json.loads raised RecursionError reading its usage: internal_error. An answer whose
    usage cannot be read is charged the most it could have used, and summarised without it."""
    monkeypatch.setenv(KEY_ENV, KEY)
    deep = b"[" * 100_000 + b"]" * 100_000
    origin.routes["/v1/chat/completions"] = lambda _: OriginReply(
        200, [("content-type", "application/json")], deep
    )
    async with llm_dispatcher(web_config, web, origin) as dispatcher:
        reply = await summarize_with(dispatcher, "llm_tokens:100000")
    assert (reply.status, reply.get("METHOD")) == (Status.OK, "extractive")
    left = int((reply.get("BUDGET_LEFT") or "").removeprefix("llm_tokens:"))
    assert left < 100_000  # charged its max_tokens, as any answer naming no usage
