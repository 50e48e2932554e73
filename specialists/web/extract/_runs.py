"""Chrome words that name the page's own items: a thread of "comment"s, a grid of cards
"eligible for subscription", a list of "teaser"s.

A class word such as "comment" or "teaser" names chrome beside an article, but on a forum
thread or a listing the elements it names are the page. They show it by their number and
size: many siblings of one tag, named chrome by the same words, holding a large share of
the page's text. Once a run like that is found, its words name content on the whole page
(the replies nested in a comment carry the same class).
"""

from __future__ import annotations

from selectolax.lexbor import LexborNode

from ._attrs import chrome_tokens, names_items

MIN_RUN_ITEMS = 4  # as `_repeat.MIN_ITEMS`: fewer siblings are a layout, not items
# The run's share of the page's readable text (outside nav, aside, header and footer) that
# makes its chrome words the page's content: a comment section under an article holds less.
RUN_PAGE_SHARE = 0.5
_FRAME_TAGS = frozenset({"nav", "aside", "header", "footer"})


class ContentWords:
    """The chrome words found to name the page's items, and the sibling runs judged so far."""

    def __init__(self, body: LexborNode) -> None:
        self.body = body
        self.min_run_chars: float | None = None  # computed on the first run judged
        self.words: set[str] = set()
        self._judged: dict[tuple[int, str, frozenset[str]], bool] = {}

    def name_content(self, hint: str) -> bool:
        """True when every chrome word of `hint` was found naming the page's items."""
        tokens = chrome_tokens(hint)
        return bool(tokens) and tokens <= self.words

    def judge_run(self, node: LexborNode, tag: str, hint: str) -> bool:
        """True when `node` and its siblings (or its parent's siblings, for items that wrap
        it) named chrome by the same item words hold most of the page; those words then name
        content for the rest of the page."""
        tokens = chrome_tokens(hint)
        parent = node.parent
        if not tokens or parent is None or not all(map(names_items, tokens)):
            return False
        key = (parent.mem_id, tag, tokens)
        verdict = self._judged.get(key)
        if verdict is None:
            verdict = self._judged[key] = self._is_item_run(node, tag, tokens)
            if verdict:
                self.words.update(tokens)
        return verdict

    def _is_item_run(self, node: LexborNode, tag: str, tokens: frozenset[str]) -> bool:
        """A run of MIN_RUN_ITEMS matching siblings (or wrapped siblings), or one element
        (the list of them), holding RUN_PAGE_SHARE of the page's readable text."""
        parent = node.parent
        items, chars = _run(parent, tag, tokens) if parent is not None else (0, 0)
        if items < MIN_RUN_ITEMS and parent is not None:
            items, chars = _wrapped_run(parent, tag, tokens)
        if items < MIN_RUN_ITEMS:
            chars = len(node.text())
        if self.min_run_chars is None:
            self.min_run_chars = RUN_PAGE_SHARE * _readable_chars(self.body)
        return chars >= self.min_run_chars


def _matches(node: LexborNode, tag: str, tokens: frozenset[str]) -> bool:
    if node.tag != tag:
        return False
    attrs = node.attributes
    return chrome_tokens(f"{attrs.get('class') or ''} {attrs.get('id') or ''}".lower()) == tokens


def _run(parent: LexborNode, tag: str, tokens: frozenset[str]) -> tuple[int, int]:
    """How many children of `parent` match, and their text length."""
    items = chars = 0
    for sibling in parent.iter():
        if _matches(sibling, tag, tokens):
            items += 1
            chars += len(sibling.text())
    return items, chars


def _wrapped_run(parent: LexborNode, tag: str, tokens: frozenset[str]) -> tuple[int, int]:
    """The same for items wrapping the match: siblings of `parent` holding a matching child."""
    items = chars = 0
    grand = parent.parent
    if grand is None:
        return 0, 0
    for wrapper in grand.iter():
        if wrapper.tag == parent.tag and any(_matches(kid, tag, tokens) for kid in wrapper.iter()):
            items += 1
            chars += len(wrapper.text())
    return items, chars


def _readable_chars(body: LexborNode) -> int:
    """The body's text length outside its outermost nav, aside, header and footer."""
    frames = 0
    for node in body.css("nav, aside, header, footer"):
        ancestor = node.parent
        while ancestor is not None and ancestor.tag not in _FRAME_TAGS:
            ancestor = ancestor.parent
        if ancestor is None:
            frames += len(node.text())
    return len(body.text()) - frames
