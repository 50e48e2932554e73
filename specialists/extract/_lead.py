"""An article's lead paragraph (standfirst, dek), marked by its class or its itemprop.

Pages mark it up beside the headline, byline and date: in the article's <header>, which
the cleaning leaves out, or just before the body Readability picks. Both would drop it.
"""

from __future__ import annotations

import re

from ._dom import Elem
from ._score import is_paragraph

# Class pieces naming a lead; at a word start, so "misleading" or "download" do not match.
_LEAD = re.compile(r"(?<![a-z])(intro|lead|standfirst)")
_LEAD_ITEMPROPS = frozenset({"description"})
_LEAD_TAGS = frozenset({"p", "div"})
MAX_SIBLINGS_BEFORE = 2  # a lead sits right before the body: the header, or the lead itself


def is_lead(elem: Elem) -> bool:
    """A paragraph with text marked as the article's lead."""
    if elem.tag not in _LEAD_TAGS or not elem.text_len or not is_paragraph(elem):
        return False
    return elem.attrs.get("itemprop") in _LEAD_ITEMPROPS or _LEAD.search(elem.hint) is not None


def holds_lead(elem: Elem) -> bool:
    """True when a lead paragraph is somewhere under `elem`."""
    return any(is_lead(kid) or holds_lead(kid) for kid in elem.kids if isinstance(kid, Elem))


def around_leads(header: Elem) -> set[int]:
    """id()s of everything in `header` but its leads and the elements holding them."""
    skips: set[int] = set()
    for kid in header.kids:
        if isinstance(kid, Elem) and not is_lead(kid):
            skips |= around_leads(kid) if holds_lead(kid) else {id(kid)}
    return skips


def lead_before(content: list[Elem]) -> Elem | None:
    """The lead paragraph in the siblings right before the content's first element, if any."""
    first = content[0] if content else None
    parent = first.parent if first is not None else None
    if first is None or parent is None:
        return None
    kids = [kid for kid in parent.kids if isinstance(kid, Elem) and kid.text_len]
    at = next((n for n, kid in enumerate(kids) if kid is first), 0)
    for kid in reversed(kids[max(0, at - MAX_SIBLINGS_BEFORE) : at]):
        lead = kid if is_lead(kid) else _first_lead(kid)
        if lead is not None:
            return lead
    return None


def _first_lead(elem: Elem) -> Elem | None:
    for kid in elem.kids:
        if isinstance(kid, Elem):
            found = kid if is_lead(kid) else _first_lead(kid)
            if found is not None:
                return found
    return None
