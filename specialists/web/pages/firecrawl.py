"""Firecrawl's scrape API as a fetch backend (seed 004's fetchUrl), for pages the direct load
cannot read (bot walls, script-built pages).

    POST <base_url>/v1/scrape   {"url", "formats": ["markdown"], "onlyMainContent": true,
                                 "timeout": <ms>}     Authorization: Bearer <key>
    -> {"success": true, "data": {"markdown": "...", "metadata": {"title", "description",
        "sourceURL", "url", "statusCode"}}}
    -> {"success": false, "error": "..."}   (with a 4xx or 5xx status)

``docs.firecrawl.mode`` (loaders.py plans the loaders) ``fallback`` (the default) asks
Firecrawl only after a direct load failed with ``fetch_failed`` or ``too_large``, and reports
the direct failure when Firecrawl fails too; ``always`` asks Firecrawl first and loads
directly when it fails. Either way the
target passes the same URL gate, address deny table (its robots.txt is fetched through the
guard, so a name resolving to a denied address is ssrf_blocked: a self-hosted Firecrawl could
reach it) and robots.txt rules as a direct load, and so does the URL Firecrawl says it read
(it follows redirects itself: a landing the guard refuses fails the scrape, with that code
even in fallback mode, and nothing is cached); the scrape takes a token of
the same ``fetch`` bucket, and the Markdown it returns is cached in the same ``fetch``
namespace (a text snapshot: content type text/markdown). Off while ``base_url`` is null or its
key variable is unset. The key is sent only to ``base_url``, never on a redirect.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from typing import Any

import trio

from csp_web.core.api import peer_json
from csp_web.core.api.errors import OpError
from csp_web.net.result import readable
from protocol import ErrorCode

from ..search.base import redact
from .loading import (
    CACHE_NAMESPACE,
    Page,
    fresh,
    from_snapshot,
    normalise_url,
    to_snapshot,
)
from .services import PagesServices

_WORD = re.compile(r"\w+")


async def scrape(
    services: PagesServices,
    url: str,
    key: str,
    *,
    no_cache: bool,
    deadline: float,
    max_age_s: float | None = None,
) -> Page:
    """The page as Firecrawl reads it, cached as a direct load would be. Raises OpError:
    the gate's and robots.txt's refusals, RATE_LIMITED, FETCH_FAILED (``firecrawl_http_<n>``,
    ``firecrawl:<error>``, ``http_<n>`` for the page's own status, ``timeout``)."""
    target = normalise_url(url, services)
    if not no_cache:
        cached = fresh(from_snapshot(await services.cache.get(CACHE_NAMESPACE, target)), max_age_s)
        if cached is not None:
            return cached
    allowed = await services.client.robots_allowed(target, deadline_s=_left(deadline))
    if not allowed:
        raise OpError(ErrorCode.ROBOTS_DISALLOWED, target)
    bucket = services.limits.bucket("fetch")
    if bucket is not None:
        await bucket.acquire(deadline=deadline)
    page = parse(await _post(services, target, key, deadline), target, secret=key)
    page = dataclasses.replace(page, fetched_at=time.time())
    await _check_landing(services, page.url, target, deadline)
    ttl_s = services.config.cache.fetch_ttl_s
    await services.cache.set(CACHE_NAMESPACE, target, to_snapshot(page), ttl_s=ttl_s)
    return page


async def _post(
    services: PagesServices, target: str, key: str, deadline: float
) -> tuple[int, bytes]:
    config = services.config.docs.firecrawl
    assert config.base_url is not None
    body = {
        "url": target,
        "formats": ["markdown"],
        "onlyMainContent": True,
        "timeout": config.timeout_ms,
    }
    result = await services.client.fetch(
        config.base_url.rstrip("/") + "/v1/scrape",
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
        content=json.dumps(body).encode(),
        max_redirects=0,
        deadline_s=_left(deadline),
    )
    return result.status_code, result.body


async def _check_landing(
    services: PagesServices, landing: str, target: str, deadline: float
) -> None:
    """Refuse a page Firecrawl read somewhere else than ``target`` unless that place passes
    the gate as a redirect hop would: Firecrawl follows redirects itself, and a self-hosted
    one sits where a redirect to an internal address reaches. Raises OpError: the gate's
    URL_REJECTED or SSRF_BLOCKED (DNS included, through the landing's robots.txt), and
    ROBOTS_DISALLOWED."""
    if landing == target:
        return
    allowed = await services.client.robots_allowed(landing, deadline_s=_left(deadline))
    if not allowed:
        raise OpError(ErrorCode.ROBOTS_DISALLOWED, landing)


def parse(answer: tuple[int, bytes], target: str, *, secret: str = "") -> Page:
    """The Page of a scrape answer; raises OpError(FETCH_FAILED) for an error answer, whose
    text loses ``secret`` (the key, should Firecrawl echo it) before it becomes a reason."""
    status, body = answer
    try:
        document = peer_json.loads(body)
    except peer_json.NotJson:
        document = None
    if status != 200 or not isinstance(document, dict) or document.get("success") is not True:
        error = document.get("error") if isinstance(document, dict) else None
        if status == 200 and isinstance(error, str):
            raise OpError(ErrorCode.FETCH_FAILED, f"firecrawl:{_reason(redact(error, secret))}")
        raise OpError(ErrorCode.FETCH_FAILED, f"firecrawl_http_{status}")
    data = _mapping(document.get("data"))
    metadata = _mapping(data.get("metadata"))
    page_status = metadata.get("statusCode")
    if isinstance(page_status, int) and page_status >= 400:
        raise OpError(ErrorCode.FETCH_FAILED, f"http_{page_status}")
    markdown = data.get("markdown")
    if not isinstance(markdown, str):
        raise OpError(ErrorCode.FETCH_FAILED, "firecrawl:no_markdown")
    markdown = readable(markdown)  # as a page's own text is (csp_web.net.result)
    title = metadata.get("title") if isinstance(metadata.get("title"), str) else None
    title = " ".join(readable(title).split()) if title else None
    final = metadata.get("url") or metadata.get("sourceURL") or target
    return Page(
        url=final if isinstance(final, str) else target,  # checked by _check_landing
        status=page_status if isinstance(page_status, int) else 200,
        content_type="text/markdown",
        kind="text",
        title=title or None,
        text=markdown,
        word_count=len(_WORD.findall(markdown)),
        redirect_chain=(target,),
    )


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _left(deadline: float) -> float:
    return max(0.0, deadline - trio.current_time())


def _reason(error: str) -> str:
    return re.sub(r"[^a-z0-9_]+", "_", error.lower()).strip("_")[:64] or "error"
