"""DuckDuckGo's HTML endpoint (seed 001: no key needed), parsed from its result markup.

    POST https://html.duckduckgo.com/html/  q=...&df=w
    -> <div class="result results_links ..."><h2 class="result__title">
         <a class="result__a" href="//duckduckgo.com/l/?uddg=<quoted url>&rut=...">Title</a>
       ...<a class="result__snippet" href="...">Snippet</a></div>

Ads (``result--ad``, links through ``/y.js``) are skipped. "No results." is an empty answer;
the bot challenge (HTTP 202, ``anomaly-modal``) is a rate-limit failure, and a 200 page with
neither results nor the no-results notice is ``bad_response``: the markup changed under us.
"""

from __future__ import annotations

import re
import urllib.parse

from selectolax.lexbor import LexborHTMLParser, LexborNode

from csp_web.net import FetchResult

from . import dates
from .base import (
    Backend,
    BackendFailure,
    Hit,
    HttpRequest,
    SearchQuery,
    clean_text,
    https_url,
    site_operators,
    status_failure,
)

DEFAULT_BASE_URL = "https://html.duckduckgo.com/html/"
_DF = {"pd": "d", "pw": "w", "pm": "m", "py": "y"}
_ANOMALY = "#challenge-form, .anomaly-modal__modal, form[action*='anomaly.js']"
# The date a result line shows after its URL: "2024-05-02T00:00:00.0000000".
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?")
# DuckDuckGo's regions are <country>-<language> and spell Britain ``uk``.
_REGION_COUNTRY = {"gb": "uk"}


def build(query: SearchQuery, base_url: str, key: str | None) -> HttpRequest:
    """A form POST, as the HTML endpoint's own search box sends it: a date range as its
    ``df=<from>..<to>``, COUNTRY and LANG as its region ``kl`` (``de-de``; ``wt-wt`` is
    no region, so a LANG alone picks none)."""
    form = {"q": query.text + site_operators(query), "b": ""}
    if query.dated:
        start, end = query.range_ends()
        form["df"] = f"{start.isoformat()}..{end.isoformat()}"
    elif query.freshness:
        form["df"] = _DF[query.freshness]
    if query.country:
        country = _REGION_COUNTRY.get(query.country, query.country)
        form["kl"] = f"{country}-{(query.lang or 'en').split('-')[0]}"
    return HttpRequest(
        base_url,
        method="POST",
        headers={"Content-Type": "application/x-www-form-urlencoded", "Accept": "text/html"},
        content=urllib.parse.urlencode(form).encode("ascii"),
    )


def parse(result: FetchResult) -> list[Hit]:
    """The organic results of a result page; raises BackendFailure otherwise."""
    tree = LexborHTMLParser(result.text())
    if result.status_code == 202 or tree.css_first(_ANOMALY) is not None:
        raise BackendFailure(
            "anomaly_page", "DuckDuckGo answered with its bot challenge", rate=True
        )
    if result.status_code != 200:
        raise status_failure(result)
    hits = [hit for node in tree.css("div.result") if (hit := _hit(node)) is not None]
    if not hits and tree.css_first(".no-results") is None:
        raise BackendFailure("bad_response", "no results and no no-results notice")
    return hits


def _hit(node: LexborNode) -> Hit | None:
    classes = (node.attributes.get("class") or "").split()
    link = node.css_first("a.result__a")
    if "result--ad" in classes or link is None:
        return None
    url = unwrap(link.attributes.get("href") or "")
    if url is None:
        return None
    snippet = node.css_first(".result__snippet")
    extras = node.css_first(".result__extras__url")
    shown = _DATE.search(extras.text()) if extras is not None else None
    icon = node.css_first("img.result__icon__img")
    return Hit(
        url,
        clean_text(link.text(), markup=False),
        clean_text(snippet.text() if snippet is not None else "", markup=False),
        published=dates.published(shown.group()) if shown else None,
        favicon=https_url(icon.attributes.get("src")) if icon is not None else None,
    )


def unwrap(href: str) -> str | None:
    """The real URL behind a result link: ``uddg`` of a ``/l/`` redirect, or the href itself
    when it is already absolute; None for ads and anything else."""
    parts = urllib.parse.urlsplit(urllib.parse.urljoin("https://duckduckgo.com/", href))
    if parts.hostname in ("duckduckgo.com", "html.duckduckgo.com"):
        if parts.path != "/l/":
            return None  # /y.js ad clicks and internal pages
        target = urllib.parse.parse_qs(parts.query).get("uddg")
        return target[0] if target else None
    return href if parts.scheme in ("http", "https") else None


BACKEND = Backend("duckduckgo", DEFAULT_BASE_URL, needs_key=False, build=build, parse=parse)
