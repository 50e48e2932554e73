"""Cleaning, de-duplicating and choosing results (seed 000: "Auto-deduplicate domains").

Backends hand over hits best first; ``chain`` concatenates them in backend order, so the
ranking is backend order, then each backend's own (SearXNG's score, the others' position).
``pick`` keeps the first of each duplicate URL, takes at most one result per domain, then
fills the remaining places with the next best results.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable
from dataclasses import replace

from .base import Hit

_DEFAULT_PORTS = {"http": 80, "https": 443}
# Characters that may not stand raw in a reply's URL: space ends the URL on a CITE line, a
# comma would split DATA's ``url:a,url:b`` list (SPEC V-5), the rest are not URL characters.
_UNSAFE = re.compile(r'[\x00-\x20\x7f-\x9f,"<>\\^`{|}]')


def clean_url(url: str) -> str | None:
    """``url`` as replies show it: lower-case scheme and host, no user info, default port or
    fragment, no ``utm_*`` parameters, unsafe characters percent-encoded. None unless it is
    an http(s) URL with a host."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme, host = parts.scheme.lower(), parts.hostname
    if scheme not in _DEFAULT_PORTS or not host:
        return None
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        netloc += f":{port}"
    query = "&".join(
        piece
        for piece in parts.query.split("&")
        if piece and not piece.split("=", 1)[0].lower().startswith("utm_")
    )
    cleaned = urllib.parse.urlunsplit((scheme, netloc, parts.path or "/", query, ""))
    return _UNSAFE.sub(_percent, cleaned)


def _percent(match: re.Match[str]) -> str:
    return "".join(f"%{byte:02X}" for byte in match.group().encode("utf-8"))


def domain(url: str) -> str:
    """The domain a result counts under: its host, lower-case, without a leading ``www.``
    (no public-suffix list: docs.python.org and python.org are two domains)."""
    host = urllib.parse.urlsplit(url).hostname or ""
    return host.removeprefix("www.")


def dedupe_key(url: str) -> str:
    """What makes two cleaned URLs the same page: scheme, ``www.``, a trailing slash and
    parameter order aside."""
    parts = urllib.parse.urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    query = "&".join(sorted(parts.query.split("&"))) if parts.query else ""
    return f"{domain(url)}{port}{parts.path.rstrip('/')}?{query}"


def unique(hits: Iterable[Hit]) -> list[Hit]:
    """Hits with cleaned URLs, the first of each page kept, unusable URLs dropped."""
    seen: set[str] = set()
    kept: list[Hit] = []
    for hit in hits:
        url = clean_url(hit.url)
        if url is None or (key := dedupe_key(url)) in seen:
            continue
        seen.add(key)
        kept.append(replace(hit, url=url))
    return kept


def pick(hits: Iterable[Hit], count: int) -> list[Hit]:
    """At most ``count`` unique hits: one per domain first, in rank order, then the best of
    the rest."""
    chosen: list[Hit] = []
    rest: list[Hit] = []
    domains: set[str] = set()
    for hit in unique(hits):
        name = domain(hit.url)
        if name in domains or len(chosen) >= count:
            rest.append(hit)
            continue
        domains.add(name)
        chosen.append(hit)
    return chosen + rest[: count - len(chosen)]
