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
limits, RETRY_AFTER. Only OK answers are cached (``answer_cache``), keyed by the normalised
query, MAX_RESULTS, FRESHNESS and the filters; NO_CACHE skips the lookup, and the fresh answer
still replaces the cached one. The filters, ranking and prefetch fields are docs/documents.md's
(issue 27).
"""

from __future__ import annotations

import datetime
import functools
import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import trio

from csp_web.core.api import budget
from csp_web.core.api.context import OpContext
from csp_web.core.api.deadlines import work_seconds
from csp_web.core.api.errors import FieldError, OpError
from csp_web.core.api.fields import Params
from csp_web.core.api.ops import READS_WEB, Op
from csp_web.core.api.replies import Result, cite
from protocol import ErrorCode, Field, Status
from specialists.web.config import SearchConfig

from ..pages.fetch_fields import prepare_fetch
from ..pages.loading import load_page
from ..services import WebServices, web_audit
from . import BackendFailure, Hit, Outcome, SearchQuery, domain, pick, run_chain
from .answer_cache import NAMESPACE, Answer, cache_material, from_cache, to_cache
from .declared import FIELDS, SEARCH_EXAMPLE, SEARCH_REPLIES
from .services import SearchServices
from .task_query import Ranking, read_query, read_ranking

log = logging.getLogger(__name__)


@dataclass
class Asked:
    """One query of the task and what became of it."""

    query: SearchQuery
    ranking: Ranking | None = None  # None: search.max_per_domain and search.mode
    prefetch: int | None = None  # the task's PREFETCH; None: search.prefetch_top
    answer: Answer | None = None
    cached: bool = False
    partial: Outcome | None = None  # the chain's outcome when a backend failure left it short
    error: OpError | None = None
    prefetched: int | None = None  # pages queued for prefetch; None when none was asked


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
        config = services.config.search
        today = datetime.datetime.now(datetime.UTC).date()
        ranking = read_ranking(params, config)
        top = _prefetch_top(params, config)
        asked = [Asked(read_query(text, params, config, today), ranking, top) for text in texts]
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
    config = services.config.search
    query = asked.query
    ranking = asked.ranking or Ranking(config.max_per_domain, config.mode)
    material = cache_material(query, ranking)
    if not no_cache:
        cached = from_cache(await services.cache.get(NAMESPACE, material))
        if cached is not None:
            asked.answer, asked.cached = cached, True
            _prefetch_answer(services, asked)
            return
    outcome = await run_chain(services, query, deadline=deadline, mode=ranking.mode)
    if not outcome.answered:
        asked.error = _failure(outcome)
        return
    hits = tuple(pick(outcome.hits, query.count, ranking.max_per_domain))
    dropped = tuple(outcome.tried_failures) if ranking.mode == "fuse" else ()
    answer = Answer(hits, tuple(outcome.answered), outcome.total, dropped)
    if len(answer.hits) < query.count and outcome.tried_failures:
        asked.partial = outcome
    else:
        ttl_s = services.config.cache.search_ttl_s
        await services.cache.set(NAMESPACE, material, to_cache(answer), ttl_s=ttl_s)
    asked.answer = answer
    _prefetch_answer(services, asked)


def _prefetch_top(params: Params, config: SearchConfig) -> int:
    top = params.opt_integer("PREFETCH")
    if top is None:
        return config.prefetch_top
    if top > config.max_results:
        raise FieldError(ErrorCode.INVALID_FIELD, f"PREFETCH above {config.max_results}")
    return top


def _prefetch_answer(services: SearchServices, asked: Asked) -> None:
    """Queue the answer's top pages for prefetch; ``asked.prefetched`` says how many (the
    reply's PREFETCHED), left None when none was asked."""
    top = services.config.search.prefetch_top if asked.prefetch is None else asked.prefetch
    if top > 0 and asked.answer is not None:
        asked.prefetched = start_prefetch(services, asked.answer.hits, top)


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
    elif answer.dropped and not asked.cached:
        fields += _backend_errors(answer.dropped)
    if asked.prefetched is not None:
        fields.append(("PREFETCHED", str(asked.prefetched)))
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
    return fields + [field for hit in answer.hits for field in hit_fields(hit)]


