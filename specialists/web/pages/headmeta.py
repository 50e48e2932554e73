"""The page head: OpenGraph, Twitter cards, JSON-LD, ``<title>`` and meta refresh.

Only the head is parsed (seed 003: "parses <meta> OG tags from <head> only").
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from typing import Any

from selectolax.lexbor import LexborHTMLParser, LexborNode

from csp_web.core.api import peer_json

from .dates import iso_date

# The head: OpenGraph, Twitter cards, JSON-LD, <title>, meta refresh. Only the head is parsed
# (seed 003: "parses <meta> OG tags from <head> only"); a regex finds where it ends.
HEAD_SCAN_CHARS = 256 * 1024  # with no </head> or <body> this far in, the head is cut here
META_VALUE_CHARS = 2000  # longer values are cut: a card's text, not a document
MAX_LD_NODES = 200  # JSON-LD objects read per page; real pages have a handful
_HEAD_END = re.compile(r"</head\s*>|<body[\s>]", re.I)
_REFRESH = re.compile(r"\s*[0-9.]*\s*[;,]?\s*(?:url\s*=\s*)?(.*)", re.I | re.S)
# (Page.meta key, its sources in order); "ld:" is JSON-LD, "html:title" the <title> element.
_SOURCES = (
    ("title", ("og:title", "twitter:title", "ld:title", "html:title")),
    ("description", ("og:description", "twitter:description", "ld:description", "description")),
    ("image", ("og:image", "og:image:url", "og:image:secure_url", "twitter:image", "ld:image")),
    ("site_name", ("og:site_name", "ld:site_name", "application-name")),
    ("type", ("og:type",)),
    ("og_url", ("og:url",)),
    ("author", ("author", "ld:author", "article:author", "dc.creator", "twitter:creator")),
    (
        "published",
        ("article:published_time", "ld:published", "datepublished", "dc.date", "date", "pubdate"),
    ),
    ("lang", ("html:lang", "content-language", "og:locale")),
)
_URL_KEYS = frozenset({"image", "og_url"})
_LANG_TAG = re.compile(r"[A-Za-z]{2,3}(?:-[A-Za-z0-9]{1,8})*")
# JSON-LD types that describe the site or its people, never the page's own content.
_LD_NOT_CONTENT = frozenset(
    {
        "website",
        "organization",
        "newsmediaorganization",
        "corporation",
        "person",
        "breadcrumblist",
        "listitem",
        "imageobject",
        "searchaction",
        "sitenavigationelement",
    }
)
_LD_SITE = frozenset({"website", "organization", "newsmediaorganization", "corporation"})


@dataclass(frozen=True)
class Head:
    """What a page's head says about it: ``meta`` keys are title, description, image,
    site_name, type, og_url, author, published (an ISO-8601 date), lang (a BCP 47 tag), only
    those found; ``refresh`` is a meta-refresh target."""

    meta: dict[str, str]
    refresh: str | None


def head_slice(html: str) -> str:
    """``html`` up to its ``</head>`` (or ``<body>``): a cheap cut, so the body is never
    parsed for the card."""
    match = _HEAD_END.search(html, 0, HEAD_SCAN_CHARS)
    return html[: match.start()] if match else html[:HEAD_SCAN_CHARS]


def read_head(html: str, *, base_url: str) -> Head:
    """The head's metadata, each field from its first source that has it: OpenGraph, then
    Twitter cards, then JSON-LD, then <title> and the meta description. URLs are made
    absolute against ``base_url`` (http/https only). Never raises."""
    try:
        tree = LexborHTMLParser(head_slice(html))
    except Exception:  # the card is advisory; a parser edge case must not fail the load
        return Head({}, None)
    found, refresh = _meta_tags(tree.css("meta"), base_url)
    title = tree.css_first("title")
    if title is not None and (text := _clean(title.text())):
        found["html:title"] = text
    root = tree.css_first("html")
    if root is not None and (lang := _clean(root.attributes.get("lang") or "")):
        found["html:lang"] = lang
    found.update({f"ld:{key}": value for key, value in _json_ld(tree).items()})
    meta: dict[str, str] = {}
    for name, sources in _SOURCES:
        values = (
            _NORMALISE.get(name, _same)(found[source]) for source in sources if source in found
        )
        value = next((v for v in values if v), None)
        if value is not None and name in _URL_KEYS:
            value = absolute_url(value, base_url)
        if value:
            meta[name] = value
    return Head(meta, refresh)


def _same(value: str) -> str | None:
    return value


def _author(value: str) -> str | None:
    """A person's name; a profile URL (og's article:author) or a @handle alone names nobody."""
    return None if value.startswith(("http://", "https://", "@")) else value


def _lang(value: str) -> str | None:
    """A BCP 47 tag as HTML's lang spells it: ``en_US`` (og:locale) becomes ``en-US``; the
    first of a list (Content-Language may hold several); None for anything else."""
    tag = value.split(",")[0].strip().replace("_", "-")
    return tag if _LANG_TAG.fullmatch(tag) else None


_NORMALISE = {"author": _author, "published": iso_date, "lang": _lang}


def _meta_tags(nodes: list[LexborNode], base_url: str) -> tuple[dict[str, str], str | None]:
    found: dict[str, str] = {}
    refresh: str | None = None
    for node in nodes:
        attrs = node.attributes
        content = _clean(attrs.get("content") or "")
        if content is None:
            continue
        if (attrs.get("http-equiv") or "").strip().lower() == "refresh":
            refresh = refresh or refresh_target(content, base_url)
            continue
        key = (attrs.get("property") or attrs.get("name") or "").strip().lower()
        if key:
            found.setdefault(key, content)
    return found, refresh


def refresh_target(content: str, base_url: str) -> str | None:
    """The URL of a ``<meta http-equiv="refresh" content="0; url=...">``, absolute, or None
    when it names none (a plain reload). The delay is ignored: Google follows delayed
    refreshes as redirects too. Parsing follows WHATWG HTML's declarative refresh steps,
    leniently."""
    match = _REFRESH.fullmatch(content)
    target = match.group(1).strip() if match else ""
    if target[:1] in ("'", '"'):
        target = target[1:].split(target[0], 1)[0]
    return absolute_url(target, base_url) if target else None


def absolute_url(value: str, base_url: str) -> str | None:
    """``value`` joined to ``base_url``, or None unless the result is an http(s) URL urllib
    can split (WHATWG: a refresh or link that fails to parse is ignored). The caller still
    passes the result through the URL gate."""
    try:
        joined = urllib.parse.urljoin(base_url, value.strip())
        scheme = urllib.parse.urlsplit(joined).scheme
    except ValueError:  # a malformed IPv6 literal or port in the page's markup
        return None
    return joined if scheme in ("http", "https") else None


def _json_ld(tree: LexborHTMLParser) -> dict[str, str]:
    nodes = _ld_nodes(tree)
    content = [node for node in nodes if not _ld_types(node) & _LD_NOT_CONTENT]
    primary = next((n for n in content if _ld_text(n.get("headline"))), None)
    primary = primary or next((n for n in content if _ld_text(n.get("name"))), None)
    ordered = [primary, *content] if primary is not None else content
    found: dict[str, str] = {}
    if primary is not None:
        found["title"] = _ld_text(primary.get("headline")) or _ld_text(primary.get("name")) or ""
    for key, prop, inner in (("description", "description", ""), ("image", "image", "url")):
        value = next((v for n in ordered if (v := _ld_text(n.get(prop), inner))), None)
        if value:
            found[key] = value
    if primary is not None:
        found["author"] = _ld_text(primary.get("author"), "name") or ""
        found["published"] = _ld_text(primary.get("datePublished")) or ""
    sites = [n for n in nodes if _ld_types(n) & _LD_SITE]
    publisher = primary.get("publisher") if primary is not None else None
    site = next((v for n in sites if (v := _ld_text(n.get("name")))), None)
    site = site or _ld_text(publisher, "name")
    if site:
        found["site_name"] = site
    return {key: value for key, value in found.items() if value}


def _ld_nodes(tree: LexborHTMLParser) -> list[dict[str, Any]]:
    """The JSON-LD objects in the head, breadth first through lists and ``@graph``."""
    nodes: list[dict[str, Any]] = []
    for script in tree.css('script[type="application/ld+json" i]'):
        try:
            pending: list[Any] = [peer_json.loads(script.text())]
        except peer_json.NotJson:
            continue  # real pages ship JSON-LD with trailing commas; such a block says nothing
        while pending and len(nodes) < MAX_LD_NODES:
            item = pending.pop()
            if isinstance(item, list):
                pending.extend(reversed(item[:MAX_LD_NODES]))
            elif isinstance(item, dict):
                nodes.append(item)
                graph = item.get("@graph")
                if isinstance(graph, list):
                    pending.extend(reversed(graph[:MAX_LD_NODES]))
    return nodes


def _ld_types(node: dict[str, Any]) -> set[str]:
    kinds = node.get("@type")
    names = kinds if isinstance(kinds, list) else [kinds]
    return {name.lower() for name in names if isinstance(name, str)}


def _ld_text(value: Any, inner: str = "") -> str | None:
    """A JSON-LD value as text: a string, the first of a list, or an object's ``inner``."""
    if isinstance(value, list):
        value = value[0] if value else None
    if isinstance(value, dict) and inner:
        value = value.get(inner)
    return _clean(value) if isinstance(value, str) else None


def _clean(text: str) -> str | None:
    return " ".join(text.split())[:META_VALUE_CHARS] or None
