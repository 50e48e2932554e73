"""Recommendation and back-matter sections: "Similar items", "Related posts", "References".

Product pages, threads and listings end in carousels of other products or pages under a
heading that says what they are; reference works end in notes, references and external
links under headings as plain. The heading is the general signal (the carousel's markup
varies by site): the section it leads is left out with it. English headings only.
"""

from __future__ import annotations

import re

from ._dom import Elem, text_of
from ._hints import HEADINGS

# A heading's whole text (lower-cased words): "related news", "similar items", "featured
# products", "people who viewed this item also viewed", "you may also like", "frequently
# bought together", and the back matter: "references", "notes", "external links", "further
# reading", "see also".
RECOMMENDATION = re.compile(
    r"(?:related|similar|recommended|trending|sponsored|popular|featured)(?: \w+){0,2}"
    r"|(?:more from|frequently bought|customers (?:who|also)|people (?:who|also)"
    r"|you (?:may|might) also|explore related|what customers|recently viewed) .*"
    r"|references|notes|citations|footnotes|external links|further reading|see also"
    r"|bibliography|notes and references"
)
# A section holding more than this share of the content is not a trailing carousel: only
# its heading and the block right after it go.
MAX_SECTION_SHARE = 0.5
_WORD = re.compile(r"\w+")


def recommendation_sections(headings: list[Elem], content: list[Elem]) -> set[int]:
    """id()s of the recommendation `headings` (found under `content`) and of the sections
    they lead."""
    roots = {id(elem) for elem in content}
    limit = MAX_SECTION_SHARE * sum(elem.text_len for elem in content)
    skips: set[int] = set()
    for heading in headings:
        if _is_recommendation(heading):
            skips.update(map(id, _section(heading, roots, limit)))
    return skips


def _is_recommendation(heading: Elem) -> bool:
    words = " ".join(_WORD.findall(text_of(heading).lower()))
    return RECOMMENDATION.fullmatch(words) is not None


def _section(heading: Elem, roots: set[int], limit: float) -> list[Elem]:
    """The heading's wrappers up to the block it leads, or the heading and the next block."""
    node = heading
    while node.parent is not None and id(node.parent) not in roots:
        if node.parent.text_len != node.text_len:
            break
        node = node.parent
    parent = node.parent
    if (
        parent is not None
        and id(parent) not in roots
        and _first_with_text(parent) is node
        and parent.text_len <= limit
    ):
        return [parent]
    following = _next_with_text(node)
    if following is None or following.text_len > limit:
        return [node]
    return [node, following]


def _first_with_text(parent: Elem) -> Elem | None:
    for kid in parent.kids:
        if isinstance(kid, str):
            if kid.strip():
                return None
        elif kid.text_len:
            return kid
    return None


def _next_with_text(node: Elem) -> Elem | None:
    parent = node.parent
    if parent is None:
        return None
    kids = parent.kids
    for kid in kids[kids.index(node) + 1 :]:
        if isinstance(kid, Elem) and kid.text_len:
            return kid if kid.tag not in HEADINGS else None
    return None
