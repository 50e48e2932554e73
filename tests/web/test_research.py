"""Research jobs end to end (issue 14): REQ:research and REQ:result against a local HTTPS
origin playing a SearXNG instance, the source pages, and an OpenAI-compatible chat endpoint."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import pytest
import trio
import trio.testing

from csp_web.app.memory_path import outbox_path
from csp_web.config import Config, with_section
from csp_web.core.api.context import Peer
from csp_web.core.api.errors import OpError
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.memory.outbox import open_outbox
from protocol import ErrorCode, Reply, Status, Task
from specialists.web import WEB
from specialists.web.config import web_section
from specialists.web.docs.config import DocsConfig, ResearchConfig
from specialists.web.research.jobs import Finding, Job, ResearchJobs
from specialists.web.research.kept import NAMESPACE
from specialists.web.research.llm import Source, parse_answer
from specialists.web.research.run import heuristic_answer
from specialists.web.services import WebServices
from tests.conftest import Daemon
from tests.harness import build_dispatcher, files_holding, outbox_of
from tests.net._origin import Origin, Seen
from tests.net._origin import Reply as OriginReply
from tests.web.fixtures import with_search
from tests.web.pages_support import WAIT_S, serve

PEER = Peer("research", 1000, 7)
SURGES = (
    "<html><head><title>Storm surges</title></head><body><article><h1>Storm surges</h1>"
    "<p>A storm surge is water pushed onto the coast by strong onshore winds.</p>"
    "<p>When a storm surge meets a spring tide, low coasts can flood badly.</p>"
    "<p>The bakery on the corner sells bread every morning of the week.</p>"
    "</article></body></html>"
)
TIDES = (
    "<html><head><title>Tides</title></head><body><article><h1>Tides</h1>"
    "<p>Tides rise and fall twice a day under the pull of the moon.</p>"
    "<p>Spring tides are the highest tides and make storm surges more dangerous.</p>"
    "</article></body></html>"
)
QUESTION = "How do storm surges flood coasts?"


def searx_route(origin: Origin, paths: list[str]) -> None:
    """SearXNG answering every query with ``paths`` on origin.test, best first."""
    results = [
        {"url": origin.url("origin.test", path), "title": path, "content": "", "score": 10 - n}
        for n, path in enumerate(paths)
    ]
    body = json.dumps({"query": "q", "number_of_results": 0, "results": results}).encode()
    origin.routes["/searx/search"] = lambda seen: OriginReply(
        200, [("content-type", "application/json")], body
    )


def configure(web_config: Config, origin: Origin, **research: Any) -> Config:
    config = with_search(web_config, origin, order=["searxng"])
    docs = replace(DocsConfig(), research=replace(ResearchConfig(), **research))
    return with_section(config, "web", replace(web_section(config), docs=docs))


@pytest.fixture
async def research(
    web_config: Config, web: WebServices, origin: Origin
) -> AsyncIterator[tuple[Dispatcher, WebServices]]:
    """Every web op, the jobs' nursery running; call ``web.config = ...`` to change settings."""
    config = configure(web_config, origin)
    web.config = web_section(config)
    async with (
        open_outbox(config.outbox_path, config.outbox, config.memory) as outbox,
        trio.open_nursery() as jobs,
    ):
        await jobs.start(web.jobs.serve, None)
        yield build_dispatcher(config, outbox_path(config, outbox), WEB.ops, web), web
        jobs.cancel_scope.cancel()  # jobs end before the web services close under them


async def ask(
    dispatcher: Dispatcher, req: str, *fields: tuple[str, str], peer: Peer = PEER
) -> Reply:
    with trio.fail_after(WAIT_S):
        return await dispatcher.run(Task(req, "WEB", "RESEARCH", None, tuple(fields)), peer)


async def run_job(dispatcher: Dispatcher, *fields: tuple[str, str]) -> Reply:
    started = await ask(dispatcher, "research", ("QUESTION", QUESTION), *fields)
    assert (started.status, started.get("DATA")) == (Status.OK, "status:running"), started
    job_id = started.get("JOB_ID")
    assert job_id is not None
    return await ask(
        dispatcher, "result", ("JOB_ID", job_id), ("WAIT_MS", "8000"), ("INCLUDE_STEPS", "true")
    )


