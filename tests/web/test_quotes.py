"""Quotes located in stored text (issue 29): the locator itself, and the QUOTE / UNVERIFIED
lines summarize sends, with the extractive summariser and with a model (the local origin
plays an OpenAI-compatible endpoint, answering in the real chat-completions format)."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from csp_web.config import Config
from protocol import Reply, serialize
from specialists.web.pages.filekeys import content_of, held
from specialists.web.pages.ops_summarize import OPS
from specialists.web.pages.quotes import (
    SHOWN_SPAN_CHARS,
    fold,
    folded_quote,
    locate,
    locate_all,
    quoted,
)
from specialists.web.pages.summarize import parse_llm_bullets
from specialists.web.services import WebServices
from tests.net._origin import Origin
from tests.net._origin import Reply as OriginReply
from tests.web.conftest import DispatcherFactory
from tests.web.pages_support import serve
from tests.web.test_summarize import KEY, KEY_ENV, TEXT, completion, llm_dispatcher, summarize

_QUOTE = re.compile(r'(\d+) (text|fk_[a-z2-7]{16}) @(\d+)-(\d+) sha256:([0-9a-f]{64}) (".*")')
MARKDOWN = (
    "# Storms\n\nThe  tide \u201crose\u201d \u2014 fast,\n> said **the** "
    "[harbour master](https://x.test/hm) today\u2026\n\n- one item of a list"
)


def quotes(reply: Reply) -> list[tuple[int, str, int, int, str, str]]:
    """Each QUOTE line as (n, source, start, end, sha256, span)."""
    out = []
    for line in reply.get_all("QUOTE"):
        match = _QUOTE.fullmatch(line)
        assert match is not None, line
        n, source, start, end, digest, span = match.groups()
        out.append((int(n), source, int(start), int(end), digest, json.loads(span)))
    return out


def assert_spans_of(stored: str, reply: Reply) -> None:
    """Every QUOTE's span is ``stored[start:end]`` and its hash that span's SHA-256."""
    for _, _, start, end, digest, span in quotes(reply):
        assert stored[start:end] == span
        assert hashlib.sha256(span.encode()).hexdigest() == digest


def model_answer(*pairs: tuple[str, str]) -> OriginReply:
    """The model's JSON answer, as the prompt asks for it, in a chat completion."""
    content = json.dumps({"bullets": [{"text": t, "quote": q} for t, q in pairs]})
    return OriginReply(200, [("content-type", "application/json")], completion(content))


def test_a_quote_retyped_with_curly_quotes_dashes_and_spaces_is_found_in_the_stored_text() -> None:
    span = locate(fold(MARKDOWN), 'tide "rose" - fast, said the harbour master today...')
    assert span is not None
    assert MARKDOWN[span.start : span.end] == span.text
    assert span.text == (
        "tide \u201crose\u201d \u2014 fast,\n> said **the** [harbour master](https://x.test/hm) "
        "today\u2026"
    )
    assert span.sha256 == hashlib.sha256(span.text.encode()).hexdigest()


def test_a_quote_across_a_link_or_emphasis_spans_the_markup_in_the_stored_text() -> None:
    span = locate(fold(MARKDOWN), "said the harbour master")
    assert span is not None
    assert span.text == "said **the** [harbour master"
    assert locate(fold(MARKDOWN), "one item of a list") is not None  # list marker dropped


def test_words_not_in_the_text_are_not_found_and_case_still_counts() -> None:
    folded = fold(MARKDOWN)
    assert locate(folded, "the tide fell") is None
    assert locate(folded, "THE TIDE ROSE") is None
    assert locate(folded, "  **  ") is None  # folds to nothing: never "found" everywhere


def test_with_an_offset_the_nearest_of_several_matches_is_taken() -> None:
    stored = "tide one. tide two. tide three."
    spans = [locate(fold(stored), "tide", near=n) for n in (0, 9, 30)]
    assert [span.start if span else None for span in spans] == [0, 10, 20]


