"""A thread found holding the page's posts, joined to a pick beside it (the first post).

Readability picks the one block with the most prose. On a forum thread whose first post is
long, that is the first post, and the replies sit in a sibling block. On a page declaring
itself a discussion (schema.org DiscussionForumPosting, QAPage), when the mirror found a
block holding the page's posts (`_runs`: "comments", "replies" holding a large share of the
page) outside the pick, the content is the smallest block holding both, as long as it adds
little else (menus, a sidebar) around them. Elsewhere such a block is an article's comment
section, which the pick rightly leaves out.
"""

from __future__ import annotations

from ._attrs import chrome_tokens
from ._dom import Elem, common_ancestor, inside
from ._hints import THREAD_WORDS

# The block holding pick and items may hold this share more text than the two together.
JOIN_SLACK = 0.25


def join_items(content: list[Elem], order: list[Elem]) -> list[Elem]:
    """`content`, or the smallest block holding it and the largest item holder outside it."""
    if not content:
        return content
    holder = _largest_holder(order, content)
    if holder is None:
        return content
    join = common_ancestor([*content, holder])
    picked = sum(elem.text_len for elem in content)
    if join is None or join.text_len > (1 + JOIN_SLACK) * (picked + holder.text_len):
        return content
    return [join]


def _largest_holder(order: list[Elem], content: list[Elem]) -> Elem | None:
    """The largest kept block found holding the page's posts, neither in nor around
    `content`, if any."""
    best: Elem | None = None
    for elem in order:
        if elem.holds_items and not elem.dropped and _names_thread(elem.hint):
            if best is not None and elem.text_len <= best.text_len:
                continue
            if not any(inside(elem, part) or inside(part, elem) for part in content):
                best = elem
    return best


def _names_thread(hint: str) -> bool:
    """True when a chrome word of `hint` names a thread's posts ("comments", "replies"): a
    list of related teasers beside an article is not joined to it."""
    return any(word in token for token in chrome_tokens(hint) for word in THREAD_WORDS)
