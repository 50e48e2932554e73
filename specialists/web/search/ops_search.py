"""``REQ:search IN:WEB OUT:URL_REFS``: web search through the backend chain (seed 000).

    TASK REQ:search neo4j graph database python IN:WEB OUT:URL_REFS
    MAX_RESULTS 5

    STATUS OK
    SCOPE [neo4j.com,github.com]
    DATA url:https://neo4j.com/docs/,url:https://github.com/neo4j/neo4j-python-driver
    SNIPPET neo4j.com:"Official Neo4j Python driver documentation..."
    SNIPPET github.com:"Neo4j Python Driver - Bolt protocol implementation..."
    TITLE "Neo4j Docs"
    TITLE "neo4j/neo4j-python-driver"
    CITE https://neo4j.com/docs/ "Neo4j Docs"
    CITE https://github.com/neo4j/neo4j-python-driver "neo4j/neo4j-python-driver"
    BACKEND brave
    CACHED false

``PARTIAL`` (SPEC R-3) means fewer results than MAX_RESULTS while some backend that could
have added more failed; ``MISSING_RESULTS`` and one ``BACKEND_ERROR <name>:<reason> <hint>``
per failed backend say what is missing. When no backend answers, the reply is
``FAIL search_api_error:<reason>`` (seed 000) with the same BACKEND_ERROR lines and, for rate
limits, RETRY_AFTER. Only OK answers are cached (namespace ``search``, ``cache.search_ttl_s``),
keyed by the normalised query, MAX_RESULTS and FRESHNESS; NO_CACHE skips the lookup, and the
fresh answer still replaces the cached one.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import trio

from csp_web.core.api.context import OpContext
from csp_web.core.api.deadlines import work_seconds
from csp_web.core.api.errors import FieldError, OpError
from csp_web.core.api.fields import Example, FieldSpec, Params, ReplyField
from csp_web.core.api.ops import Op
from csp_web.core.api.replies import Result, cite
from protocol import ErrorCode, Field, Status
from specialists.web.config import SearchConfig

from ..pages.loading import load_page
from ..services import WebServices, web_audit
from . import BackendFailure, Hit, Outcome, SearchQuery, domain, pick, run_chain
from .services import SearchServices

log = logging.getLogger(__name__)

NAMESPACE = "search"
FRESHNESS = ("pd", "pw", "pm", "py")  # past day, week, month, year (seed 000, Brave's spelling)
QUERY_MAX_CHARS = 400  # Brave's documented cap on ``q``

FIELDS = (
    FieldSpec(
        "QUERY",
        required=True,
        repeat=True,
        max_chars=QUERY_MAX_CHARS,
        doc="what to search for; repeat for several, at most docs.max_queries (5), concurrently",
    ),
    FieldSpec(
        "MAX_RESULTS",
        "int",
        minimum=1,
        doc="results wanted: default search.default_results (5), at most search.max_results (10)",
    ),
    FieldSpec("FRESHNESS", "choice", choices=FRESHNESS, doc="past day, week, month or year"),
    FieldSpec("NO_CACHE", "bool", default=False, doc="skip the cached answer"),
)


@dataclass(frozen=True)
class Answer:
    """The chosen hits, the backends that gave them and the total one reported: what the
    cache keeps."""

    hits: tuple[Hit, ...]
    backends: tuple[str, ...]
    total: int | None = None


@dataclass
class Asked:
    """One query of the task and what became of it."""

    query: SearchQuery
    answer: Answer | None = None
    cached: bool = False
    partial: Outcome | None = None  # the chain's outcome when a backend failure left it short
    error: OpError | None = None


async def search(params: Params, ctx: OpContext, services: SearchServices) -> Result:
    """Answer each QUERY from the cache, or run the chain; several run concurrently. Raises
    OpError(search_api_error) when no backend answers (the first query's failure when every
    query failed) and FieldError when MAX_RESULTS or the QUERY count passes its cap."""
    texts = params.texts("QUERY")
    docs = services.config.docs
    if len(texts) > docs.max_queries:
        raise FieldError(ErrorCode.INVALID_FIELD, f"more than {docs.max_queries} QUERY fields")
    services.board.turn(ctx.peer, docs.board)
    with web_audit(" | ".join(texts)) as notes:
        asked = [Asked(_query(text, params, services.config.search)) for text in texts]
        fallback_s = ctx.config.tasks.default_timeout_ms / 1000
        deadline = trio.current_time() + work_seconds(default_s=fallback_s)
        no_cache = params.flag("NO_CACHE")
        async with trio.open_nursery() as nursery:
            for one in asked:
                nursery.start_soon(ask, services, one, no_cache, deadline)
        answered = [one for one in asked if one.answer is not None]
        backends = dict.fromkeys(b for one in answered if one.answer for b in one.answer.backends)
        notes.cache_hit = bool(answered) and all(one.cached for one in answered)
        notes.backend = ",".join(backends) or None
        return notes.attach(_render_one(asked[0]) if len(asked) == 1 else _render_many(asked))


async def ask(services: SearchServices, asked: Asked, no_cache: bool, deadline: float) -> None:
    query = asked.query
    material = cache_material(query)
    if not no_cache:
        cached = _from_cache(await services.cache.get(NAMESPACE, material))
        if cached is not None:
            asked.answer, asked.cached = cached, True
            return
    outcome = await run_chain(services, query, deadline=deadline)
    if not outcome.answered:
        asked.error = _failure(outcome)
        return
    hits = tuple(pick(outcome.hits, query.count))
    answer = Answer(hits, tuple(outcome.answered), outcome.total)
    if len(answer.hits) < query.count and outcome.tried_failures:
        asked.partial = outcome
    else:
        ttl_s = services.config.cache.search_ttl_s
        await services.cache.set(NAMESPACE, material, _to_cache(answer), ttl_s=ttl_s)
    asked.answer = answer
    start_prefetch(services, answer.hits)


def _query(text: str, params: Params, config: SearchConfig) -> SearchQuery:
    count = params.opt_integer("MAX_RESULTS") or config.default_results
    if count > config.max_results:
        raise FieldError(ErrorCode.INVALID_FIELD, f"MAX_RESULTS above {config.max_results}")
    return SearchQuery(" ".join(text.split()), count, params.opt_text("FRESHNESS"))


def cache_material(query: SearchQuery) -> dict[str, Any]:
    """The cache key's material: the query folded (NFKC, case, spaces), count, freshness."""
    folded = " ".join(unicodedata.normalize("NFKC", query.text).casefold().split())
    return {"q": folded, "n": query.count, "f": query.freshness}


