"""A SearXNG instance's JSON API (``format=json``, which its settings must allow).

    GET <instance>/search?q=...&format=json&time_range=week
    -> {"query", "number_of_results", "results": [{"url", "title", "content", "engine",
        "score", "publishedDate", "thumbnail", ...}], "answers", "suggestions",
        "unresponsive_engines": [[name, why]]}

An instance whose ``search.formats`` lacks ``json`` answers 403; the failure says so.
Results are ranked by SearXNG's own ``score``.
"""

from __future__ import annotations

import math
import urllib.parse
from typing import Any

from csp_web.core.api import peer_json
from csp_web.net import FetchResult

from . import dates
from .base import (
    Backend,
    BackendFailure,
    Hit,
    HttpRequest,
    SearchQuery,
    Shape,
    clean_text,
    https_url,
    lang_code,
    listed,
    shaped,
    site_operators,
    with_query,
)

_TIME_RANGE = {"pd": "day", "pw": "week", "pm": "month", "py": "year"}
# SearXNG's categories for the verticals (its settings.yml names them so).
_CATEGORIES = {"web": "general", "news": "news", "images": "images", "videos": "videos"}
# Every member of a result that ``parse`` reads, with its type (base.shaped).
_ITEM: Shape = {
    "url": str,
    "title": str,
    "content": str,
    "score": float,
    "thumbnail": str,
    "img_src": str,
    "publishedDate": str,
    "favicon": str,
    "language": str,
}
JSON_DISABLED_HINT = (
    "SearXNG refused format=json (HTTP 403): add json to search.formats in its settings.yml"
)


def endpoint(base_url: str) -> str:
    """The instance's search endpoint: ``base_url`` itself when it ends in /search, else
    /search under it (so the instance root works as configuration)."""
    parts = urllib.parse.urlsplit(base_url)
    if parts.path.rstrip("/").endswith("/search"):
        return base_url
    path = parts.path if parts.path.endswith("/") else parts.path + "/"
    return urllib.parse.urlunsplit(parts._replace(path=path + "search"))


def build(query: SearchQuery, base_url: str, key: str | None) -> HttpRequest:
    """A GET of the JSON API. SearXNG has no date range, only ``time_range``: a range asks
    the widened one (filters.admits holds the hits to the range itself); its ``language``
    is a locale, ``de-CH`` when both LANG and COUNTRY are given (a COUNTRY alone has no
    parameter there)."""
    params = {"q": query.text + site_operators(query), "format": "json", "pageno": "1"}
    freshness = query.widened if query.dated else query.freshness
    if freshness:
        params["time_range"] = _TIME_RANGE[freshness]
    if query.vertical != "web":
        params["categories"] = _CATEGORIES[query.vertical]
    if query.lang:
        region = f"-{query.country.upper()}" if query.country and "-" not in query.lang else ""
        params["language"] = query.lang + region
    return HttpRequest(
        with_query(endpoint(base_url), params), headers={"Accept": "application/json"}
    )


def parse(result: FetchResult) -> list[Hit]:
    """The results by descending score; raises BackendFailure for errors and empty failures."""
    if result.status_code == 403:
        raise BackendFailure("json_format_disabled", JSON_DISABLED_HINT)
    if result.status_code != 200:
        raise BackendFailure(f"http_{result.status_code}", f"HTTP {result.status_code}")
    try:
        document = peer_json.loads(result.body)
    except peer_json.NotJson:
        raise BackendFailure("bad_response", "SearXNG answered with no JSON") from None
    if not isinstance(document, dict) or not isinstance(document.get("results"), list):
        raise BackendFailure("bad_response", "not a SearXNG search response")
    shaped(document, {"unresponsive_engines": [list]}, "")
    items = listed(document, "results", _ITEM, "")
    if not items and document.get("unresponsive_engines"):
        raise BackendFailure("engines_unresponsive", _unresponsive(document))
    items.sort(key=_score, reverse=True)  # stable: equal scores keep SearXNG's order
    return [
        Hit(
            item["url"],
            clean_text(item.get("title")),
            clean_text(item.get("content")),
            score=_score(item),
            thumbnail=_thumbnail(item),
            published=dates.published(item.get("publishedDate")),
            favicon=https_url(item.get("favicon")),
            lang=lang_code(item.get("language")),
        )
        for item in items
    ]


def _thumbnail(item: dict[str, Any]) -> str | None:
    return https_url(item.get("thumbnail")) or https_url(item.get("img_src"))


def total(result: FetchResult) -> int | None:
    """SearXNG's ``number_of_results`` (0 when its engines do not say)."""
    try:
        value = peer_json.loads(result.body).get("number_of_results")
    except (peer_json.NotJson, AttributeError):
        return None
    return value if isinstance(value, int) and value > 0 else None


def _score(item: dict[str, Any]) -> float:
    score = item.get("score")
    value = float(score) if isinstance(score, int | float) else 0.0
    return value if math.isfinite(value) else 0.0


def _unresponsive(document: dict[str, Any]) -> str:
    engines = document.get("unresponsive_engines") or []
    names = [str(entry[0]) for entry in engines if isinstance(entry, list) and entry]
    return clean_text("every engine failed: " + ", ".join(names), markup=False)


BACKEND = Backend(
    "searxng",
    None,
    needs_key=False,
    build=build,
    parse=parse,
    total=total,
    verticals=frozenset(_CATEGORIES),
)
