"""Perplexity as a search backend (seed 004's webSearch), keyed by a Bearer token.

Two of its APIs answer, told apart by the configured URL's path:

    POST https://api.perplexity.ai/search   {"query", "max_results"}
    -> {"id", "results": [{"title", "url", "snippet", "date", "last_updated"}]}
       (``date`` is the page's publication date, ``2024-05-02``: PUBLISHED)

    POST <base>/chat/completions   {"model": "sonar", "messages": [...]}
    -> {"choices": [...], "search_results": [{"title", "url", "date", "snippet"?}],
        "citations": ["https://...", ...]}

The Search API's results are the hits, in its order. A chat answer's ``search_results``
become hits, and its ``citations`` (URLs only) the ones they lack, titled by their host.
Errors come as ``{"error": {"message", "type", "code"}}``; the type becomes the reason.
"""

from __future__ import annotations

import datetime
import json
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
    listed,
    shaped,
    status_failure,
)

DEFAULT_BASE_URL = "https://api.perplexity.ai/search"
# Every member that ``parse`` reads, with its type (base.shaped): a result's, a chat answer's.
_ITEM: Shape = {"url": str, "title": str, "snippet": str, "date": str}
_CHAT: Shape = {"choices": list, "citations": [str]}
CHAT_MODEL = "sonar"
MAX_RESULTS = 20  # the Search API's max_results cap
_RECENCY = {"pd": "day", "pw": "week", "pm": "month", "py": "year"}


def build(query: SearchQuery, base_url: str, key: str | None) -> HttpRequest:
    """A JSON POST to the Search API, or to chat completions when ``base_url`` ends so."""
    body: dict[str, Any]
    if _is_chat(base_url):
        body = {"model": CHAT_MODEL, "messages": [{"role": "user", "content": query.text}]}
    else:
        body = {"query": query.text, "max_results": min(MAX_RESULTS, 2 * query.count)}
    body |= _filters(query, chat=_is_chat(base_url))
    headers = {
        "Accept": "application/json",
        "Content-Type": "application/json",
        "Authorization": f"Bearer {key or ''}",
    }
    return HttpRequest(
        base_url,
        method="POST",
        headers=headers,
        content=json.dumps(body).encode(),
        secret_headers=("Authorization",),
    )


def _filters(query: SearchQuery, *, chat: bool) -> dict[str, Any]:
    """The filters in Perplexity's own parameters (both APIs take them, but ``country`` and
    ``search_language_filter`` are the Search API's): a domain list whose ``-`` entries
    exclude, dates as ``%m/%d/%Y``."""
    body: dict[str, Any] = {}
    domains = [*query.sites, *(f"-{site}" for site in query.exclude_sites)]
    if domains:
        body["search_domain_filter"] = domains
    if query.after:
        body["search_after_date_filter"] = _us_date(query.after)
    if query.before:
        body["search_before_date_filter"] = _us_date(query.before)
    if query.freshness and not query.dated:
        body["search_recency_filter"] = _RECENCY[query.freshness]
    if query.country and not chat:
        body["country"] = query.country.upper()
    if query.lang and not chat:
        body["search_language_filter"] = [query.lang.split("-")[0]]
    return body


def _us_date(day: datetime.date) -> str:
    return f"{day.month}/{day.day}/{day.year}"  # Perplexity's documented form: 3/1/2025


def parse(result: FetchResult) -> list[Hit]:
    """The hits of a 200 answer; an error answer, or one whose members are not of their
    types (base.shaped), becomes a BackendFailure."""
    try:
        document = peer_json.loads(result.body)
    except peer_json.NotJson:
        if result.status_code == 200:
            raise BackendFailure("bad_response", "Perplexity answered with no JSON") from None
        raise status_failure(result) from None
    if result.status_code != 200:
        raise _error(result, document)
    if not isinstance(document, dict):
        raise BackendFailure("bad_response", "not a Perplexity response")
    if document.get("results") is not None:
        return _hits(listed(document, "results", _ITEM, ""))
    if document.get("choices") is not None:
        return _chat_hits(shaped(document, _CHAT, ""))
    raise BackendFailure("bad_response", "not a Perplexity search or chat response")


def _hits(items: list[dict[str, Any]]) -> list[Hit]:
    return [
        Hit(
            item["url"],
            clean_text(item.get("title")),
            clean_text(item.get("snippet")),
            published=dates.published(item.get("date")),
        )
        for item in items
    ]


def _chat_hits(document: dict[str, Any]) -> list[Hit]:
    hits = _hits(listed(document, "search_results", _ITEM, ""))
    known = {hit.url for hit in hits}
    for url in document.get("citations") or []:
        if url not in known:
            known.add(url)
            hits.append(Hit(url, urllib.parse.urlsplit(url).hostname or url, ""))
    return hits


def _error(result: FetchResult, document: Any) -> BackendFailure:
    return error_failure(result, document, code_key="type", message_key="message")


def _is_chat(base_url: str) -> bool:
    return urllib.parse.urlsplit(base_url).path.rstrip("/").endswith("/chat/completions")


BACKEND = Backend("perplexity", DEFAULT_BASE_URL, needs_key=True, build=build, parse=parse)
