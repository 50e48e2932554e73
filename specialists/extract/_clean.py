"""Cleaning inside the chosen content: what to leave out of the Markdown.

Readability's `_cleanConditionally` and `_cleanHeaders` in spirit. The chosen subtree still
holds the article's own chrome: its header (headline, byline, dateline), teaser cards and
link lists, interface labels ("Advertisement", "Share this"), and a tail of sign-up and
follow-us lines. Elements are skipped by id before rendering; the tail is trimmed after.
"""

from __future__ import annotations

import re

from ._carousel import is_carousel
from ._dom import Elem, text_of
from ._hints import BLOCK_TAGS, BOILERPLATE, BOILERPLATE_MAX_CHARS, HEADINGS, PROMO
from ._lead import around_leads, holds_lead
from ._members import MAX_CHARS as MEMBER_STATS_CHARS
from ._members import is_member_pairs, is_member_stats, starts_stats
from ._rules import (
    CARD_TITLES,
    HEADER_LEADS,
    INTRODUCED_LISTS,
    LONE_LINKS,
    SKIP_CAROUSELS,
    SKIP_DATELINE,
    SKIP_H1,
    SKIP_HEADER,
    SKIP_LABELS,
    SKIP_LINK_HEADINGS,
    SKIP_LINK_LISTS,
    SKIP_LINK_PARAGRAPHS,
    SKIP_MEMBER_STATS,
    SKIP_RECOMMENDATIONS,
    SKIP_TEASER_CARDS,
    SKIP_TITLE_REPEAT,
    TAIL_TITLES,
    on,
)
from ._score import is_paragraph, link_density
from ._sections import recommendation_sections

# Share of link text above which a paragraph, heading or list is navigation, not prose.
# Readability drops any list above 0.2 unless its class reads as content, which is too eager
# for lists of sources inside articles; 0.6 to 0.8 score alike on the dev corpus.
MAX_LINK_DENSITY = 0.7
# A linked heading over a block with less than this share of links is a card's title; a
# link list after such a block ending in a colon is what that block announces.
CARD_TEXT_MAX_LINK_DENSITY = 0.5
MIN_LINK_LIST_ITEMS = 3  # one or two linked items are usually "buy it here" lines in prose
DATELINE_EXTRA_CHARS = 30  # a <time> with less text than this around it is a dateline
MAX_TAIL_HEADINGS = 4  # as `_repeat.MIN_ITEMS`: a run of titles, not leftover headings
REPEAT_MAX_CHARS = 60  # a label, a heading or a byline; longer repeats are left as written
_SENTENCE_ENDS = (".", "!", "?", ":", ";")
MIN_LONE_LINK_WORDS = 6  # a link standing as a sentence, not "Read more" or a bare title
PROMO_MAX_CHARS = 300  # a sign-up or follow-us line is short; a paragraph mentioning one is not

_WORD = re.compile(r"\w+")
_BLOCK_PARAGRAPHS = frozenset({"p", "div", "section", "article"})


def find_skips(
    content: list[Elem], title: str | None, *, listing: bool = False, product: bool = False
) -> frozenset[int]:
    """id()s of the elements under `content` that the renderer should leave out.

    In a `listing` (many similar items, see `_repeat`) links are the content: link-heavy
    blocks and link cards are kept. Sections led by a recommendation heading ("Similar
    items") are left out on every page (`_sections`); on a `product` page, so are carousels
    of other products (`_carousel`).
    """
    title_words = _words(title) if title else ()
    skips: set[int] = set()
    headings: list[Elem] = []
    stack = list(content)
    while stack:
        elem = stack.pop()
        if elem.tag in HEADINGS:
            headings.append(elem)
        if elem.tag == "header" and not listing and holds_lead(elem) and on(HEADER_LEADS):
            skips |= around_leads(elem)
        elif _skippable(elem, title_words, listing) or (
            product and not listing and is_carousel(elem) and on(SKIP_CAROUSELS)
        ):
            skips.add(id(elem))
        else:
            stack.extend(kid for kid in elem.kids if isinstance(kid, Elem))
    sections = recommendation_sections(headings, content)
    if sections and on(SKIP_RECOMMENDATIONS):
        skips |= sections
    return frozenset(skips)