def test_cjk_text_is_matched_as_it_stands() -> None:
    stored = "潮の満ち引きは月の引力で起こる。\n大潮は新月と満月の頃に来る。"
    span = locate(fold(stored), "大潮は新月と満月の頃に来る。")
    assert span is not None
    assert (span.start, span.end) == (17, 31)


def test_a_span_with_control_characters_is_one_escaped_json_string_on_the_wire() -> None:
    text = 'a\x01b\x85c\u2028"d"\n'
    literal = quoted(text)
    assert json.loads(literal) == text
    assert not re.search(r"[\x00-\x1f\x7f-\x9f\u2028]", literal)


@given(
    st.text(st.sampled_from("ab c\n\t\u00a0\u201c\u201d\u2014\u2026\u2019"), max_size=40), st.data()
)
def test_any_piece_of_a_text_is_found_and_its_span_folds_to_the_piece(
    stored: str, data: st.DataObject
) -> None:
    """Whitespace and spellings folded, any cut of the text is found, and the span found
    reads as the piece once folded."""
    start = data.draw(st.integers(0, len(stored)))
    piece = stored[start : data.draw(st.integers(start, len(stored)))]
    span = locate(fold(stored), piece)
    if not folded_quote(piece):
        assert span is None
        return
    assert span is not None
    assert stored[span.start : span.end] == span.text
    assert folded_quote(span.text) == folded_quote(piece)


async def test_every_extractive_bullet_quotes_the_text_given(
    make_dispatcher: DispatcherFactory,
) -> None:
    reply = await summarize(make_dispatcher(OPS), TEXT, ("MAX_BULLETS", "3"))
    assert [(n, source) for n, source, *_ in quotes(reply)] == [
        (1, "text"),
        (2, "text"),
        (3, "text"),
    ]
    assert_spans_of(TEXT, reply)
    assert (reply.get("VERIFIED"), reply.get("UNVERIFIED_COUNT")) == ("3", "0")
    assert reply.get_all("UNVERIFIED") == []


async def test_a_page_summary_quotes_the_stored_text_of_its_held_filekey(
    make_dispatcher: DispatcherFactory, origin: Origin, web: WebServices
) -> None:
    page = (
        "<html><head><title>Surges</title></head><body><article><h1>Surges</h1>"
        '<p>The <a href="/surge">storm surge</a> of <strong>1953</strong> flooded the '
        "Dutch coast in a single night.</p><p>Engineers answered with the Delta Works, "
        "a chain of dams and barriers.</p></article></body></html>"
    )
    url = serve(origin, "/surges", page)
    reply = await summarize(make_dispatcher(OPS), None, ("URL", url), ("MAX_BULLETS", "2"))
    keys = {source for _, source, *_ in quotes(reply)}
    assert len(keys) == 1
    assert reply.get("VERIFIED") == "2"
    stored = content_of(await held(web, keys.pop()))
    assert_spans_of(stored, reply)
    assert quotes(reply)[0][5].startswith("The [storm surge](https://origin.test")  # the link


async def test_a_shift_jis_page_is_quoted_in_its_decoded_stored_text(
    make_dispatcher: DispatcherFactory, origin: Origin, web: WebServices
) -> None:
    body = (
        "<html><head><title>潮</title></head><body><article><h1>潮</h1>"
        "<p>潮の満ち引きは月の引力で起こる。大潮は新月と満月の頃に来る。</p>"
        "<p>高潮は台風の強い風が海水を岸に吹き寄せて起こる。</p></article></body></html>"
    ).encode("shift_jis")
    url = serve(origin, "/shio", body, "text/html; charset=shift_jis")
    reply = await summarize(make_dispatcher(OPS), None, ("URL", url), ("MAX_BULLETS", "2"))
    assert reply.get("UNVERIFIED_COUNT") == "0"
    assert quotes(reply)
    stored = content_of(await held(web, quotes(reply)[0][1]))
    assert_spans_of(stored, reply)


