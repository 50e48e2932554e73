"""The task's filters held against each hit, whatever the backend did with them: a backend
that ignores ``site:`` or a date range (or honours it loosely) cannot leak a hit past them.

SITE keeps hits on those hosts or under them (``python.org`` keeps ``docs.python.org``),
EXCLUDE_SITE drops them; a date range keeps hits whose PUBLISHED day lies in it, and hits
without one as UNDATED says; LANG drops hits whose backend names another language (a hit
without one stays: most backends never say).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable

from . import dates
from .base import Hit, SearchQuery


def admitted(query: SearchQuery, hits: Iterable[Hit]) -> list[Hit]:
    """The hits ``query``'s filters let through, in order."""
    return [hit for hit in hits if admits(query, hit)]


def admits(query: SearchQuery, hit: Hit) -> bool:
    """Whether ``hit`` passes every filter of ``query``."""
    host = _host(hit.url)
    if query.sites and not any(under(host, site) for site in query.sites):
        return False
    if any(under(host, site) for site in query.exclude_sites):
        return False
    if query.lang and hit.lang and hit.lang.split("-")[0] != query.lang.split("-")[0]:
        return False
    return _in_range(query, hit)


def under(host: str, site: str) -> bool:
    """Whether ``host`` is ``site`` or a subdomain of it (``www.`` aside on both)."""
    host, site = host.removeprefix("www."), site.removeprefix("www.")
    return host == site or host.endswith("." + site)


def _in_range(query: SearchQuery, hit: Hit) -> bool:
    if not query.dated:
        return True
    if hit.published is None:
        return query.undated == "keep"
    day = dates.day(hit.published)
    if query.after is not None and day < query.after:
        return False
    return query.before is None or day <= query.before


def _host(url: str) -> str:
    try:
        return (urllib.parse.urlsplit(url).hostname or "").rstrip(".")
    except ValueError:
        return ""
