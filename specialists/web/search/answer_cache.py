"""What the search cache keeps: one ``Answer`` per query, keyed by the query folded with its
filters and ranking (namespace ``search``, ``cache.search_ttl_s``)."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Any

from .base import BackendFailure, Hit, SearchQuery
from .task_query import Ranking

NAMESPACE = "search"


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


def to_cache(answer: Answer) -> dict[str, Any]:
    hits = [
        [hit.url, hit.title, hit.snippet, hit.score, hit.thumbnail, hit.published, *_more(hit)]
        for hit in answer.hits
    ]
    return {"hits": hits, "backends": list(answer.backends), "total": answer.total}


def _more(hit: Hit) -> list[object]:
    return [list(hit.extra_snippets), hit.favicon, hit.lang, list(hit.sources)]


def from_cache(value: Any) -> Answer | None:
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
