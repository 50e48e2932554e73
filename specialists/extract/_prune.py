"""Pruning of page chrome found by class, id or role, before the article is chosen.

Readability drops "unlikely candidates" by class name and retries without the rule when the
result comes out short. Here the rule is size-aware instead. Small chrome never reaches the
mirror (`_dom`); what is left flagged `chrome` is dropped here unless it holds half of the
page's prose, because wrappers such as WordPress's `<article class="post tag-sidebar">` or
Blogger's `<div class="widget Blog">` carry chrome words in their class lists.
"""

from __future__ import annotations

from ._dom import Elem
from ._score import is_paragraph, paragraph_points

# An element named like chrome still holding this share of the page's prose is the article.
KEEP_PROSE_SHARE = 0.5


def drop_chrome(order: list[Elem]) -> list[Elem]:
    """Detach chrome-named elements, keep ancestors' counters exact; return the survivors.

    `order` must be measured (parents before children). The root is never dropped, and on
    a page with no prose nothing is: there is no article to tell the chrome from.
    """
    floor = KEEP_PROSE_SHARE * order[0].prose
    kept: list[Elem] = []
    for elem in order:
        parent = elem.parent
        if parent is None:
            kept.append(elem)
        elif parent.dropped:
            elem.dropped = True
        elif elem.chrome and elem.prose < floor:
            elem.dropped = True
            _detach(elem, parent)
        else:
            kept.append(elem)
    return kept


def _detach(elem: Elem, parent: Elem) -> None:
    parent.kids = [kid for kid in parent.kids if kid is not elem]
    ancestor: Elem | None = parent
    while ancestor is not None:
        ancestor.text_len -= elem.text_len
        ancestor.link_len -= min(elem.link_len, ancestor.link_len)
        ancestor.commas -= elem.commas
        ancestor.prose -= elem.prose
        if is_paragraph(ancestor):
            ancestor.points = paragraph_points(ancestor)
        ancestor = ancestor.parent
