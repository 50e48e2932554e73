"""Page metadata read from the parsed document: the title and the description.

Meta values are decoded once more when they still spell entities out (`_text.decoded`):
a description stands in for the body of a script shell, so it must read as text.
"""

from __future__ import annotations

import re

from selectolax.lexbor import LexborHTMLParser

from ._text import decoded, readable

# "Headline | Site", "Headline - Site", "Headline — Site": Readability's title separators,
# without its ':' (headlines use colons: "Fact check: ...").
_SITE_SEPARATOR = re.compile(r"\s+[|\-–—»·]\s+")
MIN_HEADLINE_WORDS = 3  # Readability keeps a split title only if it still has a few words
MAX_SITE_WORDS = 4  # what follows the last separator must be short to be a site name


def find_title(tree: LexborHTMLParser) -> str | None:
    """og:title, else the first non-empty <h1>, else <title>; a trailing site name is cut
    from og:title and <title> ("Headline | Site" gives "Headline")."""
    og = _meta(tree, 'meta[property="og:title" i]') or _meta(tree, 'meta[name="twitter:title" i]')
    if og:
        return _strip_site(og)
    for heading in tree.css("h1"):
        text = _clean(heading.text(separator=" "))
        if text:
            return text
    node = tree.css_first("title")
    title = _clean(node.text()) if node is not None else None
    return _strip_site(title) if title else None


def find_description(tree: LexborHTMLParser) -> str | None:
    """The meta description, else og:description; None when the page has neither."""
    description = _meta(tree, 'meta[name="description" i]')
    return description or _meta(tree, 'meta[property="og:description" i]')


def _meta(tree: LexborHTMLParser, selector: str) -> str | None:
    node = tree.css_first(selector)
    if node is None:
        return None
    return _clean(decoded(node.attributes.get("content") or ""))


def _clean(text: str) -> str | None:
    return " ".join(readable(text).split()) or None


def _strip_site(title: str) -> str:
    separators = list(_SITE_SEPARATOR.finditer(title))
    if not separators:
        return title
    head, site = title[: separators[-1].start()], title[separators[-1].end() :]
    if len(site.split()) <= MAX_SITE_WORDS and len(head.split()) >= MIN_HEADLINE_WORDS:
        return head
    return title