def _to_cache(answer: Answer) -> dict[str, Any]:
    hits = [[hit.url, hit.title, hit.snippet, hit.score, hit.thumbnail] for hit in answer.hits]
    return {"hits": hits, "backends": list(answer.backends), "total": answer.total}


def _from_cache(value: Any) -> Answer | None:
    """The cached answer, or None for a miss or an entry of another shape."""
    try:
        hits = tuple(_cached_hit(*item) for item in value["hits"])
        total = value.get("total")
        return Answer(
            hits,
            tuple(str(name) for name in value["backends"]),
            total if isinstance(total, int) else None,
        )
    except (TypeError, KeyError, ValueError, AttributeError):
        return None


def _cached_hit(
    url: object, title: object, snippet: object, score: object = None, thumbnail: object = None
) -> Hit:
    return Hit(
        str(url),
        str(title),
        str(snippet),
        float(score) if isinstance(score, int | float) else None,
        str(thumbnail) if thumbnail is not None else None,
    )


def scores(hits: Sequence[Hit]) -> list[float]:
    """Each hit's relevance: the backend's own score when it gave one, else the reciprocal
    of its rank (1, 0.5, 0.333, ...)."""
    return [
        round(hit.score if hit.score is not None else 1 / (rank + 1), 3)
        for rank, hit in enumerate(hits)
    ]


