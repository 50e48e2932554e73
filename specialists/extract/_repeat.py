"""Repeated siblings: the posts of a thread, the cards of a listing, the items of a catalogue.

Readability picks the one element with the most prose, which on a news page is the article.
On a forum thread, a listing or a category page the content is many similar sibling blocks
(same tag, same class), each short, often mostly links; the best single block is one post or
an intro paragraph. Here the largest run of similar siblings is found, and it replaces the
Readability pick when it holds several times more text, or when the pick is one of its items.
"""

from __future__ import annotations

import re
from collections import Counter

from ._dom import Elem, common_ancestor, inside

MIN_ITEMS = 4  # fewer similar siblings are a layout (two columns), not a list of items
MIN_ITEM_CHARS = 25  # mean text per item: below it the run is a menu or a tag cloud
MIN_ITEMS_SHARE = 0.5  # the similar items hold at least this share of their parent's text
# A run inside the pick holding this share of its text, with this share of it in links,
# makes the pick a listing (the links are the content); an article's run of paragraph
# blocks links less. A card with a linked title over a description three times as long is
# a listing's item.
LISTING_SHARE = 0.5
LISTING_LINK_SHARE = 0.2
# A run elsewhere replaces the pick when it holds this many times the picked text...
WIDEN_RATIO = 2.0
# ...unless the pick holds this much text outside links: an article beside a link directory.
MAX_WIDEN_PROSE = 2_000
# ...and the smallest element holding both is used when it adds at most this share of text.
JOIN_SLACK = 0.25

# Tags that hold an item (a post, a card, a row); runs of paragraphs or headings are prose.
ITEM_TAGS = frozenset(
    {"div", "li", "article", "section", "a", "tr", "figure", "dl", "details", "table", "form"}
)
# Similar items share their first class name; modifiers come later by convention
# ("row featured", "post post--pinned", "item odd", "cats a" / "cats b") and do not split
# a run.
SIGNATURE_CLASSES = 1
_DIGITS = re.compile(r"\d+")


def find_run(order: list[Elem]) -> Elem | None:
    """The parent of the largest run of similar sibling blocks, or None when there is none."""
    best: Elem | None = None
    for elem in order:
        if elem.text_len < MIN_ITEMS * MIN_ITEM_CHARS:
            continue
        if best is not None and elem.text_len <= best.text_len:
            continue
        if _holds_run(elem):
            best = elem
    return best


def widen(
    content: list[Elem], run: Elem | None, *, keep_pick: bool = False
) -> tuple[list[Elem], bool]:
    """`content`, or what holds the `run` when it says much more; True for a listing.

    A pick inside one of the run's items (the long first post of a thread, one card) is
    one of many: the run replaces it, unless `keep_pick` (a page declaring itself an
    article, whose sections a page builder may wrap alike, or a pick whose class names it
    content). A listing is content made mostly of the run's items: its links are content.
    """
    if run is None:
        return content, False
    picked = sum(elem.text_len for elem in content)
    if any(inside(run, elem) for elem in content):
        return content, _is_listing(run, picked)
    if not keep_pick and all(inside(elem, run) for elem in content):
        return [run], _is_listing(run, run.text_len)
    if run.text_len < WIDEN_RATIO * picked or _prose(content) >= MAX_WIDEN_PROSE:
        return content, False
    join = common_ancestor([*content, run])
    if join is not None and join.text_len <= (1 + JOIN_SLACK) * (run.text_len + picked):
        return [join], True
    return [run], True


def _prose(content: list[Elem]) -> int:
    return sum(elem.text_len - elem.link_len for elem in content)


def run_items(run: Elem) -> int:
    """How many element children with text the run's parent holds."""
    return sum(1 for kid in run.kids if isinstance(kid, Elem) and kid.text_len)


def _is_listing(run: Elem, picked: int) -> bool:
    return (
        run.text_len >= LISTING_SHARE * picked and run.link_len >= LISTING_LINK_SHARE * run.text_len
    )


def _holds_run(elem: Elem) -> bool:
    kids = [kid for kid in elem.kids if isinstance(kid, Elem) and kid.text_len]
    if len(kids) < MIN_ITEMS:
        return False
    kids = [kid for kid in kids if kid.tag in ITEM_TAGS]
    if len(kids) < MIN_ITEMS:
        return False
    signatures = Counter(signature(kid) for kid in kids)
    name, count = signatures.most_common(1)[0]
    if count < MIN_ITEMS:
        return False
    text = sum(kid.text_len for kid in kids if signature(kid) == name)
    return text >= MIN_ITEMS_SHARE * elem.text_len and text >= count * MIN_ITEM_CHARS


def signature(elem: Elem) -> str:
    classes = (elem.attrs.get("class") or "").split()[:SIGNATURE_CLASSES]
    return f"{elem.tag} {_DIGITS.sub('', ' '.join(classes))}"
