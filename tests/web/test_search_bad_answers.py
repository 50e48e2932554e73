"""A backend's answer it cannot read is its failure ``bad_response`` and the chain goes on:
JSON nested past what ``json`` survives, members of the wrong type, never an empty OK.
A well-formed answer with no results stays an answer."""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
import trio

from csp_web.config import Config, with_section
from csp_web.net import FetchResult
from protocol import Status
from specialists.web.config import SearchProvider, web_section
from specialists.web.search import brave, chain, perplexity, searxng
from specialists.web.search.base import Backend, BackendFailure, Hit
from specialists.web.search.ops_search import OPS
from tests.net._dns import FixedResolver
from tests.net._origin import Origin, Reply, Seen
from tests.web.fixtures import BRAVE_KEY, BRAVE_KEY_ENV, load, open_web_dispatcher, run, with_search
from tests.web.fixtures import serve as serve_file
from tests.web.test_search_backends import answer

WAIT_S = 10.0
DEEP = b"[" * 100_000 + b"]" * 100_000
ROUTES = {"brave": "/brave", "searxng": "/searx/search", "perplexity": "/pplx/search"}


@pytest.fixture(autouse=True)
def _brave_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BRAVE_KEY_ENV, BRAVE_KEY)


def _config(web_config: Config, origin: Origin, first: str) -> Config:
    """``first``, then DuckDuckGo; Perplexity keyed like Brave."""
    config = with_search(web_config, origin, order=[first, "duckduckgo"])
    search = web_section(config).search
    pplx = SearchProvider(
        "perplexity",
        base_url=origin.url("search.test", ROUTES["perplexity"]),
        api_key_env=BRAVE_KEY_ENV,
    )
    search = replace(search, providers={**search.providers, "perplexity": pplx})
    return with_section(config, "web", replace(web_section(config), search=search))


def _json_route(body: bytes) -> Callable[[Seen], Reply]:
    return lambda seen: Reply(200, [("content-type", "application/json")], body)


async def _search(config: Config, dns: FixedResolver, trust: ssl.SSLContext) -> Any:
    """A search for 5 results: DuckDuckGo's recorded page has 3, so a reply after the first
    backend failed is PARTIAL and names that failure (an OK reply would not)."""
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            return await run(
                dispatcher, "search", "URL_REFS", ("QUERY", "trio"), ("MAX_RESULTS", "5")
            )


@pytest.mark.parametrize(
    ("backend", "body"),
    [
        ("brave", DEEP),
        ("searxng", DEEP),
        ("perplexity", DEEP),
        ("brave", b'{"type": "search", "web": {"results": ' + DEEP + b"}}"),
        ("brave", b'{"type": "search", "web": {"results": "notalist"}}'),
        ("perplexity", b'{"results": "x", "choices": "x"}'),
        ("searxng", b'{"results": [{"url": "https://a.org/", "score": "high"}]}'),
    ],
)
async def test_an_unreadable_backend_answer_is_bad_response_and_the_next_backend_answers(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    backend: str,
    body: bytes,
) -> None:
    origin.routes[ROUTES[backend]] = _json_route(body)
    origin.routes["/ddg/html/"] = serve_file("ddg_results.html")
    reply = await _search(_config(web_config, origin, backend), dns, trust)
    assert (reply.status, reply.get("BACKEND")) == (Status.PARTIAL, "duckduckgo")
    (error,) = reply.get_all("BACKEND_ERROR")
    assert error.startswith(f"{backend}:bad_response ")


