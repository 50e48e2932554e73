"""Quotes under a hostile page or model (issue 29 review): folding stays linear and small on
crafted text, never claims words the text lacks, and a model's quote must really hold the
bullet's support; verify reads offsets strictly. The model is the local origin playing an
OpenAI-compatible endpoint; pages come from the local HTTPS origin."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tracemalloc

import pytest

from csp_web.config import Config
from csp_web.core.dispatch.dispatcher import Dispatcher
from protocol import Status
from specialists.web.pages.quotes import (
    SHOWN_SPAN_CHARS,
    fold,
    is_markdown,
    locate,
    locate_all,
    located_at,
    supports,
)
from specialists.web.pages.summarize import clip, parse_llm_bullets
from specialists.web.research.llm import parse_answer
from specialists.web.services import WebServices
from tests.net._origin import Origin
from tests.net._origin import Reply as OriginReply
from tests.web.pages_support import serve
from tests.web.test_quotes import model_answer, quotes
from tests.web.test_summarize import KEY, KEY_ENV, TEXT, completion, llm_dispatcher, summarize
from tests.web.test_verify import docs, fetched_key, verify, workspace

__all__ = ["docs", "workspace"]  # the fixtures, used by name

CPU_SECONDS = 5  # the old, quadratic folding took minutes on each of these pages
CRAFTED = ("[", "![", "](", "[a](", "[a](x]", "[![](a](", "\n ", "\\", "*_`", "  ", "[1] ")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("module", "work"),
    [
        ("specialists.web.pages.quotes", "fold(page)"),
        ("specialists.web.pages.summarize", "summarize_extractive(page, 5)"),
        ("specialists.web.pages.summarize", "json_items('{' + page + '}')"),  # a model answer
        ("specialists.web.research.llm", "parse_answer(completion('a' + page + 'b'), 2, 5)"),
    ],
)
def test_reading_crafted_brackets_or_spaces_takes_linear_time_under_a_cpu_limit(
    module: str, work: str
) -> None:
    """200,000 repetitions of each bracket pattern are folded (and summarised) in a child
    process the kernel kills after CPU_SECONDS of CPU time: the sre engine holds the GIL, so
    a quadratic pattern would freeze the whole daemon. No wall-clock assertion: the rlimit
    is the bound."""
    script = textwrap.dedent(
        f"""
        import resource
        resource.setrlimit(resource.RLIMIT_CPU, ({CPU_SECONDS}, {CPU_SECONDS}))
        from {module} import *
        from tests.web.test_summarize import completion
        for unit in {CRAFTED!r}:
            page = unit * 200_000
            {work}
        print("folded")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert (done.returncode, done.stdout) == (0, "folded\n"), done.stderr[-500:]


