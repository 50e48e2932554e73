"""Pages built of similar sections: a landing page or a page-builder layout, where the pick
is one section of several.

Page builders lay a service or landing page out as a column of sections of one kind (the
same tag and first class); Readability's pick is the wordiest of them and the rest of the
page is lost. When the pick sits in one of MIN_SECTIONS or more classed siblings of one
kind, their parent is read instead, if it holds SECTIONS_GAIN times the pick's text outside
links and reads like content (at most `_score.SPREAD_LINK_DENSITY` of its text in links).
"""

from __future__ import annotations

from ._dom import Elem
from ._hints import LIKELY
from ._repeat import signature
from ._rules import NAMED_PICK, on
from ._score import SPREAD_LINK_DENSITY, link_density

MIN_SECTIONS = 3  # two similar blocks are a two-column layout, not a column of sections
SECTIONS_GAIN = 1.25


def join_sections(content: list[Elem], *, article: bool = False) -> list[Elem]:
    """`content`, or the parent of the similar sections the first picked element sits in.

    On a page declaring itself an `article`, or when the pick's class/id names it content
    ("article__content"), the pick is the article, not one section of a page, and is kept.
    """
    if not content or article or (names_content(content) and on(NAMED_PICK)):
        return content
    picked = sum(_plain_len(elem) for elem in content)
    node = content[0]
    while node.parent is not None:
        parent = node.parent
        if node.attrs.get("class") and _similar_kids(parent, node) >= MIN_SECTIONS:
            if _plain_len(parent) >= SECTIONS_GAIN * picked and (
                link_density(parent) <= SPREAD_LINK_DENSITY
            ):
                return [parent]
            return content
        node = parent
    return content


def names_content(content: list[Elem]) -> bool:
    """True when an element's class/id names it the page's content ("article__content")."""
    return any(LIKELY.search(elem.hint) for elem in content)


def _similar_kids(parent: Elem, kid: Elem) -> int:
    kind = signature(kid)
    return sum(
        1
        for other in parent.kids
        if isinstance(other, Elem) and other.text_len and signature(other) == kind
    )


def _plain_len(elem: Elem) -> int:
    return elem.text_len - elem.link_len