def steps(reply: Reply) -> list[tuple[str, str, str]]:
    """(kind, target, outcome) of each STEP line; times vary."""
    out = []
    for line in reply.get_all("STEP"):
        head, _, tail = line.rpartition(" ms:")
        assert tail.isdigit()
        kind, rest = head.split(" ", 1)
        target, outcome = rest.rsplit(" ", 1)
        out.append((kind, target, outcome))
    return out


async def test_research_without_a_model_answers_with_cited_sentences_of_the_sources(
    research: tuple[Dispatcher, WebServices], origin: Origin
) -> None:
    """R-4: each bullet names its sources by CITE position; METHOD says heuristic."""
    dispatcher, _ = research
    surges, tides = serve(origin, "/surges", SURGES), serve(origin, "/tides", TIDES)
    searx_route(origin, ["/surges", "/tides"])
    reply = await run_job(dispatcher, ("MAX_SOURCES", "2"), ("MAX_BULLETS", "3"))
    assert reply.status is Status.OK
    assert reply.get("DATA") == "status:done,bullets:3,sources:2"
    assert (reply.get("QUESTION"), reply.get("METHOD")) == (QUESTION, "heuristic")
    assert reply.get_all("BULLET") == [
        "When a storm surge meets a spring tide, low coasts can flood badly. [1]",
        "Spring tides are the highest tides and make storm surges more dangerous. [2]",
        "A storm surge is water pushed onto the coast by strong onshore winds. [1]",
    ]
    assert reply.get_all("CITE") == [f'{surges} "Storm surges"', f'{tides} "Tides"']
    assert sorted(steps(reply)) == [
        ("fetch", surges, "ok"),
        ("fetch", tides, "ok"),
        ("search", json.dumps(QUESTION), "ok"),
    ]


async def test_a_source_that_fails_is_replaced_by_the_next_result(
    research: tuple[Dispatcher, WebServices], origin: Origin
) -> None:
    dispatcher, _ = research
    tides = serve(origin, "/tides", TIDES)
    searx_route(origin, ["/status/404", "/tides"])
    reply = await run_job(dispatcher, ("MAX_SOURCES", "1"))
    assert reply.get("DATA") == "status:done,bullets:2,sources:1"
    assert reply.get_all("CITE") == [f'{tides} "Tides"']
    assert [step for step in steps(reply) if step[0] == "fetch"] == [
        ("fetch", origin.url("origin.test", "/status/404"), "fetch_failed:http_404"),
        ("fetch", tides, "ok"),
    ]


async def test_a_running_job_shows_each_finished_step_while_a_later_one_is_held(
    research: tuple[Dispatcher, WebServices], origin: Origin
) -> None:
    """REQ:result INCLUDE_STEPS true reports progress: while the job runs (its last source
    held by the origin), the reply says status:running and carries the search and the two
    fetches already finished; once the held page is answered, every step."""
    dispatcher, _ = research
    surges = serve(origin, "/surges", SURGES)
    missing = origin.url("origin.test", "/status/404")
    held = trio.Event()
    tides = origin.url("origin.test", "/tides")
    origin.routes["/tides"] = lambda seen: OriginReply(
        200, [("content-type", "text/html; charset=utf-8")], TIDES.encode(), hold=held
    )
    # Two sources wanted: /surges and /status/404 are read at once, then /tides replaces
    # the one that failed; its request means both earlier fetches have ended.
    searx_route(origin, ["/surges", "/status/404", "/tides"])
    started = await ask(dispatcher, "research", ("QUESTION", QUESTION), ("MAX_SOURCES", "2"))
    job_id = started.get("JOB_ID") or ""
    with trio.fail_after(WAIT_S):
        await origin.wait_request("/tides")
    running = await ask(dispatcher, "result", ("JOB_ID", job_id), ("INCLUDE_STEPS", "true"))
    assert (running.status, running.get("DATA")) == (Status.OK, "status:running")
    assert sorted(steps(running)) == [
        ("fetch", missing, "fetch_failed:http_404"),
        ("fetch", surges, "ok"),
        ("search", json.dumps(QUESTION), "ok"),
    ]
    held.set()
    done = await ask(
        dispatcher, "result", ("JOB_ID", job_id), ("WAIT_MS", "8000"), ("INCLUDE_STEPS", "true")
    )
    assert done.get("DATA") == "status:done,bullets:5,sources:2"
    assert steps(done)[:3] == steps(running)
    assert steps(done)[3:] == [("fetch", tides, "ok")]


