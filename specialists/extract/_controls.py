"""The page's own controls, written as text: skip links, and a listing's result count, sort
control and paging links.

Each is a short block whose whole text says what it is, in the words every site uses for it
(WAI's "Skip to content" links; "338 results", "Sort by: Best match", "View all" around a
grid of items). The menus and option lists they belong to are left out elsewhere (link
lists, chrome names); the link or the count stays behind as a stray line. English only, as
`_hints.BOILERPLATE`.
"""

from __future__ import annotations

import re

from ._dom import Elem, text_of
from ._hints import HEADINGS

CONTROL_MAX_CHARS = 80  # a label, a count or a sort control; longer blocks are prose
# An in-page link that jumps past the page's chrome (WCAG 2.4.1's bypass blocks).
_SKIP_LINK = re.compile(r"(?:skip|jump) (?:to|over|past)\b|skip (?:navigation|nav|links)\b")
# A listing's count of what it holds ("338 results", "Showing 1-24 of 338 products",
# "3953 items found", "Products (338)") and its sort control ("Sort by: Best Match"), as
# words: punctuation is gone, so "1,234" reads "1 234".
_NUMBER = r"\d+(?: \d{3})*"
_COUNT = re.compile(
    rf"(?:(?:showing|loaded|viewing|displaying) )?(?:{_NUMBER} (?:to )?{_NUMBER} of )?"
    rf"{_NUMBER} (?:results?|items?|products?|listings?|matches|entries|jobs|articles|posts)"
    rf"(?: found| total)?|(?:results|items|products|listings) {_NUMBER}"
)
# ...on its text as written: "Sort: Featured", "Sorted by date", but never "Sorted sets".
_SORT = re.compile(r"sort(?:ed)? by\b.{0,30}|sort ?:.{0,30}|sort")
# Its paging and "see the rest" controls: "Load more", "View all", "Page 2 of 9" (as words;
# never one ending in a colon, which introduces what follows: "See more photos:").
_PAGING = re.compile(
    r"(?:view|see|show|shop|browse) (?:all|more)(?: \w+){0,2}|load more(?: \w+)?"
    rf"|(?:next|previous|prev) page|page {_NUMBER} of {_NUMBER}"
)
_WORD = re.compile(r"\w+")


def is_skip_link(elem: Elem) -> bool:
    """True for an in-page link ("#...") whose text skips or jumps past part of the page."""
    href = elem.attrs.get("href") or ""
    return elem.tag == "a" and href.startswith("#") and _matches(_SKIP_LINK, elem, full=False)


def is_listing_control(elem: Elem) -> bool:
    """True for a short block that counts a listing's items or, unless it is a heading
    ("Sort order" over a docs section), names their sort order or pages through them."""
    if not 0 < elem.text_len <= CONTROL_MAX_CHARS:
        return False
    text = " ".join(text_of(elem).lower().split())
    words = _words(text)
    if _COUNT.fullmatch(words) is not None:
        return True
    if elem.tag in HEADINGS:
        return False
    if _SORT.fullmatch(text) is not None:
        return True
    return not text.endswith(":") and _PAGING.fullmatch(words) is not None


def _matches(pattern: re.Pattern[str], elem: Elem, *, full: bool = True) -> bool:
    if not 0 < elem.text_len <= CONTROL_MAX_CHARS:
        return False
    words = _words(text_of(elem).lower())
    if not full:
        return pattern.match(words) is not None
    return pattern.fullmatch(words) is not None


def _words(text: str) -> str:
    return " ".join(_WORD.findall(text))
