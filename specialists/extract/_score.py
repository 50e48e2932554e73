"""Main-content selection: which elements of the mirror hold the article.

The method is Readability's (Arc90, then Mozilla's Readability.js): every paragraph of prose
scores 1 + its commas + one point per 100 characters (at most 3), shared with its parent
(whole), grandparent (half) and further ancestors (a third per level); an element's score is
then scaled by its share of non-link text and its class hints, the best element wins, and
siblings that score or read like prose join it.
"""

from __future__ import annotations

import re

from ._attrs import class_weight
from ._dom import Elem, inside, text_of
from ._hints import BLOCK_TAGS, PARAGRAPH_TAGS
from ._rules import CLIMB, RIVAL_ANCESTOR, SIBLINGS, on

MIN_PARAGRAPH_CHARS = 25  # Readability: shorter "paragraphs" are not scored
ANCESTOR_LEVELS = 5  # Readability shares a paragraph's score with five ancestors
TOP_CANDIDATES = 5  # Readability's nbTopCandidates
RIVAL_SHARE = 0.75  # a rival scores at least this share of the top candidate (Readability)
MIN_RIVALS = 3  # Readability's MINIMUM_TOPCANDIDATES

# A pick holding less than this share of the page's text outside links may be one section
# of a page made of many (a service page, a product page): it spreads to the highest
# ancestor that still reads like content (at most SPREAD_LINK_DENSITY of its text in
# links) and holds SPREAD_GAIN times the pick's text, never past a <main> or <article>
# holding the pick.
SPREAD_BELOW_SHARE = 0.5
SPREAD_LINK_DENSITY = 0.2
SPREAD_GAIN = 1.5

# Content holding less than this share of the page's text outside links misses most of the
# page (a listing in several parts, a thread the scoring split): the lowest ancestor holding
# KEEP_REACH of that text is read instead, its links kept.
KEEP_MIN_SHARE = 0.3
KEEP_REACH = 0.5

_TAG_BASE = {
    "div": 5.0, "article": 10.0, "main": 5.0, "section": 3.0, "pre": 3.0, "td": 3.0,
    "blockquote": 3.0, "address": -3.0, "ol": -3.0, "ul": -3.0, "dl": -3.0, "dd": -3.0,
    "dt": -3.0, "li": -3.0, "form": -3.0, "h1": -5.0, "h2": -5.0, "h3": -5.0, "h4": -5.0,
    "h5": -5.0, "h6": -5.0, "th": -5.0,
}  # fmt: skip
_SENTENCE_END = re.compile(r"\.( |$)")  # Readability's test for a short paragraph that joins
_DIGITS = re.compile(r"\d+")
_PROSE_CONTAINERS = frozenset({"div", "section", "article", "span", "font", "main"})


def measure(order: list[Elem]) -> None:
    """Fill text, link-text, comma, block and prose counters bottom-up, once.

    `order` lists parents before children.
    """
    for elem in reversed(order):
        elem.commas += elem.own_commas
        elem.text_len += elem.own_len
        if elem.tag == "a":
            elem.link_len = elem.text_len
        if is_paragraph(elem):
            elem.points = paragraph_points(elem)
        elif elem.own_len:  # loose text between blocks reads as its own paragraph
            elem.points = _points(elem.own_len, elem.own_commas)
        elem.prose += elem.points * (1.0 - link_density(elem))
        parent = elem.parent
        if parent is not None:
            parent.text_len += elem.text_len
            parent.link_len += elem.link_len
            parent.commas += elem.commas
            parent.prose += elem.prose
            if elem.tag in BLOCK_TAGS or elem.blocky:
                parent.blocky = True


def is_paragraph(elem: Elem) -> bool:
    """A prose unit: a paragraph-like tag, or a container with no block inside."""
    if elem.tag == "p" or elem.tag == "pre":
        return True
    return (elem.tag in PARAGRAPH_TAGS or elem.tag in _PROSE_CONTAINERS) and not elem.blocky


def paragraph_points(elem: Elem) -> float:
    """The points of a paragraph element (see `_points`)."""
    return _points(elem.text_len, elem.commas)


def _points(length: int, commas: int) -> float:
    """Readability's paragraph score: 1 + commas + length/100 (at most 3); 0 when short."""
    if length < MIN_PARAGRAPH_CHARS:
        return 0.0
    return 1.0 + commas + min(length / 100.0, 3.0)


def link_density(elem: Elem) -> float:
    """Share of the element's text that sits inside links (0 for an empty element)."""
    return elem.link_len / elem.text_len if elem.text_len else 0.0


