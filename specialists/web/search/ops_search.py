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

import datetime
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
from csp_web.core.api.context import OpContext
from csp_web.core.api.deadlines import work_seconds
from csp_web.core.api.errors import FieldError, OpError
from csp_web.core.api.fields import Example, FieldSpec, Params, ReplyField
from csp_web.core.api.ops import Op
from csp_web.core.api.replies import Result, cite
from protocol import ErrorCode, Field, Status

from ..pages.fetch_fields import prepare_fetch
from ..pages.loading import load_page
from ..services import WebServices, web_audit
from . import BackendFailure, Hit, Outcome, SearchQuery, domain, pick, run_chain
from .base import VERTICALS
from .services import SearchServices
from .task_query import MAX_SITES, Ranking, read_query, read_ranking

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
    FieldSpec(
        "SITE",
        repeat=True,
        max_chars=253,
        doc=f"only hits on this host or under it; repeat for several (at most {MAX_SITES})",
    ),
    FieldSpec(
        "EXCLUDE_SITE",
        repeat=True,
        max_chars=253,
        doc=f"no hits on this host or under it; repeatable (at most {MAX_SITES})",
    ),
    FieldSpec("AFTER", max_chars=10, doc="published on or after this date (YYYY-MM-DD, UTC)"),
    FieldSpec("BEFORE", max_chars=10, doc="published on or before this date (YYYY-MM-DD, UTC)"),
    FieldSpec(
        "UNDATED",
        "choice",
        choices=("keep", "drop"),
        default="keep",
        doc="with AFTER/BEFORE: keep or drop hits whose backend gave no date",
    ),
    FieldSpec("COUNTRY", max_chars=2, doc="results for this country (ISO 3166-1 alpha-2)"),
    FieldSpec("LANG", max_chars=12, doc="results in this language (en, de, pt-br)"),
    FieldSpec(
        "VERTICAL",
        "choice",
        choices=VERTICALS,
        default="web",
        doc="web, news, images or videos (Brave, SearXNG); other backends are skipped",
    ),
    FieldSpec(
        "MAX_PER_DOMAIN",
        "int",
        minimum=1,
        doc="results a domain may fill before others: default search.max_per_domain (1)",
    ),
    FieldSpec(
        "PREFETCH",
        "int",
        minimum=0,
        doc="load the top N result pages into the fetch cache in the background; "
        "default search.prefetch_top (0)",
    ),
    FieldSpec(
        "MODE",
        "choice",
        choices=("fallback", "fuse"),
        doc="fallback: backends in turn; fuse: all at once, fused; default search.mode",
    ),
)


@dataclass(frozen=True)
class Answer:
    """The chosen hits, the backends that gave them and the total one reported: what the
    cache keeps."""

    hits: tuple[Hit, ...]
    backends: tuple[str, ...]
    total: int | None = None
    # A fresh fused answer: the backends that dropped out of the fusion (BACKEND_ERROR);
    # not cached, since a cached answer asked no backend.
    dropped: tuple[tuple[str, BackendFailure], ...] = ()


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
        cached = _from_cache(await services.cache.get(NAMESPACE, material))
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
        await services.cache.set(NAMESPACE, material, _to_cache(answer), ttl_s=ttl_s)
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


def cache_material(query: SearchQuery, ranking: Ranking | None = None) -> dict[str, Any]:
    """The cache key's material: the query folded (NFKC, case, spaces), count, freshness,
    and the filters and ranking when they differ from the defaults (so a plain query keeps
    the key it always had)."""
    folded = " ".join(unicodedata.normalize("NFKC", query.text).casefold().split())
    material: dict[str, Any] = {"q": folded, "n": query.count, "f": query.freshness}
    filters = {
        "site": list(query.sites),
        "xsite": list(query.exclude_sites),
        "after": query.after.isoformat() if query.after else None,
        "before": query.before.isoformat() if query.before else None,
        "undated": query.undated if query.dated else None,
        "country": query.country,
        "lang": query.lang,
        "vertical": None if query.vertical == "web" else query.vertical,
        "per_domain": ranking.max_per_domain if ranking and ranking.max_per_domain != 1 else None,
        "mode": ranking.mode if ranking and ranking.mode != "fallback" else None,
    }
    material |= {key: value for key, value in filters.items() if value}
    return material


