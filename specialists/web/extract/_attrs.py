"""What an element's attributes say about it: hidden, named like chrome, class weight.

All functions are pure; the ones over class/id strings are cached, because class lists repeat
within a page and across the pages of a site.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Any

from ._hints import (
    CHROME_PIECES,
    CHROME_PREFIXES,
    CHROME_WORDS,
    HIDING_CLASSES,
    LIKELY,
    NEGATIVE,
    NEVER_CHROME,
    POSITIVE,
    SHOWING_PREFIXES,
    UNLIKELY_ROLES,
)

_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden")
# React's streaming renderer sends late parts of the page as `<div hidden id="S:0">` and a
# script moves them into place: hidden in the HTML, shown to every reader with scripts.
_STREAMED_SEGMENT = re.compile(r"S:\d+")


def is_hidden(attrs: dict[str, str | None]) -> bool:
    """True when the attributes hide the element from every reader."""
    if "hidden" in attrs and not _STREAMED_SEGMENT.fullmatch(attrs.get("id") or ""):
        return True
    if attrs.get("aria-hidden") == "true":
        return True
    style = attrs.get("style")
    return style is not None and _HIDDEN_STYLE.search(style.lower()) is not None


@functools.lru_cache(maxsize=4096)  # class lists repeat across a page and across pages
def class_weight(hint: str) -> int:
    """Readability's class weight: +25 for an article-like class/id, -25 for chrome."""
    weight = 0
    if NEGATIVE.search(hint):
        weight -= 25
    if POSITIVE.search(hint):
        weight += 25
    return weight


def _trie_pattern(words: Iterable[str]) -> re.Pattern[str]:
    """One regex matching any of `words`, factored by shared prefixes.

    Python's `re` tries every branch of an alternation at every position; sharing prefixes
    makes a 65-character class list cost about 3 µs instead of 20.
    """
    trie: dict[str, dict[str, Any]] = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}
    return re.compile(_trie_source(trie))


def _trie_source(node: dict[str, Any]) -> str:
    branches = [
        re.escape(char) + _trie_source(child) for char, child in sorted(node.items()) if char
    ]
    if not branches:
        return ""
    group = branches[0] if len(branches) == 1 else f"(?:{'|'.join(branches)})"
    return f"(?:{group})?" if "" in node else group


_CHROME_SUBSTRING = _trie_pattern(CHROME_WORDS)
_NAME_PIECE = re.compile(r"[^a-z0-9]+")


def named_chrome(tag: str, attrs: dict[str, str | None], hint: str) -> bool:
    """True when an element's role, or its class/id without an article word, names chrome."""
    if tag in NEVER_CHROME:
        return False
    role = attrs.get("role")
    if role and role in UNLIKELY_ROLES:
        return True
    return bool(hint) and _chrome_hint(hint)


@functools.lru_cache(maxsize=8192)  # class lists repeat within and across pages of a site
def _chrome_hint(hint: str) -> bool:
    """A class/id word names chrome and no other word names the article on its own."""
    if not names_chrome(hint):
        return False
    return not any(LIKELY.search(w) and not names_chrome(w) for w in hint.split())


def names_chrome(hint: str) -> bool:
    """True when a lower-cased class/id string names page chrome (see CHROME_WORDS)."""
    hint = hint.replace("commentary", "")  # an opinion genre, not a comment thread
    if _CHROME_SUBSTRING.search(hint):
        return True
    if _hidden_by_class(hint.split()):
        return True
    pieces = _NAME_PIECE.split(hint)
    return any(p in CHROME_PIECES or p.startswith(CHROME_PREFIXES) for p in pieces)


def _hidden_by_class(words: list[str]) -> bool:
    if HIDING_CLASSES.isdisjoint(words):
        return False
    return not any(word.startswith(SHOWING_PREFIXES) for word in words)