def score_candidates(order: list[Elem]) -> list[Elem]:
    """Share each prose paragraph's points with its ancestors; return the scored ancestors.

    A paragraph's points go to its parent first; loose text of a container counts as a
    paragraph inside that container, so the container itself takes the full share.
    """
    candidates: dict[int, Elem] = {}
    for elem in order:
        elem.score = 0.0
    for elem in order:
        if not elem.points:
            continue
        ancestor = elem.parent if is_paragraph(elem) else elem
        level = 0
        while ancestor is not None and level < ANCESTOR_LEVELS:
            if id(ancestor) not in candidates:
                candidates[id(ancestor)] = ancestor
                ancestor.score = _TAG_BASE.get(ancestor.tag, 0.0) + class_weight(ancestor.hint)
            ancestor.score += elem.points / (1 if level == 0 else 2 if level == 1 else level * 3)
            ancestor, level = ancestor.parent, level + 1
    for elem in candidates.values():
        elem.score *= 1.0 - link_density(elem)
    return list(candidates.values())


def select_content(root: Elem, order: list[Elem]) -> list[Elem]:
    """The elements that hold the article, in document order; `[root]` when nothing scores."""
    candidates = score_candidates(order)
    if not candidates:
        return [root]
    best = _best(candidates, root)
    top = _climb(best, {id(c) for c in candidates})
    if top is not best and not on(CLIMB):
        top = best
    parent = top.parent
    if parent is None:
        return [top]
    joined = [kid for kid in parent.kids if isinstance(kid, Elem) and _joins(kid, top)]
    return joined if joined == [top] or on(SIBLINGS) else [top]


def _best(candidates: list[Elem], root: Elem) -> Elem:
    """The top scorer, or the ancestor it shares with three near-equal rivals (Readability)."""
    ranked = sorted(candidates, key=lambda e: e.score, reverse=True)[:TOP_CANDIDATES]
    top = ranked[0]
    rivals = [c for c in ranked[1:] if top.score > 0 and c.score / top.score >= RIVAL_SHARE]
    if len(rivals) < MIN_RIVALS or not on(RIVAL_ANCESTOR):
        return top
    ancestor = top.parent
    while ancestor is not None and ancestor is not root:
        if (
            sum(1 for r in rivals if r.parent is not None and inside(r.parent, ancestor))
            >= MIN_RIVALS
        ):
            return ancestor
        ancestor = ancestor.parent
    return top


def _climb(top: Elem, scored: set[int]) -> Elem:
    """Readability's walk up: a scored ancestor that outscores the path so far wins."""
    last, floor = top.score, top.score / 3
    ancestor = top.parent
    while ancestor is not None and ancestor.parent is not None:
        if id(ancestor) in scored:
            if ancestor.score < floor:
                break
            if ancestor.score > last:
                return ancestor
            last = ancestor.score
        ancestor = ancestor.parent
    return top


def _joins(sibling: Elem, top: Elem) -> bool:
    if sibling is top:
        return True
    threshold = max(10.0, top.score * 0.2)
    bonus = 0.2 * top.score if sibling.hint and _same_kind(sibling.hint, top.hint) else 0.0
    if sibling.score + bonus >= threshold:
        return True
    if not is_paragraph(sibling):
        return False
    density, length = link_density(sibling), sibling.text_len
    if length > 80:
        return density < 0.25
    return length > 0 and density == 0.0 and _SENTENCE_END.search(text_of(sibling)) is not None


def _same_kind(hint: str, other: str) -> bool:
    """True when two class/id strings are equal but for their numbers ("sec1", "sec2")."""
    return hint == other or _DIGITS.sub("", hint) == _DIGITS.sub("", other)


def spread(content: list[Elem], root: Elem) -> list[Elem]:
    """`content`, or the highest ancestor that adds prose-like text to a small pick."""
    picked = sum(_plain_len(elem) for elem in content)
    if not content or picked >= SPREAD_BELOW_SHARE * _plain_len(root):
        return content
    best: Elem | None = None
    node = content[0].parent
    while node is not None and link_density(node) <= SPREAD_LINK_DENSITY:
        if _plain_len(node) >= SPREAD_GAIN * picked:
            best = node
        if node.tag in ("main", "article"):  # the page's own mark of its main content
            break
        node = node.parent
    return content if best is None else [best]


def _plain_len(elem: Elem) -> int:
    return elem.text_len - elem.link_len


def keep_most(content: list[Elem], root: Elem) -> tuple[list[Elem], bool]:
    """`content`, or the lowest ancestor holding most of the page's text when it holds little.

    Returns True with the ancestor: the page's content is scattered, not one block of prose.
    """
    page = _plain_len(root)
    if not content or sum(_plain_len(elem) for elem in content) >= KEEP_MIN_SHARE * page:
        return content, False
    node = content[0].parent
    while node is not None and _plain_len(node) < KEEP_REACH * page:
        node = node.parent
    return [node or root], True