async def test_research_with_a_model_endpoint_answers_from_the_model(
    research: tuple[Dispatcher, WebServices], origin: Origin
) -> None:
    """The model sees the question and the numbered sources with a max_tokens bound; a
    bullet citing a source it was not given is dropped."""
    dispatcher, web = research
    serve(origin, "/surges", SURGES)
    serve(origin, "/tides", TIDES)
    searx_route(origin, ["/surges", "/tides"])
    seen: list[Seen] = []
    content = "- Wind pushes water ashore. [1]\n- Made up. [7]\n- Worst at spring tide. [1][2]"
    answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}

    def model(request: Seen) -> OriginReply:
        seen.append(request)
        body = json.dumps(answer).encode()
        return OriginReply(200, [("content-type", "application/json")], body)

    origin.routes["/v1/chat/completions"] = model
    research_config = replace(
        web.config.docs.research, llm_base_url=origin.url("api.test", "/v1"), llm_max_tokens=321
    )
    web.config = replace(web.config, docs=replace(web.config.docs, research=research_config))
    reply = await run_job(dispatcher, ("MAX_SOURCES", "2"))
    assert reply.get("METHOD") == "llm"
    assert reply.get_all("BULLET") == [
        "Wind pushes water ashore. [1]",
        "Worst at spring tide. [1][2]",
    ]
    (request,) = seen
    body = json.loads(request.body)
    assert (body["max_tokens"], body["temperature"]) == (321, 0)
    user = body["messages"][1]["content"]
    assert user.startswith(f"Question: {QUESTION}")
    assert "[1] Storm surges" in user
    assert "[2] Tides" in user
    assert ("model", json.dumps("gpt-4o-mini"), "ok") in steps(reply)


async def test_a_failing_model_falls_back_to_the_heuristic_and_says_why(
    research: tuple[Dispatcher, WebServices], origin: Origin
) -> None:
    dispatcher, web = research
    serve(origin, "/surges", SURGES)
    searx_route(origin, ["/surges"])
    origin.routes["/v1/chat/completions"] = lambda seen: OriginReply(500, body=b"down")
    research_config = replace(web.config.docs.research, llm_base_url=origin.url("api.test", "/v1"))
    web.config = replace(web.config, docs=replace(web.config.docs, research=research_config))
    reply = await run_job(dispatcher, ("MAX_SOURCES", "1"))
    assert (reply.get("METHOD"), reply.get("MODEL_ERROR")) == ("heuristic", "http_500")
    assert reply.get_all("BULLET")


async def test_a_source_with_no_text_is_skipped_and_its_step_says_why(
    research: tuple[Dispatcher, WebServices], origin: Origin
) -> None:
    dispatcher, _ = research
    shell = serve(origin, "/app", '<html><body><div id="app"></div><script src="/a.js"></script>')
    tides = serve(origin, "/tides", TIDES)
    searx_route(origin, ["/app", "/tides"])
    reply = await run_job(dispatcher, ("MAX_SOURCES", "1"))
    assert reply.get_all("CITE") == [f'{tides} "Tides"']
    assert [step for step in steps(reply) if step[0] == "fetch"] == [
        ("fetch", shell, "empty_content:script_only,render_unavailable"),
        ("fetch", tides, "ok"),
    ]


async def test_sources_with_no_words_answer_partial_not_an_empty_ok(
    research: tuple[Dispatcher, WebServices], origin: Origin
) -> None:
    """R-2: a done job with no bullet (its source held only punctuation) names why rather
    than answering an empty OK."""
    dispatcher, _ = research
    serve(origin, "/short", "<html><body><article><p>— … — ※ —</p></article></body></html>")
    searx_route(origin, ["/short"])
    reply = await run_job(dispatcher, ("MAX_SOURCES", "1"))
    assert (reply.status, reply.get("DATA"), reply.get("ERROR")) == (
        Status.PARTIAL,
        "status:done,bullets:0,sources:1",
        "empty_content:no_sentences",
    )