async def test_a_model_quote_retyped_is_found_and_an_invented_one_is_unverified(
    web_config: Config, web: WebServices, origin: Origin, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    retyped = "Spring tides come when the sun and the moon\n line  up"  # TEXT says it on one line
    origin.routes["/v1/chat/completions"] = lambda _seen: model_answer(
        ("Spring tides need sun and moon in line.", retyped),
        ("Tides are caused by whales.", "Whales push the tides up the coast."),
    )
    async with llm_dispatcher(web_config, web, origin) as dispatcher:
        reply = await summarize(dispatcher, TEXT)
    assert reply.get("METHOD") == "llm"
    assert [q[:2] for q in quotes(reply)] == [(1, "text")]
    assert quotes(reply)[0][5] == "Spring tides come when the sun and the moon line up"
    assert_spans_of(TEXT, reply)
    assert reply.get_all("UNVERIFIED") == ["2"]
    assert (reply.get("VERIFIED"), reply.get("UNVERIFIED_COUNT")) == ("1", "1")


async def test_verify_strict_leaves_the_invented_bullet_out_and_counts_it(
    web_config: Config, web: WebServices, origin: Origin, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    origin.routes["/v1/chat/completions"] = lambda _seen: model_answer(
        ("Tides are caused by whales.", "Whales push the tides up the coast."),
        ("Surges flood low coasts.", "Storm surges add wind-driven water to a spring tide"),
    )
    async with llm_dispatcher(web_config, web, origin) as dispatcher:
        reply = await summarize(dispatcher, TEXT, ("VERIFY", "strict"))
    assert reply.get_all("BULLET") == ["Surges flood low coasts."]
    assert [q[:2] for q in quotes(reply)] == [(1, "text")]
    assert reply.get("DATA") == "bullets:1"
    assert (reply.get("VERIFIED"), reply.get("UNVERIFIED_COUNT")) == ("1", "1")


async def test_verify_strict_with_no_bullet_found_fails_rather_than_answering_empty(
    web_config: Config, web: WebServices, origin: Origin, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    hostile = "Whales\x00 push\n" + "x" * 200_000  # a long quote with a NUL: cut, never found
    origin.routes["/v1/chat/completions"] = lambda _seen: model_answer(("Whales.", hostile))
    async with llm_dispatcher(web_config, web, origin) as dispatcher:
        marked = await summarize(dispatcher, TEXT)
        strict = await summarize(dispatcher, TEXT, ("VERIFY", "strict"))
    assert (marked.get("METHOD"), marked.get_all("UNVERIFIED")) == ("llm", ["1"])
    assert len(serialize(marked)) < 2000
    assert strict.get("ERROR") == "summarize_failed:no_verified_bullets"


async def test_summarize_refuses_a_verify_mode_it_does_not_know(
    make_dispatcher: DispatcherFactory,
) -> None:
    reply = await summarize(make_dispatcher(OPS), TEXT, ("VERIFY", "lenient"))
    assert reply.get("ERROR") == "invalid_field:VERIFY must be mark|strict"


def test_a_match_padded_past_the_shown_span_cap_is_passed_over() -> None:
    """A hostile page may pad a quote's words with megabytes of spaces or a link target: such
    a match is never shown (a later, tight one still is)."""
    padded = "storm" + " " * SHOWN_SPAN_CHARS + "surge. The storm surge came."
    span = locate(fold(padded), "storm surge", max_span_chars=SHOWN_SPAN_CHARS)
    assert span is not None
    assert span.text == "storm surge"
    at_cap = "storm" + " " * (SHOWN_SPAN_CHARS - 10) + "surge"  # a span of exactly the cap
    claim = [("Storm surge.", "storm surge")]
    assert locate_all(at_cap, claim, markdown=True)[0] is not None
    assert locate_all(at_cap.replace(" ", "  ", 1), claim, markdown=True) == [None]


def test_a_model_answer_cut_by_max_tokens_keeps_its_whole_bullets() -> None:
    """A JSON answer stopped mid-object (finish_reason "length") still gives the bullets it
    finished, each with its quote, rather than none."""
    cut = '{"bullets": [{"text": "Tides rise.", "quote": "Tides rise"}, {"text": "Surg'
    assert parse_llm_bullets(completion(cut), 5) == (("Tides rise.", "Tides rise"),)