def drop_repeats(blocks: list[str]) -> list[str]:
    """`blocks` without a short label equal to the block right before it: a heading or a
    card line rendered once per screen size ("Latest" over each column, a byline for mobile
    and for desktop) reads once. Sentences may rightly repeat (two posts signed off alike, a
    summary and then its section)."""
    return [
        block
        for n, block in enumerate(blocks)
        if n == 0 or block != blocks[n - 1] or not _is_short_label(block)
    ]


def _is_short_label(block: str) -> bool:
    return len(block) <= REPEAT_MAX_CHARS and not block.rstrip().endswith(_SENTENCE_ENDS)


def trim_tail(blocks: list[str]) -> list[str]:
    """`blocks` without trailing headings (nothing follows them) or sign-up/follow-us lines.

    MAX_TAIL_HEADINGS or more headings in that tail are a list of titles (a listing whose
    cards are headings), not headings left without text: only the promo lines after the
    last of them go.
    """
    end = len(blocks)
    while end and _is_promo(blocks[end - 1]):
        end -= 1
    kept = end
    headings = 0
    while end and (blocks[end - 1].startswith("#") or _is_promo(blocks[end - 1])):
        headings += blocks[end - 1].startswith("#")
        end -= 1
    titles = headings >= MAX_TAIL_HEADINGS and on(TAIL_TITLES)
    return blocks[: kept if titles else end]


def _skippable(elem: Elem, title_words: tuple[str, ...], listing: bool) -> bool:
    tag = elem.tag
    if (tag == "header" and on(SKIP_HEADER)) or (
        tag == "time" and _is_dateline(elem) and on(SKIP_DATELINE)
    ):
        return True  # an article's header holds its headline, byline and date
    if tag in BLOCK_TAGS and _is_member_stats(elem):
        return True  # a forum member's post count and join date
    label = tag in BLOCK_TAGS and 0 < elem.text_len <= BOILERPLATE_MAX_CHARS and _is_label(elem)
    if listing:
        return label and on(SKIP_LABELS)
    if tag == "a" and elem.blocky and on(SKIP_TEASER_CARDS):
        return True  # a link wrapping blocks is a teaser card
    if label and on(SKIP_LABELS):
        return True
    if tag in HEADINGS:  # an <h1> is the headline, which the `# Title` line already gives
        return (
            (tag == "h1" and on(SKIP_H1))
            or (
                _is_link_heavy(elem)
                and not (_leads_prose(elem) and on(CARD_TITLES))
                and on(SKIP_LINK_HEADINGS)
            )
            or (_repeats_title(elem, title_words) and on(SKIP_TITLE_REPEAT))
        )
    if tag in ("ul", "ol"):
        return (
            _is_link_heavy(elem)
            and _items(elem) >= MIN_LINK_LIST_ITEMS
            and not (_introduced(elem) and on(INTRODUCED_LISTS))
            and on(SKIP_LINK_LISTS)
        )
    if tag in _BLOCK_PARAGRAPHS and (tag == "p" or is_paragraph(elem)):
        return (
            _is_link_heavy(elem)
            and not (_is_lone_link_in_prose(elem) and on(LONE_LINKS))
            and on(SKIP_LINK_PARAGRAPHS)
        )
    return False


def _is_member_stats(elem: Elem) -> bool:
    if not 0 < elem.text_len <= MEMBER_STATS_CHARS or not starts_stats(_first_text(elem)):
        return False
    if elem.tag == "dl":
        terms = [text_of(kid) for kid in elem.kids if isinstance(kid, Elem) and kid.tag == "dt"]
        if is_member_pairs(terms) and on(SKIP_MEMBER_STATS):
            return True
    text = text_of(elem)
    return is_member_stats(text) and on(SKIP_MEMBER_STATS)