def _render_one(asked: Asked) -> Result:
    if asked.error is not None:
        raise asked.error
    answer, query = asked.answer, asked.query
    assert answer is not None
    hits = answer.hits
    fields: list[Field] = [
        ("SNIPPET", f"{domain(hit.url)}:{json.dumps(hit.snippet, ensure_ascii=False)}")
        for hit in hits
    ]
    fields += [("TITLE", hit.title) for hit in hits]
    fields += [cite(hit.url, hit.title) for hit in hits]
    fields += [("BACKEND", ",".join(answer.backends)), ("CACHED", str(asked.cached).lower())]
    fields += _extras(query, answer)
    failed = asked.partial
    if failed is not None:
        fields.append(("MISSING_RESULTS", str(query.count - len(hits))))
        fields += _backend_errors(failed.tried_failures)
    scope = tuple(dict.fromkeys(domain(hit.url) for hit in hits))
    data = ",".join(f"url:{hit.url}" for hit in hits) or "none"
    status = Status.OK if failed is None else Status.PARTIAL
    return Result(data, scope=scope, fields=tuple(fields), status=status)


def _extras(query: SearchQuery, answer: Answer) -> list[Field]:
    """QUERY, TOTAL (when a backend reported one), SCORE per hit, THUMBNAIL when given."""
    fields: list[Field] = [("QUERY", query.text)]
    if answer.total is not None:
        fields.append(("TOTAL", str(answer.total)))
    fields += [
        ("SCORE", f"{hit.url} {score}")
        for hit, score in zip(answer.hits, scores(answer.hits), strict=True)
    ]
    fields += [("THUMBNAIL", f"{hit.url} {hit.thumbnail}") for hit in answer.hits if hit.thumbnail]
    return fields


def _render_many(asked: list[Asked]) -> Result:
    """One SEARCH line per query answered (then its HIT, SNIPPET and THUMBNAIL lines), one
    SEARCH_ERROR per query failed, CITE per page; FAIL when every query failed."""
    fields: list[Field] = []
    cites: dict[str, Field] = {}
    for number, one in enumerate(asked, 1):
        quoted = json.dumps(one.query.text, ensure_ascii=False)
        if one.answer is None:
            assert one.error is not None
            fields.append(
                ("SEARCH_ERROR", f"{number} {one.error.code}:{one.error.detail} {quoted}")
            )
            fields += [
                ("BACKEND_ERROR", f"{number} {v}")
                for k, v in one.error.fields
                if k == "BACKEND_ERROR"
            ]
            continue
        fields += _query_lines(number, one, quoted)
        cites.update((hit.url, cite(hit.url, hit.title)) for hit in one.answer.hits)
    answered = [one for one in asked if one.answer is not None]
    if not answered:
        first = asked[0].error
        assert first is not None
        raise OpError(first.code, first.detail, fields=fields)
    fields += cites.values()
    hits = [hit for one in answered if one.answer for hit in one.answer.hits]
    scope = tuple(dict.fromkeys(domain(hit.url) for hit in hits))
    partial = len(answered) < len(asked) or any(one.partial for one in asked)
    data = f"queries:{len(asked)},answered:{len(answered)},failed:{len(asked) - len(answered)}"
    return Result(data, scope, tuple(fields), Status.PARTIAL if partial else Status.OK)


def _query_lines(number: int, one: Asked, quoted: str) -> list[Field]:
    answer = one.answer
    assert answer is not None
    total = "unknown" if answer.total is None else str(answer.total)
    head = (
        f"{number} results:{len(answer.hits)} total:{total} backend:{','.join(answer.backends)} "
        f"cached:{str(one.cached).lower()}"
    )
    if one.partial is not None:
        head += f" missing:{one.query.count - len(answer.hits)}"
    fields: list[Field] = [("SEARCH", f"{head} {quoted}")]
    for hit, score in zip(answer.hits, scores(answer.hits), strict=True):
        title = json.dumps(hit.title, ensure_ascii=False)
        fields.append(("HIT", f"{number} {hit.url} score:{score} {title}"))
        snippet = json.dumps(hit.snippet, ensure_ascii=False)
        fields.append(("SNIPPET", f"{number} {domain(hit.url)}:{snippet}"))
        if hit.thumbnail:
            fields.append(("THUMBNAIL", f"{number} {hit.url} {hit.thumbnail}"))
    return fields


def _failure(outcome: Outcome) -> OpError:
    fields = _backend_errors(outcome.failures)
    retry_s = outcome.retry_after_s()
    if retry_s is not None:
        fields.append(("RETRY_AFTER", str(max(1, math.ceil(retry_s)))))
    return OpError(ErrorCode.SEARCH_API_ERROR, outcome.reason(), fields=fields)