async def test_no_readable_source_fails_the_job_with_its_steps(
    research: tuple[Dispatcher, WebServices], origin: Origin
) -> None:
    dispatcher, _ = research
    searx_route(origin, ["/status/404"])
    reply = await run_job(dispatcher)
    assert reply.status is Status.FAIL
    assert reply.get("ERROR") == "research_failed:no source could be read"
    assert reply.get("JOB_STATUS") == "failed"
    assert steps(reply)[-1][2] == "fetch_failed:http_404"


async def test_a_job_is_its_peers_alone_and_unknown_ids_are_refused(
    research: tuple[Dispatcher, WebServices], origin: Origin
) -> None:
    dispatcher, _ = research
    serve(origin, "/surges", SURGES)
    searx_route(origin, ["/surges"])
    started = await ask(dispatcher, "research", ("QUESTION", QUESTION))
    job_id = started.get("JOB_ID") or ""
    other = await ask(dispatcher, "result", ("JOB_ID", job_id), peer=Peer("x", 1001, 9))
    unknown = await ask(dispatcher, "result", ("JOB_ID", "rj_nothing"))
    assert other.get("ERROR") == f"unknown_research_job:{job_id}"
    assert unknown.get("ERROR") == "unknown_research_job:rj_nothing"
    done = await ask(dispatcher, "result", ("JOB_ID", job_id), ("WAIT_MS", "8000"))
    assert (done.get("DATA") or "").startswith("status:done")


async def test_max_sources_and_bullets_are_capped_at_n_and_n_plus_1(
    research: tuple[Dispatcher, WebServices], origin: Origin
) -> None:
    dispatcher, _ = research
    searx_route(origin, [])
    at = await ask(dispatcher, "research", ("QUESTION", "q"), ("MAX_SOURCES", "5"))
    over = await ask(dispatcher, "research", ("QUESTION", "q"), ("MAX_SOURCES", "6"))
    bullets = await ask(dispatcher, "research", ("QUESTION", "q"), ("MAX_BULLETS", "11"))
    assert at.status is Status.OK
    assert over.get("ERROR") == "invalid_field:MAX_SOURCES above 5"
    assert bullets.get("ERROR") == "invalid_field:MAX_BULLETS above 10"


async def test_without_the_jobs_nursery_research_is_not_available(
    web_config: Config, web: WebServices
) -> None:
    async with open_outbox(web_config.outbox_path, web_config.outbox, web_config.memory) as box:
        dispatcher = build_dispatcher(web_config, outbox_path(web_config, box), WEB.ops, web)
        reply = await ask(dispatcher, "research", ("QUESTION", QUESTION))
    assert reply.get("ERROR") == "not_available:research jobs are not running"


async def test_a_running_job_answers_status_running(
    research: tuple[Dispatcher, WebServices], origin: Origin
) -> None:
    """The search never answers (the origin drips): result without WAIT_MS says running."""
    dispatcher, _ = research
    origin.routes["/searx/search"] = lambda seen: OriginReply(
        200, [("content-type", "application/json")], drip=True
    )
    started = await ask(dispatcher, "research", ("QUESTION", QUESTION))
    job_id = started.get("JOB_ID") or ""
    reply = await ask(dispatcher, "result", ("JOB_ID", job_id))
    assert reply.fields == (("SCOPE", "[]"), ("DATA", "status:running"), ("JOB_ID", job_id))


# --- the jobs table, under a mock clock ---------------------------------------------------


async def idle(job: Job) -> None:
    await trio.sleep_forever()


async def finish(job: Job) -> None:
    job.status, job.ended = "done", trio.current_time()
    job.done.set()


