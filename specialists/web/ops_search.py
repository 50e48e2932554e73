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

from csp_web.config import SearchConfig
from csp_web.core.context import OpContext
from csp_web.core.deadlines import work_seconds
from csp_web.core.errors import FieldError, OpError
from csp_web.core.fields import FieldSpec, Params
from csp_web.core.ops import Op
from csp_web.core.replies import Result, cite
from protocol import ErrorCode, Field, Status

from .pages import load_page
from .search import BackendFailure, Hit, Outcome, SearchQuery, domain, pick, run_chain
from .services import WebServices, record_web_op

log = logging.getLogger("csp_web.search")

NAMESPACE = "search"
FRESHNESS = ("pd", "pw", "pm", "py")  # past day, week, month, year (seed 000, Brave's spelling)
QUERY_MAX_CHARS = 400  # Brave's documented cap on ``q``

FIELDS = (
    FieldSpec("QUERY", required=True, max_chars=QUERY_MAX_CHARS, doc="what to search for"),
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
    """The chosen hits and the backends that gave them: what the cache keeps."""

    hits: tuple[Hit, ...]
    backends: tuple[str, ...]


async def search(params: Params, ctx: OpContext, services: WebServices) -> Result:
    """Answer from the cache, or run the chain; raises OpError(search_api_error) when no
    backend answers and FieldError when MAX_RESULTS passes the configured cap."""
    async with record_web_op(ctx, "search", params.text("QUERY")) as details:
        query = _query(params, services.config.search)
        material = cache_material(query)
        if not params.flag("NO_CACHE"):
            cached = _from_cache(await services.cache.get(NAMESPACE, material))
            if cached is not None:
                details.update(cache_hit=True, backend=",".join(cached.backends))
                return _render(cached, query, cached=True)
        fallback_s = ctx.config.tasks.default_timeout_ms / 1000
        deadline = trio.current_time() + work_seconds(default_s=fallback_s)
        outcome = await run_chain(services, query, deadline=deadline)
        details["backend"] = ",".join(outcome.answered) or None
        if not outcome.answered:
            raise _failure(outcome)
        answer = Answer(tuple(pick(outcome.hits, query.count)), tuple(outcome.answered))
        partial = len(answer.hits) < query.count and bool(outcome.tried_failures)
        if not partial:
            ttl_s = services.config.cache.search_ttl_s
            await services.cache.set(NAMESPACE, material, _to_cache(answer), ttl_s=ttl_s)
        start_prefetch(services, answer.hits)
        return _render(answer, query, cached=False, failed=outcome if partial else None)


def _query(params: Params, config: SearchConfig) -> SearchQuery:
    count = params.opt_integer("MAX_RESULTS") or config.default_results
    if count > config.max_results:
        raise FieldError(ErrorCode.INVALID_FIELD, f"MAX_RESULTS above {config.max_results}")
    text = " ".join(params.text("QUERY").split())
    return SearchQuery(text, count, params.opt_text("FRESHNESS"))


def cache_material(query: SearchQuery) -> dict[str, Any]:
    """The cache key's material: the query folded (NFKC, case, spaces), count, freshness."""
    folded = " ".join(unicodedata.normalize("NFKC", query.text).casefold().split())
    return {"q": folded, "n": query.count, "f": query.freshness}


def _to_cache(answer: Answer) -> dict[str, Any]:
    hits = [[hit.url, hit.title, hit.snippet] for hit in answer.hits]
    return {"hits": hits, "backends": list(answer.backends)}


def _from_cache(value: Any) -> Answer | None:
    """The cached answer, or None for a miss or an entry of another shape."""
    try:
        hits = tuple(
            Hit(str(url), str(title), str(snippet)) for url, title, snippet in value["hits"]
        )
        return Answer(hits, tuple(str(name) for name in value["backends"]))
    except (TypeError, KeyError, ValueError):
        return None


def _render(
    answer: Answer, query: SearchQuery, *, cached: bool, failed: Outcome | None = None
) -> Result:
    hits = answer.hits
    fields: list[Field] = [
        ("SNIPPET", f"{domain(hit.url)}:{json.dumps(hit.snippet, ensure_ascii=False)}")
        for hit in hits
    ]
    fields += [("TITLE", hit.title) for hit in hits]
    fields += [cite(hit.url, hit.title) for hit in hits]
    fields += [("BACKEND", ",".join(answer.backends)), ("CACHED", str(cached).lower())]
    if failed is not None:
        fields.append(("MISSING_RESULTS", str(query.count - len(hits))))
        fields += _backend_errors(failed.tried_failures)
    scope = tuple(dict.fromkeys(domain(hit.url) for hit in hits))
    data = ",".join(f"url:{hit.url}" for hit in hits) or "none"
    status = Status.OK if failed is None else Status.PARTIAL
    return Result(data, scope=scope, fields=tuple(fields), status=status)


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


def start_prefetch(services: WebServices, hits: Sequence[Hit]) -> bool:
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


async def prefetch(services: WebServices, urls: Sequence[str]) -> None:
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


OPS: list[Op[WebServices]] = [
    Op(
        "search",
        "WEB",
        "URL_REFS",
        "web",
        search,
        fields=FIELDS,
        inline="QUERY",
        doc="web search through the configured backends; SCOPE, DATA urls, SNIPPET, TITLE, CITE",
    )
]
