"""Brave Search's API (seed 003): JSON, keyed by ``X-Subscription-Token``.

    GET https://api.search.brave.com/res/v1/web/search?q=...&count=...&freshness=pw
    -> {"type": "search", "query": {...}, "web": {"type": "search", "results": [
           {"title", "url", "description", "page_age", "age", "language", "extra_snippets",
            "meta_url": {"favicon"}, "profile": {"img"}, ...}]}}

The news, images and videos verticals are sibling endpoints (``/res/v1/news/search`` ...)
answering ``{"type": "news"|"images"|"videos", "results": [...]}`` with the same items.
Errors come as ``{"type": "ErrorResponse", "error": {"code", "detail", "status", ...}}``; the
error's code (``SUBSCRIPTION_TOKEN_INVALID``) becomes the failure's reason.
"""

from __future__ import annotations

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
    error_failure,
    extra_snippets,
    https_url,
    lang_code,
    listed,
    shaped,
    site_operators,
    with_query,
)

DEFAULT_BASE_URL = "https://api.search.brave.com/res/v1/web/search"
KEY_HEADER = "X-Subscription-Token"
# Brave's ``count`` goes to 20; asking twice what the op wants leaves room for de-duplication
# at the price of one request either way.
MAX_COUNT = 20
_VERTICAL_TYPES = frozenset({"news", "images", "videos"})
# Every member of a result that ``_hit`` reads, with its type (base.shaped).
_ITEM: Shape = {
    "url": str,
    "title": str,
    "description": str,
    "page_age": str,
    "age": str,
    "language": str,
    "extra_snippets": [str],
    "thumbnail": {"src": str},
    "meta_url": {"favicon": str},
    "profile": {"img": str},
}


def build(query: SearchQuery, base_url: str, key: str | None) -> HttpRequest:
    """The request for ``query``; ``key`` rides in X-Subscription-Token."""
    params = {
        "q": query.text + site_operators(query),
        "count": str(min(MAX_COUNT, 2 * query.count)),
    }
    if query.vertical == "web":
        params |= {"text_decorations": "false", "result_filter": "web"}
    if query.dated:
        start, end = query.range_ends()
        params["freshness"] = f"{start.isoformat()}to{end.isoformat()}"  # Brave's range form
    elif query.freshness:
        params["freshness"] = query.freshness  # Brave spells it as the op does: pd|pw|pm|py
    if query.country:
        params["country"] = query.country
    if query.lang:
        params["search_lang"] = query.lang
    headers = {"Accept": "application/json", KEY_HEADER: key or ""}
    url = with_query(vertical_url(base_url, query.vertical), params)
    return HttpRequest(url, headers=headers, secret_headers=(KEY_HEADER,))


def vertical_url(base_url: str, vertical: str) -> str:
    """The endpoint of ``vertical``: the configured web endpoint's ``/web/`` segment swapped
    for the vertical's (``.../res/v1/news/search``); a base URL without that segment is used
    as given for the web and gets ``/<vertical>`` under it for the others."""
    if vertical == "web":
        return base_url
    parts = urllib.parse.urlsplit(base_url)
    path = parts.path.rstrip("/")
    if path.endswith("/web/search"):
        path = path.removesuffix("/web/search") + f"/{vertical}/search"
    else:
        path += f"/{vertical}"
    return urllib.parse.urlunsplit(parts._replace(path=path))


def parse(result: FetchResult) -> list[Hit]:
    """The results of a 200 answer (web or a vertical's); an error answer, or one whose
    members are not of their types (base.shaped), becomes a BackendFailure."""
    document = _json(result)
    if result.status_code != 200:
        raise _error(result, document)
    if not isinstance(document, dict):
        raise BackendFailure("bad_response", "not a Brave search response")
    if document.get("type") in _VERTICAL_TYPES:
        results = listed(document, "results", _ITEM, "")
    elif document.get("type") == "search":
        web = shaped(document, {"web": {}}, "").get("web")  # Brave leaves it out: no results
        results = listed(web, "results", _ITEM, "web") if web is not None else []
    else:
        raise BackendFailure("bad_response", "not a Brave search response")
    return [_hit(item) for item in results]


def _hit(item: dict[str, Any]) -> Hit:
    return Hit(
        item["url"],
        clean_text(item.get("title")),
        clean_text(item.get("description")),
        thumbnail=https_url(_member(item, "thumbnail", "src")),
        published=dates.published(item.get("page_age")) or dates.published(item.get("age")),
        extra_snippets=extra_snippets(item.get("extra_snippets")),
        favicon=https_url(_member(item, "meta_url", "favicon"))
        or https_url(_member(item, "profile", "img")),
        lang=lang_code(item.get("language")),
    )


def _member(item: dict[str, Any], outer: str, inner: str) -> object:
    value = item.get(outer)
    return value.get(inner) if isinstance(value, dict) else None


def _error(result: FetchResult, document: Any) -> BackendFailure:
    return error_failure(result, document, code_key="code", message_key="detail")


def _json(result: FetchResult) -> Any:
    try:
        return peer_json.loads(result.body)
    except peer_json.NotJson:
        if result.status_code == 200:
            raise BackendFailure("bad_response", "Brave answered with no JSON") from None
        return None


BACKEND = Backend(
    "brave",
    DEFAULT_BASE_URL,
    needs_key=True,
    build=build,
    parse=parse,
    verticals=frozenset({"web", "news", "images", "videos"}),
)
