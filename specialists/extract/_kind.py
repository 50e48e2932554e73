"""The page-type hint: what kind of page the extractor read, when it can tell.

Only general signals count: what the page declares about itself (its OpenGraph type and
schema.org types), web-wide URL conventions (a forum thread under /t/ or /threads/ on a
forum host, documentation under /docs/), and the layout the extractor found (a run of
link-heavy items is a listing; one whose items show a price each is a shop's collection).
When the signals are weak or disagree the hint is None: a wrong hint misleads an agent more
than a missing one.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from urllib.parse import urlsplit

from selectolax.lexbor import LexborHTMLParser

from ._hints import PRICE

PAGE_TYPES = ("article", "forum", "docs", "listing", "product", "collection", "service")

MIN_FORUM_POSTS = 2  # schema.org posts (Comment, Answer...) that make a thread
MIN_COLLECTION_PRODUCTS = 4  # schema.org Products in a listing: a category grid
MIN_LISTING_ITEMS = 8  # items of a link-heavy run that make the page a listing
MIN_LISTING_LINK_DENSITY = 0.5
MIN_COLLECTION_PRICES = 4  # prices in a listing's text, and at least one per item of its run
MIN_ARTICLE_CHARS = 1_000  # an article's prose outside links

_FORUM_SCHEMA = frozenset(
    {"comment", "answer", "question", "qapage", "discussionforumposting", "usercomments"}
)
# schema.org types only a discussion declares: its page is the thread, whatever og:type says.
_THREAD_SCHEMA = frozenset({"discussionforumposting", "qapage", "question"})
_ARTICLE_SCHEMA = frozenset(
    {"article", "newsarticle", "blogposting", "reportagenewsarticle", "analysisnewsarticle"}
)
_PRODUCT_OG = frozenset({"product", "product.item", "og:product"})
_COLLECTION_OG = frozenset({"product.group", "product:group"})
_FORUM_PATH = re.compile(
    r"/(?:t|threads?|topics?|viewtopic\.php|showthread\.php|questions|discussions?|d)(?:/|$)"
)
_FORUM_HOST = re.compile(r"(?:^|\.)(?:forums?|community|discuss|discussions|bbs|boards|answers)\.")
_DOCS_PATH = re.compile(r"/(?:docs?|documentation|reference|manual|handbook|api)(?:/|$)")
_DOCS_HOST = re.compile(r"^(?:docs?|developers?|devdocs|wiki)\.")
_ARTICLE_PATH = re.compile(r"/(?:blogs?|news|articles?|posts?|stories|\d{4}/\d{2})(?:/|$)")
_LD_TYPE = re.compile(r'"@type"\s*:\s*\[?\s*"(?:https?://schema\.org/)?(\w+)"', re.IGNORECASE)


@dataclass(frozen=True)
class Declared:
    """What the page says it is: its og:type and its schema.org types with their counts."""

    og_type: str
    schema: Counter[str]


@dataclass(frozen=True)
class Layout:
    """What extraction found: a listing, a run widened into, the run's shape, prose size."""

    listing: bool
    widened: bool
    run_items: int
    run_link_density: float
    prose_chars: int


def declared_types(tree: LexborHTMLParser) -> Declared:
    """The page's og:type and schema.org types (microdata and JSON-LD), lower-cased.

    Call before scripts are stripped: JSON-LD lives in <script>.
    """
    node = tree.css_first('meta[property="og:type" i]')
    og_type = ((node.attributes.get("content") or "") if node is not None else "").strip().lower()
    schema: Counter[str] = Counter()
    for item in tree.css("[itemtype]"):
        for name in (item.attributes.get("itemtype") or "").split():
            schema[name.rstrip("/").rsplit("/", 1)[-1].lower()] += 1
    for script in tree.css('script[type="application/ld+json" i]'):
        schema.update(name.lower() for name in _LD_TYPE.findall(script.text()))
    return Declared(og_type, schema)


def declares_article(declared: Declared) -> bool:
    """True when the page's og:type or schema.org types say it is an article."""
    return declared.og_type == "article" or not _ARTICLE_SCHEMA.isdisjoint(declared.schema)


def declares_thread(declared: Declared) -> bool:
    """True when the page's schema.org types say it is a discussion (a forum thread, a
    question and its answers); forum engines often give such a page og:type article."""
    return not _THREAD_SCHEMA.isdisjoint(declared.schema)


def declares_product(declared: Declared) -> bool:
    """True when the page's og:type or schema.org types say it sells one product."""
    return _is_product(declared.og_type, declared.schema)


def page_type(declared: Declared, url: str | None, layout: Layout, text: str) -> str | None:
    """One of PAGE_TYPES, or None when the page does not say clearly enough.

    `text` is the content read (Markdown): a listing's items that show prices make it a
    collection.
    """
    parts = urlsplit(url or "")
    host, path = (parts.hostname or "").lower(), parts.path.lower()
    schema, og_type = declared.schema, declared.og_type
    if _is_product(og_type, schema):
        return "product"
    if og_type in _COLLECTION_OG or (
        schema["product"] >= MIN_COLLECTION_PRODUCTS and layout.listing
    ):
        return "collection"
    if _is_forum(schema, host, path):
        return "forum"
    if _DOCS_HOST.search(host) or _DOCS_PATH.search(path):
        return "docs"
    if layout.run_items >= MIN_LISTING_ITEMS and (
        layout.listing and layout.run_link_density >= MIN_LISTING_LINK_DENSITY
    ):
        return "collection" if _priced(text, layout.run_items) else "listing"
    if _is_article(declared, path, layout):
        return "article"
    return None


def _priced(text: str, items: int) -> bool:
    """True when `text` shows MIN_COLLECTION_PRICES prices or more, and one per item."""
    prices = sum(1 for _ in PRICE.finditer(text))
    return prices >= max(MIN_COLLECTION_PRICES, items)


def _is_product(og_type: str, schema: Counter[str]) -> bool:
    if og_type in _PRODUCT_OG or og_type.endswith(":product"):
        return True
    return schema["product"] == 1 and schema["offer"] >= 1


def _is_forum(schema: Counter[str], host: str, path: str) -> bool:
    by_path = _FORUM_PATH.search(path) is not None
    if by_path and _FORUM_HOST.search(host):
        return True
    posts = sum(schema[name] for name in _FORUM_SCHEMA)
    return by_path and posts >= MIN_FORUM_POSTS


def _is_article(declared: Declared, path: str, layout: Layout) -> bool:
    if layout.listing or layout.widened or layout.prose_chars < MIN_ARTICLE_CHARS:
        return False
    return declares_article(declared) and _ARTICLE_PATH.search(path) is not None
