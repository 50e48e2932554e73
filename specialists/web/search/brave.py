"""Brave Search's Web Search API (seed 003): JSON, keyed by ``X-Subscription-Token``.

    GET https://api.search.brave.com/res/v1/web/search?q=...&count=...&freshness=pw
    -> {"type": "search", "query": {...}, "web": {"type": "search", "results": [
           {"title", "url", "description", "page_age", "profile": {...}, ...}]}}

Errors come as ``{"type": "ErrorResponse", "error": {"code", "detail", "status", ...}}``; the
error's code (``SUBSCRIPTION_TOKEN_INVALID``) becomes the failure's reason.
"""

from __future__ import annotations

import json
from typing import Any

from csp_web.net import FetchResult

from .base import (
    Backend,
    BackendFailure,
    Hit,
    HttpRequest,
    SearchQuery,
    clean_text,
    error_failure,
    with_query,
)

DEFAULT_BASE_URL = "https://api.search.brave.com/res/v1/web/search"
KEY_HEADER = "X-Subscription-Token"
# Brave's ``count`` goes to 20; asking twice what the op wants leaves room for de-duplication
# at the price of one request either way.
MAX_COUNT = 20


def build(query: SearchQuery, base_url: str, key: str | None) -> HttpRequest:
    """The request for ``query``; ``key`` rides in X-Subscription-Token."""
    params = {
        "q": query.text,
        "count": str(min(MAX_COUNT, 2 * query.count)),
        "text_decorations": "false",
        "result_filter": "web",
    }
    if query.freshness:
        params["freshness"] = query.freshness  # Brave spells it as the op does: pd|pw|pm|py
    headers = {"Accept": "application/json", KEY_HEADER: key or ""}
    return HttpRequest(with_query(base_url, params), headers=headers, secret_headers=(KEY_HEADER,))


def parse(result: FetchResult) -> list[Hit]:
    """The web results of a 200 answer; an error answer becomes a BackendFailure."""
    document = _json(result)
    if result.status_code != 200:
        raise _error(result, document)
    if not isinstance(document, dict) or document.get("type") != "search":
        raise BackendFailure("bad_response", "not a Brave search response")
    web = document.get("web") or {}
    results = web.get("results") if isinstance(web, dict) else None
    if not isinstance(results, list):
        return []  # Brave leaves "web" out when nothing matched
    return [hit for item in results if (hit := _hit(item)) is not None]


def _hit(item: Any) -> Hit | None:
    if not isinstance(item, dict) or not isinstance(item.get("url"), str):
        return None
    thumbnail = item.get("thumbnail")
    src = thumbnail.get("src") if isinstance(thumbnail, dict) else None
    return Hit(
        item["url"],
        clean_text(item.get("title")),
        clean_text(item.get("description")),
        thumbnail=src if isinstance(src, str) and src.startswith("https://") else None,
    )


def _error(result: FetchResult, document: Any) -> BackendFailure:
    return error_failure(result, document, code_key="code", message_key="detail")


def _json(result: FetchResult) -> Any:
    try:
        return json.loads(result.body)
    except ValueError:
        if result.status_code == 200:
            raise BackendFailure("bad_response", "Brave answered with no JSON") from None
        return None


BACKEND = Backend("brave", DEFAULT_BASE_URL, needs_key=True, build=build, parse=parse)