def test_folding_keeps_only_the_folded_runs_so_memory_stays_near_the_text_size() -> None:
    """A text of dashes between letters folds every other character: the map costs a few
    machine integers per folded run, not an object per run (once ~230 bytes a character)."""
    text = "\u2013a" * 250_000
    tracemalloc.start()
    try:
        folded = fold(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert folded.text == "-a" * 250_000
    assert peak < 50 * len(text)


@pytest.mark.parametrize(
    ("stored", "quote"),
    [
        ("It costs 10*5 dollars.", "costs 105 dollars"),
        ("Let x_1 be the root.", "Let x1 be the root"),
        ("The tide `x`y rose.", "The tide xy rose"),
        ("The tide rose.", "> The tide rose"),
        ("The tide rose.", "- The tide rose"),
        ("The tide rose.", "# The tide rose"),
        ("The tide rose.\nThe sea fell.", "The tide rose. - The sea fell"),
        ("wait\u2026then go", "..then go"),
        ("wait\u2026then go", "wait.."),
    ],
)
def test_folding_never_finds_characters_the_stored_text_does_not_hold(
    stored: str, quote: str
) -> None:
    """Emphasis marks drop only as delimiters, a quote's own markers are characters it
    claims, and a match never starts or ends inside a folded character (``…``)."""
    assert locate(fold(stored), quote) is None


def test_markup_folds_only_in_markdown_text_and_stays_as_it_was_there() -> None:
    stored = "He said **the** [harbour master](https://x.test/) left."
    markdown, plain = fold(stored, markdown=True), fold(stored, markdown=False)
    assert (span := locate(markdown, "the harbour master left")) is not None
    assert span.text == "the** [harbour master](https://x.test/) left"
    assert locate(plain, "the harbour master left") is None
    assert locate(plain, "**the** [harbour master]") is not None
    assert locate(fold("wait\u2026then go"), "...then go") is not None
    assert [is_markdown(kind) for kind in ("html", "document", "text", "json")] == [
        True,
        True,
        False,
        False,
    ]


@pytest.mark.parametrize(
    "quote",
    ["The", ".", "is made of", "\u2014 \u2014 \u2014 \u2014 \u2014 \u2014 \u2014", "", "The moon"],
)
def test_a_quote_too_thin_to_hold_the_bullet_supports_nothing(quote: str) -> None:
    assert not supports(quote, "The moon is made of cheese.")


def test_a_quote_supports_a_bullet_when_long_enough_and_sharing_its_words() -> None:
    assert supports("the moon is made of green cheese", "The moon is made of cheese.")
    assert supports("strong onshore winds", "Surges come from wind.")  # one stem: wind
    assert supports("Tides", "Tides.")  # a bullet shorter than the minimum needs only itself
    assert not supports("strong onshore breezes today", "Surges come from wind.")
    assert not supports("prices 1050 dollars in all", "It costs 105.")  # numbers match whole
    assert not supports("tide " * (SHOWN_SPAN_CHARS // 5 + 1), "The tide.")  # never cut


def test_locating_a_bullet_checks_its_support_first() -> None:
    text = "The moon is made of rock. The tide rises twice a day."
    claims = [
        ("The moon is made of cheese.", "The"),
        ("Tides twice daily.", "tide rises twice a day"),
    ]
    invented, span = locate_all(text, claims, markdown=False)
    assert invented is None
    assert span is not None
    assert span.text == "tide rises twice a day"


async def test_a_model_quoting_a_word_or_a_stop_verifies_no_invented_bullet(
    web_config: Config, web: WebServices, origin: Origin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``"The"`` and ``"."`` are in any text; they do not make a bullet verified."""
    monkeypatch.setenv(KEY_ENV, KEY)
    origin.routes["/v1/chat/completions"] = lambda _seen: model_answer(
        ("The moon is made of cheese.", "The"),
        ("Whales cause tides.", "."),
        ("Surges flood low coasts.", "Storm surges add wind-driven water to a spring tide"),
    )
    async with llm_dispatcher(web_config, web, origin) as dispatcher:
        reply = await summarize(dispatcher, TEXT, ("VERIFY", "strict"))
    assert reply.get_all("BULLET") == ["Surges flood low coasts."]
    assert (reply.get("VERIFIED"), reply.get("UNVERIFIED_COUNT")) == ("1", "2")


async def test_a_long_quote_is_checked_whole_so_an_invented_tail_is_unverified(
    web_config: Config, web: WebServices, origin: Origin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once cut to 600 characters, a real opening let an invented tail pass unchecked."""
    monkeypatch.setenv(KEY_ENV, KEY)
    text = " ".join(["Tides rise and fall twice a day along the North Sea coast."] * 12)
    invented = text[:650] + " and the moon is made of cheese"
    origin.routes["/v1/chat/completions"] = lambda _seen: model_answer(
        ("Tides rise twice a day.", invented), ("Tides rise and fall.", text[:650])
    )
    async with llm_dispatcher(web_config, web, origin) as dispatcher:
        reply = await summarize(dispatcher, text)
    assert reply.get_all("UNVERIFIED") == ["1"]
    assert [(n, start, end) for n, _, start, end, *_ in quotes(reply)] == [(2, 0, 650)]


def test_a_quote_that_is_not_a_string_is_no_quote_and_a_missing_one_is_the_bullet() -> None:
    content = json.dumps(
        {
            "bullets": [
                {"text": "Tides rise twice a day.", "quote": 7},
                {"text": "Tides rise twice a day.", "quote": ""},
                {"text": "Tides rise twice a day."},
            ]
        }
    )
    assert parse_llm_bullets(completion(content), 5) == (
        ("Tides rise twice a day.", ""),
        ("Tides rise twice a day.", ""),
        ("Tides rise twice a day.", "Tides rise twice a day."),
    )


async def test_a_lone_surrogate_from_the_model_reaches_the_reply_as_a_replacement(
    web_config: Config, web: WebServices, origin: Origin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``\\ud800`` is valid JSON but no UTF-8: once it failed the whole reply as
    internal_error."""
    monkeypatch.setenv(KEY_ENV, KEY)
    content = '{"bullets": [{"text": "Surges \\ud800 come.", "quote": "Storm \\udc00 surges"}]}'
    origin.routes["/v1/chat/completions"] = lambda _seen: OriginReply(
        200, [("content-type", "application/json")], completion(content)
    )
    async with llm_dispatcher(web_config, web, origin) as dispatcher:
        reply = await summarize(dispatcher, TEXT)
    assert reply.status is Status.OK
    assert reply.get_all("BULLET") == ["Surges \ufffd come."]
    research = parse_answer(completion(content.replace('"quote"', '"sources": [1], "quote"')), 1, 5)
    assert [(f.text, f.quote) for f in research] == [("Surges \ufffd come.", "Storm \ufffd surges")]
    assert clip("a\udfffb") == "a\ufffdb"


def test_a_quote_at_its_claimed_offsets_is_found_however_often_it_occurs() -> None:
    text = "Tide turns. " * 1500
    folded = fold(text, markdown=False)
    at = 1400 * 12
    span = located_at(folded, "Tide turns.", at)
    assert span is not None
    assert (span.start, span.end) == (at, at + 11)
    assert located_at(folded, "Tide turns.", at + 1) is None
    assert located_at(fold("wait\u2026then go"), "..then go", 4) is None


async def test_verify_answers_found_at_the_claimed_place_past_the_occurrence_cap(
    docs: Dispatcher, origin: Origin
) -> None:
    text = "Tide turns. " * 1500
    key = await fetched_key(docs, serve(origin, "/many.txt", text, "text/plain; charset=utf-8"))
    at = 1400 * 12
    reply = await verify(
        docs,
        ("FILE_KEY", key),
        ("QUOTE", f"@{at}-{at + 11} Tide turns."),
        ("QUOTE", f"@{at}-{at + 5} Tide turns."),  # the start is right, the end miscounted
        ("QUOTE", f"@{at + 1}-{at + 12} Tide turns."),
    )
    assert reply.get_all("QUOTE")[0].startswith(f"1 found @{at}-{at + 11} sha256:")
    assert reply.get_all("QUOTE")[1].startswith(f"2 found @{at}-{at + 11} sha256:")
    assert reply.get_all("QUOTE")[2].startswith("3 moved @")
    assert (reply.get("FOUND"), reply.get("MOVED")) == ("2", "1")


async def test_verify_refuses_offsets_that_are_negative_reversed_or_past_the_text(
    docs: Dispatcher, origin: Origin
) -> None:
    text = "The tide turns twice a day."
    key = await fetched_key(docs, serve(origin, "/t.txt", text, "text/plain; charset=utf-8"))
    n = len(text)
    cases = [
        ("@99999999999-1 n/a.", "invalid_field:QUOTE 1: @start-end is empty"),
        ("@-1-3 The tide", "invalid_field:QUOTE 1: @start-end is negative"),
        ("@4-9", "invalid_field:QUOTE 1 holds no words"),
        (f"@0-{n + 1} {text}", f"invalid_field:QUOTE 1: @start-end past the text ({n} chars)"),
    ]
    for quote, error in cases:
        reply = await verify(docs, ("FILE_KEY", key), ("QUOTE", quote))
        assert (reply.status, reply.get("ERROR")) == (Status.FAIL, error), quote
    at_length = await verify(docs, ("FILE_KEY", key), ("QUOTE", f"@0-{n} {text}"))
    assert at_length.get_all("QUOTE")[0].startswith(f"1 found @0-{n} sha256:")
