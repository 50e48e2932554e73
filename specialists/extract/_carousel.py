"""Product carousels: the other products a product page offers beside its own.

A product page sells one product; a row of four or more similar cards, each with its own
price and a link, is a carousel of other products (bundles, other colours, "complete the
set"), whatever heading leads it or none. On a listing the cards are the content, so the
rule is only applied to a page declaring itself a product.
"""

from __future__ import annotations

from collections import Counter

from ._dom import Elem, text_of
from ._hints import PRICE
from ._repeat import MIN_ITEMS, signature


def is_carousel(elem: Elem) -> bool:
    """True when MIN_ITEMS or more similar children of `elem` each show a price and a link."""
    kids = [kid for kid in elem.kids if isinstance(kid, Elem) and kid.text_len]
    if len(kids) < MIN_ITEMS:
        return False
    counts = Counter(signature(kid) for kid in kids)
    name, count = counts.most_common(1)[0]
    if count < MIN_ITEMS:
        return False
    cards = [kid for kid in kids if signature(kid) == name]
    return all(_is_card(kid) for kid in cards)


def _is_card(elem: Elem) -> bool:
    return _has_link(elem) and PRICE.search(text_of(elem)) is not None


def _has_link(elem: Elem) -> bool:
    stack = [elem]
    while stack:
        node = stack.pop()
        if node.tag == "a":
            return True
        stack.extend(kid for kid in node.kids if isinstance(kid, Elem))
    return False
