"""Research answers whose bullets carry their support (issue 29): each bullet's quote is
looked for in the held snapshot of a source it cites, whether the heuristic or a model (the
local origin, answering in the chat-completions format) wrote it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace

from csp_web.core.dispatch.dispatcher import Dispatcher
from protocol import Status
from specialists.web.pages.filekeys import content_of, held
from specialists.web.services import WebServices
from tests.net._origin import Origin
from tests.net._origin import Reply as OriginReply
from tests.web.pages_support import serve
from tests.web.test_quotes import assert_spans_of, quotes
from tests.web.test_research import SURGES, TIDES, research, run_job, searx_route
from tests.web.test_summarize import completion

__all__ = ["research"]  # the fixture, used by name


def with_model(web: WebServices, origin: Origin, *bullets: Mapping[str, object]) -> None:
    """Make the origin's api.test the research model, answering ``bullets`` as JSON."""
    body = completion(json.dumps({"bullets": [dict(bullet) for bullet in bullets]}))
    origin.routes["/v1/chat/completions"] = lambda _seen: OriginReply(
        200, [("content-type", "application/json")], body
    )
    config = replace(web.config.docs.research, llm_base_url=origin.url("api.test", "/v1"))
    web.config = replace(web.config, docs=replace(web.config.docs, research=config))


async def test_every_heuristic_bullet_quotes_the_held_snapshot_of_its_source(
    research: tuple[Dispatcher, WebServices], origin: Origin
) -> None:
    dispatcher, web = research
    serve(origin, "/surges", SURGES), serve(origin, "/tides", TIDES)
    searx_route(origin, ["/surges", "/tides"])
    reply = await run_job(dispatcher, ("MAX_SOURCES", "2"), ("MAX_BULLETS", "3"))
    found = quotes(reply)
    assert [n for n, *_ in found] == [1, 2, 3]
    assert (reply.get("VERIFIED"), reply.get("UNVERIFIED_COUNT")) == ("3", "0")
    for key in {source for _, source, *_ in found}:
        stored = content_of(await held(web, key))
        for _n, source, start, end, _, span in found:
            if source == key:
                assert stored[start:end] == span
    assert found[0][5] == "When a storm surge meets a spring tide, low coasts can flood badly."


async def test_a_model_bullet_is_found_in_the_source_it_cites_and_an_invented_one_is_not(
    research: tuple[Dispatcher, WebServices], origin: Origin
) -> None:
    dispatcher, web = research
    serve(origin, "/surges", SURGES), serve(origin, "/tides", TIDES)
    searx_route(origin, ["/surges", "/tides"])
    with_model(
        web,
        origin,
        {"text": "Surges come from wind.", "sources": [2, 1], "quote": "strong  onshore\nwinds"},
        {"text": "The moon is cheese.", "sources": [1], "quote": "the moon is made of cheese"},
    )
    reply = await run_job(dispatcher, ("MAX_SOURCES", "2"))
    assert reply.get("METHOD") == "llm"
    assert reply.get_all("BULLET") == ["Surges come from wind. [2][1]", "The moon is cheese. [1]"]
    (found,) = quotes(reply)
    assert found[0] == 1
    assert found[5] == "strong onshore winds"
    stored = content_of(await held(web, found[1]))
    assert_spans_of(stored, reply)
    assert reply.get_all("UNVERIFIED") == ["2"]


async def test_verify_strict_leaves_invented_bullets_out_and_partial_when_none_is_left(
    research: tuple[Dispatcher, WebServices], origin: Origin
) -> None:
    dispatcher, web = research
    serve(origin, "/surges", SURGES)
    searx_route(origin, ["/surges"])
    invented = {"text": "The moon is cheese.", "sources": [1], "quote": "made of cheese"}
    with_model(web, origin, invented)
    reply = await run_job(dispatcher, ("MAX_SOURCES", "1"), ("VERIFY", "strict"))
    assert (reply.status, reply.get("ERROR")) == (
        Status.PARTIAL,
        "empty_content:no_verified_bullets",
    )
    assert reply.get("DATA") == "status:done,bullets:0,sources:1"
    assert (reply.get("VERIFIED"), reply.get("UNVERIFIED_COUNT")) == ("0", "1")
    assert reply.get_all("BULLET") == []