def _first_text(elem: Elem) -> str:
    """The first non-blank text string under `elem` (cheap: one path down the tree)."""
    for kid in elem.kids:
        if isinstance(kid, str):
            if kid.strip():
                return kid
        elif kid.text_len:
            return _first_text(kid)
    return ""


def _leads_prose(heading: Elem) -> bool:
    """True when the next sibling with text is a paragraph or holds prose, mostly outside
    links: a linked heading over its own description is a card's title (the pages of a docs
    index, the offers of a service page), not a link to elsewhere."""
    parent = heading.parent
    if parent is None:
        return False
    kids = parent.kids
    for kid in kids[kids.index(heading) + 1 :]:
        if isinstance(kid, str):
            if kid.strip():
                return False
        elif kid.text_len:
            prose = kid.prose > 0 or is_paragraph(kid)
            return prose and link_density(kid) < CARD_TEXT_MAX_LINK_DENSITY
    return False


def _is_lone_link_in_prose(paragraph: Elem) -> bool:
    """A <p> that is one link reading as a sentence, after a prose paragraph: a pointer the
    article makes (to a report, a source), not navigation around it."""
    links = [kid for kid in paragraph.kids if isinstance(kid, Elem)]
    if paragraph.tag != "p" or len(links) != 1 or links[0].tag != "a":
        return False
    if any(isinstance(kid, str) and kid.strip() for kid in paragraph.kids):
        return False
    if len(_WORD.findall(text_of(links[0]))) < MIN_LONE_LINK_WORDS:
        return False
    before = _previous_with_text(paragraph)
    return (
        before is not None
        and before.prose > 0
        and link_density(before) < CARD_TEXT_MAX_LINK_DENSITY
    )


def _previous_with_text(elem: Elem) -> Elem | None:
    parent = elem.parent
    if parent is None:
        return None
    kids = parent.kids
    for kid in reversed(kids[: kids.index(elem)]):
        if isinstance(kid, Elem) and kid.text_len:
            return kid
    return None


def _introduced(list_elem: Elem) -> bool:
    """True when the previous sibling with text is prose ending in a colon ("Our tools:"):
    the list is what the text announces, not a list of links to elsewhere."""
    parent = list_elem.parent
    if parent is None:
        return False
    kids = parent.kids
    for kid in reversed(kids[: kids.index(list_elem)]):
        if isinstance(kid, str):
            if kid.strip():
                return kid.strip().endswith(":")
        elif kid.text_len:
            prose = link_density(kid) < CARD_TEXT_MAX_LINK_DENSITY
            return prose and text_of(kid).strip().endswith(":")
    return False


def _is_link_heavy(elem: Elem) -> bool:
    return link_density(elem) > MAX_LINK_DENSITY


def _items(list_elem: Elem) -> int:
    return sum(1 for kid in list_elem.kids if isinstance(kid, Elem) and kid.tag == "li")


def _is_dateline(time: Elem) -> bool:
    parent = time.parent
    return parent is None or parent.text_len - time.text_len < DATELINE_EXTRA_CHARS


def _is_label(elem: Elem) -> bool:
    return " ".join(_words(text_of(elem))) in BOILERPLATE


def _is_promo(block: str) -> bool:
    return len(block) < PROMO_MAX_CHARS and PROMO.search(block) is not None


def _repeats_title(heading: Elem, title_words: tuple[str, ...]) -> bool:
    if not title_words:
        return False
    words = _words(text_of(heading))
    return bool(words) and (_contains(title_words, words) or _contains(words, title_words))


def _contains(outer: tuple[str, ...], inner: tuple[str, ...]) -> bool:
    """True when `inner`, at least half as long as `outer`, is a run of words in `outer`."""
    if len(inner) * 2 < len(outer) or len(inner) > len(outer):
        return False
    return any(outer[i : i + len(inner)] == inner for i in range(len(outer) - len(inner) + 1))


def _words(text: str) -> tuple[str, ...]:
    return tuple(word.lower() for word in _WORD.findall(text))
