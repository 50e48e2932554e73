"""Cleaning, de-duplicating, fusing and choosing results (seed 000: "Auto-deduplicate
domains").

Backends hand over hits best first. In ``fallback`` mode ``chain`` concatenates them in
backend order, so the ranking is backend order, then each backend's own (SearXNG's score,
the others' position); in ``fuse`` mode ``fuse`` merges every backend's list by reciprocal
rank fusion. ``pick`` keeps the first of each duplicate URL, takes at most
``max_per_domain`` results per domain, then fills the remaining places with the next best.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable, Sequence
from dataclasses import replace

from .base import Hit

_DEFAULT_PORTS = {"http": 80, "https": 443}
# Characters that may not stand raw in a reply's URL: space ends the URL on a CITE line, a
# comma would split DATA's ``url:a,url:b`` list (SPEC V-5), the rest are not URL characters.
_UNSAFE = re.compile(r'[\x00-\x20\x7f-\x9f,"<>\\^`{|}]')
# Click and campaign identifiers that name no page (utm_* besides): Facebook, Google Ads,
# Microsoft Ads, Mailchimp, Yandex, Instagram, HubSpot, Marketo, Google's srsltid.
TRACKING_PARAMS = frozenset(
    {"fbclid", "gclid", "dclid", "gbraid", "wbraid", "msclkid", "mc_cid", "mc_eid", "yclid"}
    | {"igshid", "_hsenc", "_hsmi", "mkt_tok", "srsltid"}
)
# Reciprocal rank fusion's constant, as Cormack, Clarke and Buettcher (SIGIR 2009) chose it.
RRF_K = 60


def clean_url(url: str) -> str | None:
    """``url`` as replies show it: lower-case scheme and host, no user info, default port or
    fragment, no tracking parameters (``utm_*``, TRACKING_PARAMS), unsafe characters
    percent-encoded. None unless it is an http(s) URL with a host."""
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
    query = "&".join(piece for piece in parts.query.split("&") if piece and not _tracking(piece))
    cleaned = urllib.parse.urlunsplit((scheme, netloc, parts.path or "/", query, ""))
    return _UNSAFE.sub(_percent, cleaned)


def _tracking(piece: str) -> bool:
    name = piece.split("=", 1)[0].lower()
    return name.startswith("utm_") or name in TRACKING_PARAMS


def _percent(match: re.Match[str]) -> str:
    return "".join(f"%{byte:02X}" for byte in match.group().encode("utf-8"))


def domain(url: str) -> str:
    """The domain a result counts under: its host, lower-case, without a leading ``www.``
    (no public-suffix list: docs.python.org and python.org are two domains)."""
    host = urllib.parse.urlsplit(url).hostname or ""
    return host.removeprefix("www.")


def dedupe_key(url: str) -> str:
    """What makes two cleaned URLs the same page: scheme, ``www.``, a trailing slash,
    parameter order and AMP (``unamp``) aside."""
    parts = urllib.parse.urlsplit(unamp(url))
    port = f":{parts.port}" if parts.port else ""
    query = "&".join(sorted(parts.query.split("&"))) if parts.query else ""
    host = (parts.hostname or "").removeprefix("www.")
    return f"{host}{port}{parts.path.rstrip('/')}?{query}"


_AMP_CACHE = re.compile(r"/(?:amp|c|v)/(?:s/)?([^/]+)(/.*)?")
_AMP_PARAMS = frozenset({"amp", "amp=1", "amp=true", "outputtype=amp"})


def unamp(url: str) -> str:
    """The page an AMP link stands for: Google's AMP viewer (``google.com/amp/s/host/path``)
    and AMP cache (``*.cdn.ampproject.org/c/s/host/path``) as the origin's URL, an ``amp.``
    host, an ``/amp`` path segment at either end and an ``amp`` parameter dropped."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    viewer = host.removeprefix("www.") == "google.com" and parts.path.startswith("/amp/")
    if viewer or host.endswith(".cdn.ampproject.org"):
        inner = _AMP_CACHE.fullmatch(parts.path)
        if inner:
            query = f"?{parts.query}" if parts.query else ""
            return f"https://{inner.group(1)}{inner.group(2) or '/'}{query}"
    body = [segment for segment in parts.path.split("/") if segment]
    if len(body) > 1 and body[0] == "amp":
        body = body[1:]
    if len(body) > 1 and body[-1] == "amp":
        body = body[:-1]
    path = "/" + "/".join(body) + ("/" if parts.path.endswith("/") and body else "")
    query = "&".join(p for p in parts.query.split("&") if p and p.lower() not in _AMP_PARAMS)
    netloc = parts.netloc.removeprefix("amp.")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, path=path, query=query))


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


def pick(hits: Iterable[Hit], count: int, max_per_domain: int = 1) -> list[Hit]:
    """At most ``count`` unique hits: at most ``max_per_domain`` per domain first, in rank
    order, then the best of the rest when that leaves places empty."""
    chosen: list[Hit] = []
    rest: list[Hit] = []
    per_domain: dict[str, int] = {}
    for hit in unique(hits):
        name = domain(hit.url)
        if per_domain.get(name, 0) >= max_per_domain or len(chosen) >= count:
            rest.append(hit)
            continue
        per_domain[name] = per_domain.get(name, 0) + 1
        chosen.append(hit)
    return chosen + rest[: count - len(chosen)]


def fuse(lists: Sequence[tuple[str, Sequence[Hit]]]) -> list[Hit]:
    """One ranking of several backends' lists by reciprocal rank fusion: a page scores
    ``sum(1 / (RRF_K + rank))`` over the lists that hold it (the same page under tracking
    parameters, ``www.``, a trailing slash or AMP counts once), shown as that sum times
    ``RRF_K + 1`` (1.0: first in one list). Each hit is the one of the list that ranked it
    best, its missing fields filled from the others, ``sources`` naming every list in order;
    ties keep the order of ``lists``."""
    found: dict[str, list[tuple[str, int, Hit]]] = {}
    for name, hits in lists:
        for rank, hit in enumerate(unique(hits), 1):
            found.setdefault(dedupe_key(hit.url), []).append((name, rank, hit))
    fused = [_fused(entries) for entries in found.values()]
    fused.sort(key=lambda hit: hit.score or 0.0, reverse=True)  # stable: ties keep order
    return fused


def _fused(entries: list[tuple[str, int, Hit]]) -> Hit:
    best = min(entries, key=lambda entry: entry[1])[2]
    others = [hit for _, _, hit in entries]
    total = sum(1 / (RRF_K + rank) for _, rank, _ in entries)
    return replace(
        best,
        score=round(total * (RRF_K + 1), 6),
        thumbnail=best.thumbnail or _first(hit.thumbnail for hit in others),
        published=best.published or _first(hit.published for hit in others),
        extra_snippets=best.extra_snippets
        or next((h.extra_snippets for h in others if h.extra_snippets), ()),
        favicon=best.favicon or _first(hit.favicon for hit in others),
        lang=best.lang or _first(hit.lang for hit in others),
        sources=tuple(dict.fromkeys(name for name, _, _ in entries)),
    )


def _first(values: Iterable[str | None]) -> str | None:
    return next((value for value in values if value), None)