async def test_an_unreadable_answer_from_the_only_backend_fails_not_empty_ok(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    origin.routes["/brave"] = _json_route(b'{"type": "search", "web": {"results": "notalist"}}')
    config = with_search(web_config, origin, order=["brave"])
    reply = await _search(config, dns, trust)
    assert reply.status is Status.FAIL
    assert reply.get("ERROR") == "search_api_error:bad_response"


async def test_a_parse_that_raises_anything_is_bad_response_and_the_chain_goes_on(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The chain is under test, not the parser: a parser with a bug it has not met yet.
    def broken(result: FetchResult) -> list[Hit]:
        raise KeyError("a member the parser took for granted")

    monkeypatch.setitem(chain.KINDS, "brave", replace(brave.BACKEND, parse=broken))
    origin.routes["/brave"] = serve_file("brave_web_search.json")
    origin.routes["/ddg/html/"] = serve_file("ddg_results.html")
    reply = await _search(_config(web_config, origin, "brave"), dns, trust)
    assert (reply.status, reply.get("BACKEND")) == (Status.PARTIAL, "duckduckgo")
    assert reply.get_all("BACKEND_ERROR") == [
        "brave:bad_response an answer its parser could not read"
    ]


# --- each backend's members, sans I/O ------------------------------------------------------


def _brave(change: Any) -> bytes:
    document = json.loads(load("brave_web_search.json"))
    change(document)
    return json.dumps(document).encode()


def _item(key: str, value: object) -> Any:
    return lambda d: d["web"]["results"][0].__setitem__(key, value)


def _nested(outer: str, inner: str, value: object) -> Any:
    return lambda d: d["web"]["results"][0][outer].__setitem__(inner, value)


BRAVE_WRONG = {
    "web not an object": lambda d: d.__setitem__("web", ["x"]),
    "web.results not a list": lambda d: d["web"].__setitem__("results", "notalist"),
    "web.results an object": lambda d: d["web"].__setitem__("results", {"url": "x"}),
    "a result not an object": lambda d: d["web"]["results"].__setitem__(0, "x"),
    "url missing": lambda d: d["web"]["results"][0].pop("url"),
    "url a number": _item("url", 5),
    "title a number": _item("title", 5),
    "description a list": _item("description", ["x"]),
    "page_age a number": _item("page_age", 2024),
    "age an object": _item("age", {}),
    "language true": _item("language", True),
    "extra_snippets a string": _item("extra_snippets", "x"),
    "extra_snippets of numbers": _item("extra_snippets", [1]),
    "thumbnail a string": _item("thumbnail", "https://a.org/t.png"),
    "meta_url a number": _item("meta_url", 1),
    "meta_url.favicon a list": _nested("meta_url", "favicon", []),
    "profile.img a number": _nested("profile", "img", 2),
}


@pytest.mark.parametrize("change", list(BRAVE_WRONG))
def test_brave_answer_with_a_member_of_the_wrong_type_is_bad_response(change: str) -> None:
    with pytest.raises(BackendFailure) as failure:
        brave.parse(answer("brave_web_search.json", body=_brave(BRAVE_WRONG[change])))
    assert failure.value.reason == "bad_response"


@pytest.mark.parametrize(
    "body",
    [
        b'{"type": "news", "results": "x"}',
        b'{"type": "news", "results": [{"url": "https://a.org/", "thumbnail": {"src": 1}}]}',
        b'{"type": "search", "web": "x"}',
    ],
)
def test_brave_vertical_and_web_sections_of_the_wrong_type_are_bad_response(body: bytes) -> None:
    with pytest.raises(BackendFailure) as failure:
        brave.parse(answer("brave_web_search.json", body=body))
    assert failure.value.reason == "bad_response"


@pytest.mark.parametrize(
    "body",
    [
        load("brave_no_results.json"),
        b'{"type": "search", "web": {"results": []}}',
        b'{"type": "search", "web": null}',
        b'{"type": "search", "web": {"type": "search"}}',
        b'{"type": "news", "results": []}',
    ],
)
def test_brave_well_formed_answer_with_no_results_is_no_hits(body: bytes) -> None:
    assert brave.parse(answer("brave_web_search.json", body=body)) == []


def _searxng(**member: object) -> bytes:
    item = {"url": "https://a.org/", "title": "A", "content": "a", "score": 1.5, **member}
    return json.dumps({"results": [item]}).encode()


SEARXNG_WRONG = {
    "results not a list": b'{"results": {"url": "x"}}',
    "a result not an object": b'{"results": [1]}',
    "url missing": b'{"results": [{"title": "A"}]}',
    "url a number": _searxng(url=1),
    "title a number": _searxng(title=1),
    "content a list": _searxng(content=[]),
    "score a string": _searxng(score="9"),
    "score true": _searxng(score=True),
    "thumbnail a number": _searxng(thumbnail=1),
    "img_src an object": _searxng(img_src={}),
    "publishedDate a number": _searxng(publishedDate=1),
    "favicon a list": _searxng(favicon=["x"]),
    "language a number": _searxng(language=1),
    "unresponsive_engines a string": b'{"results": [], "unresponsive_engines": "x"}',
    "unresponsive_engines of strings": b'{"results": [], "unresponsive_engines": ["x"]}',
}


@pytest.mark.parametrize("change", list(SEARXNG_WRONG))
def test_searxng_answer_with_a_member_of_the_wrong_type_is_bad_response(change: str) -> None:
    with pytest.raises(BackendFailure) as failure:
        searxng.parse(answer("searxng_results.json", body=SEARXNG_WRONG[change]))
    assert failure.value.reason == "bad_response"


def test_searxng_well_formed_answers_read_integer_scores_and_no_results() -> None:
    (hit,) = searxng.parse(answer("searxng_results.json", body=_searxng(score=2)))
    assert hit.score == 2.0
    assert searxng.parse(answer("searxng_results.json", body=b'{"results": []}')) == []


PERPLEXITY_WRONG = {
    "results and choices strings": {"results": "x", "choices": "x"},
    "results an object": {"results": {"url": "https://a.org/"}},
    "a result not an object": {"results": ["https://a.org/"]},
    "url missing": {"results": [{"title": "A"}]},
    "url a number": {"results": [{"url": 1}]},
    "title a number": {"results": [{"url": "https://a.org/", "title": 1}]},
    "snippet a list": {"results": [{"url": "https://a.org/", "snippet": []}]},
    "date a number": {"results": [{"url": "https://a.org/", "date": 20240502}]},
    "choices a string": {"choices": "x"},
    "search_results a string": {"choices": [], "search_results": "x"},
    "a search result without url": {"choices": [], "search_results": [{"title": "A"}]},
    "citations a string": {"choices": [], "citations": "https://a.org/"},
    "citations of numbers": {"choices": [], "citations": [1]},
}


@pytest.mark.parametrize("change", list(PERPLEXITY_WRONG))
def test_perplexity_answer_with_a_member_of_the_wrong_type_is_bad_response(change: str) -> None:
    body = json.dumps(PERPLEXITY_WRONG[change]).encode()
    with pytest.raises(BackendFailure) as failure:
        perplexity.parse(answer("perplexity_search.json", body=body))
    assert failure.value.reason == "bad_response"


@pytest.mark.parametrize(
    "document", [{"results": []}, {"choices": []}, {"choices": [], "citations": []}]
)
def test_perplexity_well_formed_answer_with_no_results_is_no_hits(document: object) -> None:
    body = json.dumps(document).encode()
    assert perplexity.parse(answer("perplexity_search.json", body=body)) == []


def test_every_json_backend_reads_its_recorded_answers_as_before() -> None:
    backends: list[tuple[Backend, str]] = [
        (brave.BACKEND, "brave_web_search.json"),
        (brave.BACKEND, "brave_news_search.json"),
        (searxng.BACKEND, "searxng_results.json"),
        (perplexity.BACKEND, "perplexity_search.json"),
    ]
    for backend, name in backends:
        assert backend.parse(answer(name)), name
