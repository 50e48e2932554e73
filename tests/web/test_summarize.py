"""The summarize op: extractive and deterministic by default, an OpenAI-compatible model (the
local origin plays it) when configured, falling back to extractive on any model failure."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from csp_web.app.memory_path import outbox_path
from csp_web.config import Config
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.memory.outbox import open_outbox
from protocol import Field, Reply, Status
from specialists.web.config import RateConfig, SummarizeConfig
from specialists.web.pages.ops_fetch import OPS as FETCH_OPS
from specialists.web.pages.ops_summarize import OPS
from specialists.web.pages.summarize import (
    BULLET_CHARS,
    clip,
    parse_llm_bullets,
    split_sentences,
    summarize_extractive,
)
from specialists.web.services import WebServices
from tests.harness import build_dispatcher
from tests.net._origin import Origin, Seen
from tests.net._origin import Reply as OriginReply
from tests.web.conftest import DispatcherFactory
from tests.web.pages_support import ARTICLE, PARAGRAPHS, TITLE, run, serve, web_audits
from tests.web.pdf_support import PDF_TYPE, fixture

TEXT = (
    "Tides rise and fall twice a day along the North Sea coast. "
    "The height of each tide depends on the moon and the sun. "
    "Spring tides come when the sun and the moon line up, and tides are then at their highest. "
    "My neighbour owns a red bicycle with three gears. "
    "Storm surges add wind-driven water to a spring tide and flood low coasts. "
    "The Delta Works protect the Dutch coast from storm surges and spring tides.\n\n"
    "Dr. Jansen measured a surge of 3.5 metres in 1953, e.g. at Vlissingen. "
    "Tides and surges are now forecast days ahead by the Dutch tide service."
)
KEY_ENV = "CSP_WEB_TEST_LLM_KEY"
KEY = "sk-test-not-a-real-key"


async def summarize(dispatcher: Dispatcher, inline: str | None, *fields: Field) -> Reply:
    return await run(dispatcher, "summarize", "SUMMARY", inline, *fields)


def bullets(reply: Reply) -> list[str]:
    return reply.get_all("BULLET")


async def test_extractive_summary_picks_the_top_sentences_in_document_order(
    make_dispatcher: DispatcherFactory,
) -> None:
    reply = await summarize(make_dispatcher(OPS), TEXT, ("MAX_BULLETS", "3"))
    got = bullets(reply)
    sentences = [s.text for s in split_sentences(TEXT)]
    assert reply.status is Status.OK
    assert (reply.get("DATA"), reply.get("METHOD"), reply.get("SCOPE")) == (
        "bullets:3",
        "extractive",
        "[]",
    )
    assert [sentences.index(b) for b in got] == sorted(sentences.index(b) for b in got)
    assert "My neighbour owns a red bicycle with three gears." not in got
    assert reply.get("CITE") is None


async def test_extractive_summary_is_deterministic(make_dispatcher: DispatcherFactory) -> None:
    dispatcher = make_dispatcher(OPS)
    first = await summarize(dispatcher, TEXT)
    second = await summarize(dispatcher, TEXT)
    assert first == second
    assert len(bullets(first)) == 5  # summarize.default_bullets


def test_sentences_do_not_end_at_abbreviations_initials_or_decimals() -> None:
    text = (
        "Dr. Smith arrived at 3.30 p.m. on Monday. The U.S. team saw a rise of 2.5 percent. "
        '"Is it real?" she asked. J. R. R. Tolkien wrote books, e.g. The Hobbit. Done!'
    )
    assert [s.text for s in split_sentences(text)] == [
        "Dr. Smith arrived at 3.30 p.m. on Monday.",
        "The U.S. team saw a rise of 2.5 percent.",
        '"Is it real?" she asked.',
        "J. R. R. Tolkien wrote books, e.g. The Hobbit.",
        "Done!",
    ]


def test_markdown_headings_links_code_and_list_markers_are_not_sentences() -> None:
    text = (
        "# Heading line\n\nSee [the report](https://x.test/r) for details. ![img](a.png)\n\n"
        "```\ncode = 1. Not prose.\n```\n\n- First item here.\n- Second item here."
    )
    assert [s.text for s in split_sentences(text)] == [
        "See the report for details.",
        "First item here.",
        "Second item here.",
    ]


def test_near_duplicate_sentences_make_one_bullet() -> None:
    text = (
        "The storm surge flooded the coast of Zeeland in 1953. "
        "In 1953 the storm surge flooded the coast of Zeeland. "
        "Engineers then designed the Delta Works to close the estuaries."
    )
    got = summarize_extractive(text, 3)
    assert len(got) == 2
    assert got[1] == "Engineers then designed the Delta Works to close the estuaries."


def test_every_bullet_is_one_line_of_at_most_300_characters() -> None:
    long_sentence = "Tides " + "and surges rise high " * 40 + "today."
    got = summarize_extractive(f"{long_sentence}\nShort tides line here today.", 2)
    assert all(len(b) <= BULLET_CHARS and "\n" not in b for b in got)
    assert got[0].endswith("…")
    assert clip("word " * 100) == clip("word " * 100, 300)
    assert len(clip("x" * 1000)) == BULLET_CHARS


@pytest.mark.parametrize(("value", "error"), [("1", None), ("20", None), ("0", "below 1")])
async def test_max_bullets_bounds_at_one_and_the_configured_cap(
    make_dispatcher: DispatcherFactory, value: str, error: str | None
) -> None:
    reply = await summarize(make_dispatcher(OPS), TEXT, ("MAX_BULLETS", value))
    if error is None:
        assert reply.status is Status.OK
        assert 1 <= len(bullets(reply)) <= int(value)
    else:
        assert reply.get("ERROR") == f"invalid_field:MAX_BULLETS {error}"


async def test_max_bullets_above_the_configured_cap_is_refused(
    make_dispatcher: DispatcherFactory, web: WebServices
) -> None:
    cap = web.config.summarize.max_bullets
    many = " ".join(f"Record alpha{i} mentions beta{i} and gamma{i} clearly." for i in range(40))
    at_cap = await summarize(make_dispatcher(OPS), many, ("MAX_BULLETS", str(cap)))
    above = await summarize(make_dispatcher(OPS), many, ("MAX_BULLETS", str(cap + 1)))
    assert len(bullets(at_cap)) == cap
    assert above.get("ERROR") == f"invalid_field:MAX_BULLETS above {cap}"


async def test_text_is_accepted_at_max_text_chars_and_refused_above(
    make_dispatcher: DispatcherFactory, web: WebServices
) -> None:
    limit = web.config.summarize.max_text_chars
    sentence = "Tides rise and fall twice a day. "
    text = (sentence * (limit // len(sentence) + 1))[:limit]
    at_limit = await summarize(make_dispatcher(OPS), text)
    above = await summarize(make_dispatcher(OPS), text + "x")
    assert at_limit.status is Status.OK
    assert above.get("ERROR") == f"invalid_field:TEXT over {limit} chars"


async def test_exactly_one_of_text_and_url_is_required(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    dispatcher = make_dispatcher(OPS)
    neither = await summarize(dispatcher, None)
    both = await summarize(dispatcher, TEXT, ("URL", origin.url("origin.test", "/x")))
    empty = await summarize(dispatcher, None, ("TEXT", "   "))
    assert neither.get("ERROR") == "missing_field:TEXT or URL"
    assert both.get("ERROR") == "invalid_field:give TEXT or URL, not both"
    assert empty.get("ERROR") == "invalid_field:TEXT is empty"


async def test_text_without_words_cannot_be_summarised(make_dispatcher: DispatcherFactory) -> None:
    reply = await summarize(make_dispatcher(OPS), "!!! ??? ...")
    assert reply.get("ERROR") == "summarize_failed:no_sentences"


async def test_summary_of_a_url_cites_the_page_and_logs_no_text(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    dispatcher = make_dispatcher(OPS)
    url = serve(origin, "/tides", ARTICLE)
    reply = await summarize(dispatcher, None, ("URL", url), ("MAX_BULLETS", "2"))
    assert reply.fields[:2] == (("SCOPE", "[origin.test]"), ("DATA", "bullets:2"))
    assert set(bullets(reply)) <= set(PARAGRAPHS)
    assert reply.fields[-2:] == (("METHOD", "extractive"), ("CITE", f'{url} "{TITLE}"'))
    await summarize(dispatcher, TEXT)
    targets = [record["target"] for record in web_audits(dispatcher)]
    assert targets == [url, f"text:{len(TEXT)}"]


async def test_summary_of_a_json_url_is_unsupported_content(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    url = serve(origin, "/d", '{"a": 1}', "application/json")
    reply = await summarize(make_dispatcher(OPS), None, ("URL", url))
    assert (reply.get("ERROR"), reply.get("URL")) == ("unsupported_content:application/json", url)


SHELL = '<html><body><div id="app"></div><script src="/a.js"></script></body></html>'


@pytest.mark.parametrize(
    ("path", "body", "content_type"),
    [
        ("/encrypted.pdf", fixture("encrypted"), PDF_TYPE),
        ("/scanned.pdf", fixture("scanned"), PDF_TYPE),
        ("/app", SHELL.encode(), "text/html; charset=utf-8"),
    ],
)
async def test_summary_of_a_url_with_no_text_names_the_cause_fetch_names(
    make_dispatcher: DispatcherFactory, origin: Origin, path: str, body: bytes, content_type: str
) -> None:
    """A page whose load yields no text (a PDF without a text layer, an app shell) fails
    with the code and detail fetch of the same URL answers (no_text_layer:encrypted,
    empty_content:script_only,...), not summarize_failed:no_sentences, and names the URL."""
    dispatcher = make_dispatcher([*OPS, *FETCH_OPS])
    url = serve(origin, path, body, content_type)
    fetched = await run(dispatcher, "fetch", "CONTENT", url)
    reply = await summarize(dispatcher, None, ("URL", url))
    assert fetched.status is Status.PARTIAL
    assert (reply.status, reply.get("ERROR")) == (Status.FAIL, fetched.get("ERROR"))
    assert (reply.get("SCOPE"), reply.get("URL")) == ("[origin.test]", url)


def completion(content: str) -> bytes:
    """A chat completion in OpenAI's response format."""
    return json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-4o-mini",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
    ).encode()