def _backend_errors(failures: Sequence[tuple[str, BackendFailure]]) -> list[Field]:
    return [
        ("BACKEND_ERROR", f"{name}:{failure.reason} {failure.hint}".strip())
        for name, failure in failures
    ]


def start_prefetch(services: SearchServices, hits: Sequence[Hit]) -> bool:
    """Start loading the top ``search.prefetch_top`` result pages into the fetch cache, in
    WEB's background task, at background priority (seed 004). False when off, or when that
    task is not running.
    """
    top = services.config.search.prefetch_top
    if top <= 0 or not hits:
        return False
    return services.prefetch.submit(
        functools.partial(prefetch, services, [h.url for h in hits[:top]])
    )


async def prefetch(services: SearchServices, urls: Sequence[str]) -> None:
    """Load ``urls`` one after another with ``background=True``; a failure is only logged,
    since nobody waits for a prefetch and a crash here would take the nursery down."""
    for url in urls:
        deadline = trio.current_time() + services.config.guard.timeout_s
        try:
            await load_page(services, url, deadline=deadline, background=True)
        except OpError as exc:
            log.debug("prefetch of %s skipped: %s", url, exc)
        except Exception:
            log.warning("prefetch of %s failed", url, exc_info=True)


SEARCH_REPLIES = (
    ReplyField(
        "SNIPPET",
        "one query: one per hit; several: '<n> ...'",
        "<domain>:<snippet as a JSON string>",
    ),
    ReplyField("TITLE", "one query: one per hit", "the hit's title"),
    ReplyField("CITE", "one per hit", "the hit (R-4)"),
    ReplyField("BACKEND", "one query", "the backends that answered"),
    ReplyField("CACHED", "one query", "whether the answer came from the cache"),
    ReplyField("QUERY", "one query", "the query asked"),
    ReplyField("TOTAL", "one query, when the backend gave one", "its estimated total"),
    ReplyField("SCORE", "one query: one per hit", "<url> <relevance>"),
    ReplyField("THUMBNAIL", "a hit has one", "<url> <thumbnail url> (several: '<n> ...')"),
    ReplyField("MISSING_RESULTS", "PARTIAL, one query", "results fewer than asked"),
    ReplyField("BACKEND_ERROR", "a backend failed", "<backend>:<reason> <hint>"),
    ReplyField(
        "SEARCH",
        "several queries: one per query answered",
        '<n> results total backend cached "<query>"',
    ),
    ReplyField("HIT", "several queries: one per hit", '<n> <url> score:<s> "<title>"'),
    ReplyField(
        "SEARCH_ERROR", "several queries: one per query failed", '<n> <code>:<detail> "<query>"'
    ),
    ReplyField("RETRY_AFTER", "FAIL: rate limited everywhere", "seconds to wait"),
)
SEARCH_EXAMPLE = Example(
    ('TASK REQ:search "north sea tides" IN:WEB OUT:URL_REFS\nID 1\nMAX_RESULTS 2\n'),
    (
        "STATUS OK\n"
        "ID 1\n"
        "SCOPE [origin.test]\n"
        "DATA url:https://origin.test/tides,url:https://origin.test/moved\n"
        'SNIPPET origin.test:"The North Sea has two high tides every day."\n'
        'SNIPPET origin.test:"Times of high and low water for each port."\n'
        'TITLE "Tides"\n'
        'TITLE "Tide tables"\n'
        'CITE https://origin.test/tides "Tides"\n'
        'CITE https://origin.test/moved "Tide tables"\n'
        "BACKEND searxng\n"
        "CACHED true\n"
        'QUERY "north sea tides"\n'
        "TOTAL 2\n"
        "SCORE https://origin.test/tides 2.0\n"
        "SCORE https://origin.test/moved 1.0\n"
    ),
)


OPS: list[Op[WebServices]] = [
    Op(
        "search",
        "WEB",
        "URL_REFS",
        "web",
        search,
        fields=FIELDS,
        inline="QUERY",
        replies=SEARCH_REPLIES,
        example=SEARCH_EXAMPLE,
        doc="web search through the configured backends; SCOPE, DATA urls, SNIPPET, TITLE, CITE",
    )
]
