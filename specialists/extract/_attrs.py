"""What an element's attributes say about it: hidden, named like chrome, class weight.

All functions are pure; the ones over class/id strings are cached, because class lists repeat
within a page and across the pages of a site.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from typing import Any

from . import _rules as rules
from ._hints import (
    ALWAYS_CHROME_WORDS,
    CHROME_PAIRS,
    CHROME_PIECES,
    CHROME_PREFIXES,
    CHROME_WORDS,
    COLLAPSIBLE,
    CONTENT_HEADS,
    HIDING_CLASSES,
    HOOK_PIECES,
    ITEM_WORDS,
    LIKELY,
    MODIFIER_PIECES,
    NEGATIVE,
    NEVER_CHROME,
    POSITIVE,
    SHOWING_PREFIXES,
    STATE_PIECES,
    TAXONOMY_PIECES,
    UNLIKELY_ROLES,
)
from ._rules import (
    ACCORDION_ROLE,
    CHROME_ROLES,
    LIKELY_WORDS,
    NEGATIVE_WEIGHT,
    NEVER_CHROME_TAGS,
    POSITIVE_WEIGHT,
    STREAMED_SEGMENTS,
    cached,
    on,
)

_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden")
# React's streaming renderer sends late parts of the page as `<div hidden id="S:0">` and a
# script moves them into place: hidden in the HTML, shown to every reader with scripts.
_STREAMED_SEGMENT = re.compile(r"S:\d+")


def is_hidden(attrs: dict[str, str | None]) -> bool:
    """True when the attributes hide the element from every reader.

    `aria-hidden` is not among them: it hides an element from screen readers only (see
    `_dom`, which still drops short aria-hidden elements).
    """
    if "hidden" in attrs and not (
        _STREAMED_SEGMENT.fullmatch(attrs.get("id") or "") and on(STREAMED_SEGMENTS)
    ):
        return True
    style = attrs.get("style")
    return style is not None and _HIDDEN_STYLE.search(style.lower()) is not None


def names_collapsible(attrs: dict[str, str | None]) -> bool:
    """True when the class, id or role names a collapsible panel (COLLAPSIBLE, tabpanel)."""
    if attrs.get("role") == "tabpanel":
        return True
    hint = f"{attrs.get('class') or ''} {attrs.get('id') or ''}".lower()
    return COLLAPSIBLE.search(hint) is not None


@cached(maxsize=4096)  # class lists repeat across a page and across pages
def class_weight(hint: str) -> int:
    """Readability's class weight: +25 for an article-like class/id, -25 for chrome."""
    weight = 0
    if NEGATIVE.search(hint) and on(NEGATIVE_WEIGHT):
        weight -= 25
    if POSITIVE.search(hint) and on(POSITIVE_WEIGHT):
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


_CHROME_START = _trie_pattern(CHROME_WORDS)
# Any chrome word, short piece, prefix or pair start anywhere in a hint: a cheap first test
# that rules out most class lists before they are split into tokens and pieces.
_MAYBE_CHROME = _trie_pattern(
    {*CHROME_WORDS, *CHROME_PIECES, *CHROME_PREFIXES, *(pair.split()[0] for pair in CHROME_PAIRS)}
)
_CHROME_END = _trie_pattern(word[::-1] for word in CHROME_WORDS)  # matched on piece[::-1]
_DIGITS = re.compile(r"\d+")
_NAME_PIECE = re.compile(r"[^a-z]+")  # digits split too: "sidebar1", "col-2"
# Letters right after a digit are the tail of a generated name ("jxk9ad", "css-1ad3f"), not
# a word: they name nothing.
_GENERATED_TAIL = re.compile(r"\d[a-z]+")
# A utility class's arbitrary value ("pt-[calc(var(--banner-height))]") is CSS, not a name.
_ARBITRARY_VALUE = re.compile(r"\[[^\]]*\]?")


def named_chrome(tag: str, attrs: dict[str, str | None], hint: str) -> bool:
    """True when an element's role, or its class/id without an article word, names chrome."""
    if tag in NEVER_CHROME and on(NEVER_CHROME_TAGS):
        return False
    role = attrs.get("role")
    if (
        role
        and role in UNLIKELY_ROLES
        and not (_is_accordion(role, attrs) and on(ACCORDION_ROLE))
        and on(CHROME_ROLES)
    ):
        return True
    return bool(hint) and _chrome_hint(hint)


def _is_accordion(role: str, attrs: dict[str, str | None]) -> bool:
    """True for a tablist whose tabs open together (aria-multiselectable): an accordion,
    which holds its panels of text, where a tablist holds only the tabs' labels."""
    return role == "tablist" and attrs.get("aria-multiselectable") == "true"