@asynccontextmanager
async def llm_dispatcher(
    web_config: Config, web: WebServices, origin: Origin
) -> AsyncIterator[Dispatcher]:
    """A dispatcher whose summarize uses the origin at api.test as its model endpoint."""
    summarize_config = SummarizeConfig(
        llm_base_url=origin.url("api.test", "/v1/"), llm_api_key_env=KEY_ENV
    )
    config = dataclasses.replace(web.config, summarize=summarize_config)
    services = dataclasses.replace(web, config=config)
    async with open_outbox(web_config.outbox_path, web_config.outbox, web_config.memory) as box:
        yield build_dispatcher(web_config, outbox_path(web_config, box), OPS, services)


async def test_with_a_model_configured_the_bullets_are_the_models(
    web_config: Config, web: WebServices, origin: Origin, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    seen: list[Seen] = []

    def model(request: Seen) -> OriginReply:
        seen.append(request)
        answer = "Here you go:\n- Tides follow the moon.\n- Surges flood coasts.\n* Dykes help."
        return OriginReply(200, [("content-type", "application/json")], completion(answer))

    origin.routes["/v1/chat/completions"] = model
    async with llm_dispatcher(web_config, web, origin) as dispatcher:
        reply = await summarize(dispatcher, TEXT, ("MAX_BULLETS", "2"))
        records = web_audits(dispatcher)
    assert bullets(reply) == ["Tides follow the moon.", "Surges flood coasts."]
    assert (reply.get("DATA"), reply.get("METHOD")) == ("bullets:2", "llm")
    request = json.loads(seen[0].body)
    assert seen[0].method == "POST"
    assert seen[0].headers["authorization"] == f"Bearer {KEY}"
    assert request["messages"][1] == {"role": "user", "content": TEXT}
    assert "at most 2" in request["messages"][0]["content"]
    assert origin.paths() == ["/v1/chat/completions"]  # an API call: no robots.txt
    assert records[0]["method"] == "llm"
    assert KEY not in json.dumps(records)


@pytest.mark.parametrize(
    "answer",
    [
        OriginReply(500, [("content-type", "application/json")], b'{"error": "overloaded"}'),
        OriginReply(200, [("content-type", "application/json")], b'{"choices": []}'),
        OriginReply(302, [("location", "https://other.test/steal")]),
        # json.loads: RecursionError (in the usage it is charged by, and in its answer)
        OriginReply(200, [("content-type", "application/json")], b"[" * 100_000 + b"]" * 100_000),
        OriginReply(200, [("content-type", "application/json")], b'{"usage": ' + b"[" * 100_000),
    ],
)
async def test_a_failing_model_falls_back_to_the_extractive_summary(
    web_config: Config,
    web: WebServices,
    origin: Origin,
    monkeypatch: pytest.MonkeyPatch,
    make_dispatcher: DispatcherFactory,
    answer: OriginReply,
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    origin.routes["/v1/chat/completions"] = lambda _seen: answer
    async with llm_dispatcher(web_config, web, origin) as dispatcher:
        reply = await summarize(dispatcher, TEXT)
    extractive = await summarize(make_dispatcher(OPS), TEXT)
    assert reply.get("METHOD") == "extractive"
    assert bullets(reply) == bullets(extractive)
    assert "/steal" not in origin.paths()  # the key never follows a redirect


async def test_an_unset_key_variable_skips_the_model(
    web_config: Config, web: WebServices, origin: Origin, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    async with llm_dispatcher(web_config, web, origin) as dispatcher:
        reply = await summarize(dispatcher, TEXT)
    assert reply.get("METHOD") == "extractive"
    assert origin.requests == []


def test_model_bullets_are_parsed_from_marked_lines_or_else_every_line() -> None:
    """An answer in lines (not the JSON asked for) still gives bullets, each quoting itself."""
    got = parse_llm_bullets(completion("1. One\n2) Two\n\n• Three"), 5)
    assert got == (("One", "One"), ("Two", "Two"), ("Three", "Three"))
    assert parse_llm_bullets(completion("Plain one\nPlain two"), 1) == (("Plain one",) * 2,)
    assert parse_llm_bullets(completion("- " + "y" * 400), 5)[0][0] == clip("y" * 400)
    assert parse_llm_bullets(b"not json", 5) == ()
    assert parse_llm_bullets(json.dumps({"choices": [{"message": {}}]}).encode(), 5) == ()


async def test_summarize_has_its_own_bucket_of_twenty_a_minute(
    make_dispatcher: DispatcherFactory, web: WebServices
) -> None:
    """Seed 001: web_summarize 20/min. N and N+1: twenty summaries in a burst, the 21st is
    rate_limited with RETRY_AFTER (a token comes in 3 s, past the op's wait for it)."""
    dispatcher = make_dispatcher(OPS)
    assert web.config.summarize.rate == RateConfig(20, 20)
    replies = [await summarize(dispatcher, TEXT, ("TIMEOUT_MS", "2000")) for _ in range(21)]
    assert [reply.status for reply in replies[:20]] == [Status.OK] * 20
    assert replies[20].get("ERROR") == "rate_limited:summarize"
    assert replies[20].get("RETRY_AFTER") == "3"