def _to_cache(answer: Answer) -> dict[str, Any]:
    hits = [
        [hit.url, hit.title, hit.snippet, hit.score, hit.thumbnail, hit.published, *_more(hit)]
        for hit in answer.hits
    ]
    return {"hits": hits, "backends": list(answer.backends), "total": answer.total}


def _more(hit: Hit) -> list[object]:
    return [list(hit.extra_snippets), hit.favicon, hit.lang, list(hit.sources)]


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
    url: object,
    title: object,
    snippet: object,
    score: object = None,
    thumbnail: object = None,
    published: object = None,
    extra: object = (),
    favicon: object = None,
    lang: object = None,
    sources: object = (),
) -> Hit:
    return Hit(
        str(url),
        str(title),
        str(snippet),
        float(score) if isinstance(score, int | float) else None,
        _opt_str(thumbnail),
        _opt_str(published),
        tuple(str(text) for text in extra) if isinstance(extra, list) else (),
        _opt_str(favicon),
        _opt_str(lang),
        tuple(str(name) for name in sources) if isinstance(sources, list) else (),
    )


def _opt_str(value: object) -> str | None:
    return str(value) if value is not None else None


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
    if not urls or not services.prefetch.submit(functools.partial(prefetch, services, urls)):
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
            page = await load_page(services, url, deadline=deadline, background=True)
            await prepare_fetch(services, page)
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
    ReplyField(
        "PUBLISHED",
        "one query: a hit's backend dated it",
        "<url> <UTC ISO-8601 date, or datetime ending Z>",
    ),
    ReplyField(
        "EXTRA_SNIPPET",
        "one query: per further excerpt (Brave), at most 5 a hit",
        "<url> <excerpt as a JSON string>",
    ),
    ReplyField("FAVICON", "one query: a hit has one", "<url> <icon url>"),
    ReplyField("LANG", "one query: the backend named a hit's language", "<url> <code>"),
    ReplyField("SOURCES", "MODE fuse, one query: one per hit", "<url> <backends, by order>"),
    ReplyField("MISSING_RESULTS", "PARTIAL, one query", "results fewer than asked"),
    ReplyField(
        "PREFETCHED",
        "PREFETCH (or search.prefetch_top) above 0",
        "result pages queued for loading into the fetch cache (0: no background task)",
    ),
    ReplyField(
        "BACKEND_ERROR",
        "PARTIAL or FAIL: a backend failed; MODE fuse: it dropped out",
        "<backend>:<reason> <hint>",
    ),
    ReplyField(
        "SEARCH",
        "several queries: one per query answered",
        '<n> results total backend cached "<query>"',
    ),
    ReplyField(
        "HIT",
        "several queries: one per hit",
        "<n> <url> score:<s> [published:<json>] [extra_snippets:<json list>] "
        '[favicon:<json>] [lang:<json>] [sources:<json>] "<title>"',
    ),
    ReplyField(
        "SEARCH_ERROR", "several queries: one per query failed", '<n> <code>:<detail> "<query>"'
    ),
    ReplyField("RETRY_AFTER", "FAIL: rate limited everywhere", "seconds to wait"),
)
SEARCH_EXAMPLE = Example(
    (
        'TASK REQ:search "north sea tides" IN:WEB OUT:URL_REFS\nID 1\nMAX_RESULTS 2\n'
        "SITE origin.test\nAFTER 2026-01-01\n"
    ),
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
        "CACHED false\n"
        'QUERY "north sea tides"\n'
        "TOTAL 2\n"
        "SCORE https://origin.test/tides 2.0\n"
        "SCORE https://origin.test/moved 1.0\n"
        "PUBLISHED https://origin.test/tides 2026-03-05\n"
        "LANG https://origin.test/tides en\n"
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