async def test_jobs_are_kept_for_job_ttl_s_after_they_end(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    jobs, config = ResearchJobs(), ResearchConfig(job_ttl_s=60.0)
    await nursery.start(jobs.serve, None)
    job = jobs.start(config, "me", "q", finish, sources=1, bullets=1)
    await job.done.wait()
    await trio.sleep(59.9)
    assert jobs.get(job.job_id, "me", config) is job
    await trio.sleep(0.1)
    with pytest.raises(OpError) as gone:
        jobs.get(job.job_id, "me", config)
    assert gone.value.code is ErrorCode.UNKNOWN_RESEARCH_JOB


async def test_max_jobs_running_refuses_the_next_and_an_ended_job_makes_room(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    """N and N+1: two jobs at max_jobs 2; a third is busy while both run."""
    jobs, config = ResearchJobs(), ResearchConfig(max_jobs=2)
    await nursery.start(jobs.serve, None)
    ended = jobs.start(config, "me", "q", finish, sources=1, bullets=1)
    jobs.start(config, "me", "q", idle, sources=1, bullets=1)
    await ended.done.wait()
    third = jobs.start(config, "me", "q", idle, sources=1, bullets=1)  # the ended one goes
    with pytest.raises(OpError) as busy:
        jobs.start(config, "me", "q", idle, sources=1, bullets=1)
    assert (busy.value.code, busy.value.detail) == (ErrorCode.BUSY, "2 research jobs running")
    assert jobs.get(third.job_id, "me", config) is third


async def test_shutdown_cancels_a_running_job_with_a_final_status_and_record(
    research: tuple[Dispatcher, WebServices], origin: Origin, nursery: trio.Nursery
) -> None:
    """At shutdown the jobs' nursery is cancelled: the job ends ``cancelled``, its result
    says so, and its research_job record is written."""
    dispatcher, web = research
    origin.routes["/searx/search"] = lambda seen: OriginReply(
        200, [("content-type", "application/json")], drip=True
    )
    jobs = ResearchJobs()
    web.jobs = jobs
    scope = trio.CancelScope()

    async def serve_jobs(*, task_status: trio.TaskStatus[None]) -> None:
        with scope:
            await jobs.serve(None, task_status=task_status)

    await nursery.start(serve_jobs)
    started = await ask(dispatcher, "research", ("QUESTION", QUESTION))
    job_id = started.get("JOB_ID") or ""
    scope.cancel()
    reply = await ask(dispatcher, "result", ("JOB_ID", job_id), ("WAIT_MS", "8000"))
    assert reply.fields[2:4] == (
        ("ERROR", "research_failed:shutting_down:research job cancelled"),
        ("JOB_ID", job_id),
    )
    assert reply.get("JOB_STATUS") == "cancelled"
    rows = outbox_of(dispatcher)._store.oldest(1000)
    records = [json.loads(w.data) for _, w in rows if w.type == "research_job"]
    assert [(r["op"], r["status"], r["outcome"]) for r in records] == [
        ("research", "cancelled", "FAIL shutting_down")
    ]


def test_model_answers_keep_only_bullets_citing_given_sources() -> None:
    content = "Intro line without cites\n1. First [2]\n- Second [1] [3]\n- Third [4]\n- [1]"
    body = json.dumps({"choices": [{"message": {"content": content}}]}).encode()
    first, second = Finding("First", (2,), "First"), Finding("Second", (1, 3), "Second")
    assert parse_answer(body, 3, 5) == (first, second)
    assert parse_answer(b"not json", 3, 5) == ()
    assert parse_answer(body, 3, 1) == (first,)


def test_heuristic_answer_is_deterministic_and_takes_turns_between_sources() -> None:
    sources = [
        Source(
            "https://a/", "A", "Storm surges flood low coasts often. Cats like warm spots.", "a"
        ),
        Source("https://b/", "B", "Surges are worst at spring tide every year.", "b"),
    ]
    first = heuristic_answer("storm surges", sources, 3)
    assert first == heuristic_answer("storm surges", sources, 3)
    assert [finding.sources for finding in first] == [(1,), (2,), (1,)]
    assert all(finding.quote == finding.text for finding in first)


async def test_a_job_past_job_timeout_s_fails_with_timeout(
    research: tuple[Dispatcher, WebServices], origin: Origin
) -> None:
    dispatcher, web = research
    origin.routes["/searx/search"] = lambda seen: OriginReply(
        200, [("content-type", "application/json")], drip=True
    )
    research_config = replace(web.config.docs.research, job_timeout_s=0.3)
    web.config = replace(web.config, docs=replace(web.config.docs, research=research_config))
    reply = await run_job(dispatcher)
    assert (reply.get("ERROR"), reply.get("JOB_STATUS")) == ("research_failed:timeout", "failed")


async def test_question_and_bullets_are_bounded_at_n_and_n_plus_1(
    research: tuple[Dispatcher, WebServices], origin: Origin
) -> None:
    dispatcher, _ = research
    searx_route(origin, [])
    at = await ask(dispatcher, "research", ("QUESTION", "q" * 400), ("MAX_BULLETS", "10"))
    over = await ask(dispatcher, "research", ("QUESTION", "q" * 401))
    assert at.status is Status.OK
    assert over.get("ERROR") == "invalid_field:QUESTION over 400 chars"


async def test_the_daemon_runs_research_jobs_and_its_board(daemon: Daemon) -> None:
    """csp-web serve composes the jobs' nursery: a research task over the socket starts a
    job (it is not_available without one) and its peer can ask for it; the board answers."""
    from csp_web.client.trio_client import open_client

    async with open_client(daemon.socket_path) as client:
        with trio.fail_after(WAIT_S):
            started = await client.call(Task("research", "WEB", "RESEARCH", "what is csp", ()))
            job_id = started.get("JOB_ID") or ""
            result = await client.call(Task("result", "WEB", "RESEARCH", job_id, ()))
            board = await client.call(Task("board", "WEB", "BOARD", None, ()))
    assert (started.status, started.get("DATA")) == (Status.OK, "status:running")
    assert result.get("JOB_ID") == job_id
    assert board.get("DATA") == "files:0"


@pytest.mark.parametrize(
    ("route", "key_env", "reason"),
    [
        (lambda seen: OriginReply(hangup=True), None, "fetch_failed:"),
        (
            lambda seen: OriginReply(200, [("content-type", "application/json")], b"{}"),
            None,
            "no_cited_bullets",
        ),
        (lambda seen: OriginReply(200, body=b""), "CSP_WEB_TEST_UNSET_KEY", "no_api_key"),
    ],
)
async def test_model_failures_fall_back_with_their_reason(
    research: tuple[Dispatcher, WebServices],
    origin: Origin,
    route: Callable[[Seen], OriginReply],
    key_env: str | None,
    reason: str,
) -> None:
    dispatcher, web = research
    serve(origin, "/surges", SURGES)
    searx_route(origin, ["/surges"])
    origin.routes["/v1/chat/completions"] = route
    research_config = replace(
        web.config.docs.research,
        llm_base_url=origin.url("api.test", "/v1"),
        llm_api_key_env=key_env,
    )
    web.config = replace(web.config, docs=replace(web.config.docs, research=research_config))
    reply = await run_job(dispatcher, ("MAX_SOURCES", "1"))
    assert reply.get("METHOD") == "heuristic"
    assert (reply.get("MODEL_ERROR") or "").startswith(reason)


# --- time limits: a source's own, and the job's ---------------------------------------------


def with_limits(web: WebServices, *, timeout_s: float, job_timeout_s: float) -> None:
    """``guard.timeout_s`` (one fetch's time) and ``research.job_timeout_s`` (the job's)."""
    research_config = replace(web.config.docs.research, job_timeout_s=job_timeout_s)
    web.config = replace(
        web.config,
        guard=replace(web.config.guard, timeout_s=timeout_s),
        docs=replace(web.config.docs, research=research_config),
    )


def research_records(dispatcher: Dispatcher) -> list[dict[str, Any]]:
    rows = outbox_of(dispatcher)._store.oldest(1000)
    return [json.loads(w.data) for _, w in rows if w.type == "research_job"]


async def test_a_dripping_source_is_cut_at_the_fetch_timeout_and_the_job_answers_from_the_rest(
    research: tuple[Dispatcher, WebServices], origin: Origin
) -> None:
    """A source is bounded as REQ:fetch bounds a URL (``guard.timeout_s``), not by the
    whole job's time: one that drips forever fails fetch_failed:timeout and the job ends
    done with the sources it read, long before its own limit."""
    dispatcher, web = research
    surges, tides = serve(origin, "/surges", SURGES), serve(origin, "/tides", TIDES)
    drip = origin.url("origin.test", "/drip")
    searx_route(origin, ["/surges", "/drip", "/tides"])
    with_limits(web, timeout_s=0.5, job_timeout_s=6.0)
    reply = await run_job(dispatcher, ("MAX_SOURCES", "3"), ("MAX_BULLETS", "2"))
    assert (reply.status, reply.get("DATA")) == (Status.OK, "status:done,bullets:2,sources:2")
    assert reply.get_all("CITE") == [f'{surges} "Storm surges"', f'{tides} "Tides"']
    assert ("fetch", drip, "fetch_failed:timeout") in steps(reply)
    (record,) = research_records(dispatcher)
    assert (record["outcome"], record["status"], record["sources"]) == ("OK", "done", 2)


async def test_a_job_at_its_time_limit_answers_partial_from_the_sources_it_read(
    research: tuple[Dispatcher, WebServices], origin: Origin
) -> None:
    """The job's limit comes before a source's own: the job answers PARTIAL from the two
    sources it read, names the one its limit cut (SOURCE_ERROR), and its record says so;
    nothing read is thrown away."""
    dispatcher, web = research
    surges, tides = serve(origin, "/surges", SURGES), serve(origin, "/tides", TIDES)
    drip = origin.url("origin.test", "/drip")
    searx_route(origin, ["/surges", "/drip", "/tides"])
    with_limits(web, timeout_s=WAIT_S, job_timeout_s=1.0)
    reply = await run_job(dispatcher, ("MAX_SOURCES", "3"), ("MAX_BULLETS", "2"))
    assert (reply.status, reply.get("ERROR")) == (Status.PARTIAL, "research_failed:timeout")
    assert reply.get("DATA") == "status:done,bullets:2,sources:2"
    assert reply.get_all("CITE") == [f'{surges} "Storm surges"', f'{tides} "Tides"']
    assert reply.get_all("SOURCE_ERROR") == [f"{drip} fetch_failed:timeout"]
    assert reply.get("JOB_STATUS") is None
    (record,) = research_records(dispatcher)
    assert (record["outcome"], record["status"], record["sources"]) == (
        "PARTIAL research_failed",
        "done",
        2,
    )
    assert record["source_errors"] == [f"{drip} fetch_failed:timeout"]


async def test_shutdown_while_sources_load_records_the_job_cancelled(
    research: tuple[Dispatcher, WebServices],
    origin: Origin,
    nursery: trio.Nursery,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Cancelled while its sources load (trio raises the cancel out of the reading nursery
    as a group), the job still ends ``cancelled``: its result, its log line and its record
    say so, with the sources it had read."""
    dispatcher, web = research
    caplog.set_level(logging.INFO, logger="specialists.web.research.run")
    serve(origin, "/surges", SURGES)
    # /surges and /status/404 are read at once, then /drip stands in for the one that failed:
    # its request means both earlier fetches have ended.
    searx_route(origin, ["/surges", "/status/404", "/drip"])
    jobs = ResearchJobs()
    web.jobs = jobs
    scope = trio.CancelScope()

    async def serve_jobs(*, task_status: trio.TaskStatus[None]) -> None:
        with scope:
            await jobs.serve(None, task_status=task_status)

    await nursery.start(serve_jobs)
    started = await ask(dispatcher, "research", ("QUESTION", QUESTION), ("MAX_SOURCES", "2"))
    job_id = started.get("JOB_ID") or ""
    with trio.fail_after(WAIT_S):
        await origin.wait_request("/drip")
    scope.cancel()
    reply = await ask(dispatcher, "result", ("JOB_ID", job_id), ("WAIT_MS", "8000"))
    assert reply.get("ERROR") == "research_failed:shutting_down:research job cancelled"
    assert reply.get("JOB_STATUS") == "cancelled"
    assert f"research job {job_id} cancelled at shutdown" in caplog.text
    (record,) = research_records(dispatcher)
    assert (record["status"], record["outcome"], record["sources"]) == (
        "cancelled",
        "FAIL shutting_down",
        1,
    )
    assert f"{origin.url('origin.test', '/drip')} fetch_failed:timeout" not in str(record)


async def test_after_a_restart_a_job_cancelled_at_shutdown_answers_cancelled_as_its_record(
    research: tuple[Dispatcher, WebServices], origin: Origin, nursery: trio.Nursery
) -> None:
    """The jobs table is the daemon's memory; what a shutdown cut outlives it (kept in the
    response cache, on disk): the next daemon's table (a fresh one here) answers the job
    cancelled with its steps, as its research_job record says, and to its peer alone."""
    dispatcher, web = research
    origin.routes["/searx/search"] = lambda seen: OriginReply(
        200, [("content-type", "application/json")], drip=True
    )
    web.jobs = ResearchJobs()
    scope = trio.CancelScope()

    async def serve_jobs(jobs: ResearchJobs, *, task_status: trio.TaskStatus[None]) -> None:
        with scope:
            await jobs.serve(None, task_status=task_status)

    await nursery.start(serve_jobs, web.jobs)
    started = await ask(dispatcher, "research", ("QUESTION", QUESTION))
    job_id = started.get("JOB_ID") or ""
    scope.cancel()
    before = await ask(dispatcher, "result", ("JOB_ID", job_id), ("WAIT_MS", "8000"))
    web.jobs = ResearchJobs()  # the restarted daemon's table: it never held the job
    await nursery.start(web.jobs.serve, None)
    after = await ask(dispatcher, "result", ("JOB_ID", job_id), ("INCLUDE_STEPS", "true"))
    other = await ask(dispatcher, "result", ("JOB_ID", job_id), peer=Peer("x", 1001, 9))
    assert after.fields == before.fields
    assert (after.get("ERROR"), after.get("JOB_STATUS")) == (
        "research_failed:shutting_down:research job cancelled",
        "cancelled",
    )
    assert other.get("ERROR") == f"unknown_research_job:{job_id}"
    (record,) = research_records(dispatcher)
    assert (record["job_id"], record["status"]) == (job_id, "cancelled")


async def test_a_job_cancelled_at_shutdown_keeps_no_password_of_its_question(
    research: tuple[Dispatcher, WebServices],
    origin: Origin,
    nursery: trio.Nursery,
    web_config: Config,
) -> None:
    """What a shutdown cut is kept in the response cache for ``job_ttl_s``: its QUESTION
    and its steps' targets (the search query) with any URL's userinfo written ``***@``, as
    its research_job record has them; no file under the state dir holds the password."""
    dispatcher, web = research
    searx_route(origin, ["/drip"])  # the search ends; the source it found is held
    web.jobs = ResearchJobs()
    scope = trio.CancelScope()

    async def serve_jobs(*, task_status: trio.TaskStatus[None]) -> None:
        with scope:
            await web.jobs.serve(None, task_status=task_status)

    await nursery.start(serve_jobs)
    question = "what is at https://user:s3cr3tpw@intranet.example/page ?"
    started = await ask(dispatcher, "research", ("QUESTION", question))
    job_id = started.get("JOB_ID") or ""
    with trio.fail_after(WAIT_S):
        await origin.wait_request("/drip")
    scope.cancel()
    reply = await ask(dispatcher, "result", ("JOB_ID", job_id), ("WAIT_MS", "8000"))
    assert reply.get("JOB_STATUS") == "cancelled"
    web.jobs = ResearchJobs()  # the restarted daemon's: it answers from the cache
    await nursery.start(web.jobs.serve, None)
    after = await ask(dispatcher, "result", ("JOB_ID", job_id), ("INCLUDE_STEPS", "true"))
    assert after.get("JOB_STATUS") == "cancelled"
    assert all("s3cr3tpw" not in value for _, value in after.fields), after
    kept = await web.cache.get(NAMESPACE, job_id)
    assert isinstance(kept, dict)
    assert kept["question"] == "what is at https://***@intranet.example/page ?"
    assert kept["steps"]
    assert "s3cr3tpw" not in json.dumps(kept["steps"])
    assert files_holding(web_config.daemon.state_dir, "s3cr3tpw") == []