def hit_fields(hit: Hit) -> list[Field]:
    """PUBLISHED, EXTRA_SNIPPET (each), FAVICON, LANG and SOURCES of ``hit``, where given."""
    fields: list[Field] = []
    if hit.published:
        fields.append(("PUBLISHED", f"{hit.url} {hit.published}"))
    fields += [
        ("EXTRA_SNIPPET", f"{hit.url} {json.dumps(text, ensure_ascii=False)}")
        for text in hit.extra_snippets
    ]
    if hit.favicon:
        fields.append(("FAVICON", f"{hit.url} {hit.favicon}"))
    if hit.lang:
        fields.append(("LANG", f"{hit.url} {hit.lang}"))
    if hit.sources:
        fields.append(("SOURCES", f"{hit.url} {','.join(hit.sources)}"))
    return fields


def hit_attributes(hit: Hit) -> str:
    """The same data as ``hit_fields`` as a HIT line's attributes, each ``name:<JSON>``
    with a leading space (``published:"2024-05-02" extra_snippets:["..."]``); empty when
    the hit has none."""
    values: dict[str, object] = {
        "published": hit.published,
        "extra_snippets": list(hit.extra_snippets) or None,
        "favicon": hit.favicon,
        "lang": hit.lang,
        "sources": ",".join(hit.sources) or None,
    }
    return "".join(
        f" {name}:{json.dumps(value, ensure_ascii=False)}"
        for name, value in values.items()
        if value is not None
    )


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
    prefetched = [one.prefetched for one in answered if one.prefetched is not None]
    if prefetched:
        fields.append(("PREFETCHED", str(sum(prefetched))))
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
        attributes = hit_attributes(hit)
        fields.append(("HIT", f"{number} {hit.url} score:{score}{attributes} {title}"))
        snippet = json.dumps(hit.snippet, ensure_ascii=False)
        fields.append(("SNIPPET", f"{number} {domain(hit.url)}:{snippet}"))
        if hit.thumbnail:
            fields.append(("THUMBNAIL", f"{number} {hit.url} {hit.thumbnail}"))
    return fields


def _failure(outcome: Outcome) -> OpError:
    """search_api_error naming the chain's reason; not_available naming the first backend
    when none of those tried has the VERTICAL asked."""
    fields = _backend_errors(outcome.failures)
    retry_s = outcome.retry_after_s()
    if retry_s is not None:
        fields.append(("RETRY_AFTER", str(max(1, math.ceil(retry_s)))))
    if outcome.reason() == "not_available":
        first = next(f for _, f in outcome.tried_failures if f.reason == "not_available")
        return OpError(ErrorCode.NOT_AVAILABLE, first.hint, fields=fields)
    return OpError(ErrorCode.SEARCH_API_ERROR, outcome.reason(), fields=fields)


def _backend_errors(failures: Sequence[tuple[str, BackendFailure]]) -> list[Field]:
    return [
        ("BACKEND_ERROR", f"{name}:{failure.reason} {failure.hint}".strip())
        for name, failure in failures
    ]


def start_prefetch(services: SearchServices, hits: Sequence[Hit], top: int) -> int:
    """Start loading the top ``top`` result pages into the fetch cache, in WEB's background
    task, at background priority (seed 004); the number queued: 0 when ``top`` is 0 or that
    task is not running (``csp-web replay`` runs it as the daemon does)."""
    urls = [hit.url for hit in hits[:top]]
    job = budget.bound(functools.partial(prefetch, services, urls))  # the search's budget
    if not urls or not services.prefetch.submit(job):
        return 0
    return len(urls)


async def prefetch(services: SearchServices, urls: Sequence[str]) -> None:
    """Load ``urls`` one after another with ``background=True`` and prepare what a default
    fetch of each computes (``prepare_fetch``: bench/prefetch.py measured a fetch of a page
    only loaded at 3.5 times a cache hit, its SUMMARY being most of it); a failure is only
    logged, since nobody waits for a prefetch and a crash here would take the nursery down."""
    for url in urls:
        deadline = trio.current_time() + services.config.guard.timeout_s
        try:
            await budget.take("fetches")
            page = await load_page(services, url, deadline=deadline, background=True)
            await prepare_fetch(services, page)
        except OpError as exc:
            log.debug("prefetch of %s skipped: %s", url, exc)
        except Exception:
            log.warning("prefetch of %s failed", url, exc_info=True)


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
        effects=READS_WEB,
    )
]