@cached(maxsize=8192)  # class lists repeat within and across pages of a site
def _chrome_hint(hint: str) -> bool:
    """A class/id word names chrome and no other word names the article on its own."""
    if not names_chrome(hint):
        return False
    likely = any(LIKELY.search(w) and not names_chrome(w) for w in hint.split())
    return not (likely and on(LIKELY_WORDS))


def names_chrome(hint: str) -> bool:
    """True when a lower-cased class/id string names page chrome (see CHROME_WORDS).

    Each whitespace-separated token is judged on its own, by its pieces: script hooks and
    states ("js-...", "is-...") name nothing, pieces after a modifier ("has-author") name a
    feature, and a token ending in a content word ("comment-body") names content.
    """
    tokens = hint.split()
    if _hidden_by_class(tokens) and on(rules.HIDING_CLASSES):
        return True
    return _MAYBE_CHROME.search(hint) is not None and any(map(_token_names_chrome, tokens))


@cached(maxsize=4096)
def chrome_tokens(hint: str) -> frozenset[str]:
    """The class/id tokens of a lower-cased hint that name chrome on their own, without their
    digits (the items of one run differ by number: "teaser_3", "comment-1204")."""
    return frozenset(_DIGITS.sub("", token) for token in hint.split() if _token_names_chrome(token))


def always_chrome(hint: str) -> bool:
    """True when a chrome-naming token of `hint` names a consent or cookie dialog."""
    return any(word in token for token in chrome_tokens(hint) for word in ALWAYS_CHROME_WORDS)


@cached(maxsize=4096)
def names_items(token: str) -> bool:
    """True when every chrome-naming piece of a class token is an item word (ITEM_WORDS):
    "comment-item" can name a thread's posts, "author-signature" names chrome."""
    pieces = [piece for piece in _NAME_PIECE.split(token) if _piece_names_chrome(piece)]
    return bool(pieces) and all(any(word in piece for word in ITEM_WORDS) for piece in pieces)


def _token_names_chrome(token: str) -> bool:
    # A utility-class variant ("print:hidden", "md:sidebar-open") names a condition before
    # its last colon ("when printed"), and what the element is after it.
    pieces = [piece for piece in _NAME_PIECE.split(_token_name(token)) if piece]
    if not pieces:
        return False
    if (pieces[0] in HOOK_PIECES and on(rules.HOOK_PIECES)) or (
        pieces[-1] in CONTENT_HEADS and on(rules.CONTENT_HEADS)
    ):
        return False
    # "hero-banner", "pageherobanner": the lead section of a landing page, not an ad
    if any("hero" in piece for piece in pieces) and on(rules.HERO_PIECES):
        return False
    for end, piece in enumerate(pieces):
        if (piece in MODIFIER_PIECES and on(rules.MODIFIER_PIECES)) or (
            _starts_slug(pieces, end) and on(rules.TAXONOMY_SLUGS)
        ):
            pieces = pieces[:end]
            break
    if any(f"{a} {b}" in CHROME_PAIRS for a, b in itertools.pairwise(pieces)) and on(
        rules.CHROME_PAIRS
    ):
        return True
    return any(_piece_names_chrome(piece) for piece in pieces)


def _token_name(token: str) -> str:
    """What a class token names once CSS values, variants and generated tails are cut."""
    name = token
    if "[" in name and on(rules.ARBITRARY_VALUES):
        name = _ARBITRARY_VALUE.sub("-", name)
    if ":" in name and on(rules.UTILITY_VARIANTS):
        name = name.rsplit(":", 1)[-1]
    tailless = _GENERATED_TAIL.sub("-", name)
    if tailless != name and on(rules.GENERATED_TAILS):
        name = tailless
    return name


def _starts_slug(pieces: list[str], at: int) -> bool:
    """True when pieces[at] is a taxonomy word followed by a term's slug ("tag-sidebar"),
    not by the second half of a chrome name ("tag-list")."""
    if pieces[at] not in TAXONOMY_PIECES or at + 1 >= len(pieces):
        return False
    return f"{pieces[at]} {pieces[at + 1]}" not in CHROME_PAIRS


def _piece_names_chrome(piece: str) -> bool:
    if (piece in CHROME_PIECES and on(rules.CHROME_PIECES)) or (
        piece.startswith(CHROME_PREFIXES) and on(rules.CHROME_PREFIXES)
    ):
        return True
    # an opinion genre; a page's lead section
    if piece.startswith(("commentar", "hero")) and on(rules.GENRE_PIECES):
        return False
    if piece in STATE_PIECES and on(rules.STATE_PIECES):  # "node--promoted": a state
        return False
    return _CHROME_START.match(piece) is not None or _CHROME_END.match(piece[::-1]) is not None


def _hidden_by_class(words: list[str]) -> bool:
    if HIDING_CLASSES.isdisjoint(words):
        return False
    shown = any(word.startswith(SHOWING_PREFIXES) for word in words)
    return not (shown and on(rules.SHOWING_PREFIXES))
