"""Chrome words that name the page's own items: a thread of "comment"s, a grid of cards
"eligible for subscription", a list of "teaser"s.

A class word such as "comment" or "teaser" names chrome beside an article, but on a forum
thread or a listing the elements it names are the page. They show it by their number and
size: many siblings of one tag, named chrome by the same words, holding a large share of
the page's text (RUN_PAGE_SHARE). Once a run like that is found, its words name content on
the whole page (the replies nested in a comment carry the same class), and inside an element
holding that share itself (the thread, the list), every run of siblings named chrome only
by item words is its items (the posts of a thread in "comment comment-container" blocks).
"""

from __future__ import annotations

from typing import Protocol

from selectolax.lexbor import LexborNode

from ._attrs import chrome_tokens, names_items
from ._hints import THREAD_WORDS
from ._rules import ARTICLE_COMMENTS, HOLDER_ITEMS, on

MIN_RUN_ITEMS = 4  # as `_repeat.MIN_ITEMS`: fewer siblings are a layout, not items
# Inside a thread found holding the page's items, this many siblings named by item words are
# its posts (a short thread has two or three).
MIN_THREAD_ITEMS = 2
MAX_WRAP_DEPTH = 3  # a card's chrome-named part ("caption") sits this deep in the item
# The run's share of the page's readable text (outside nav, aside, header and footer) that
# makes its chrome words the page's content: a comment section under an article holds less.
# Not a half: a grid of cards shares its page with filters, sorting and menus outside <nav>.
RUN_PAGE_SHARE = 0.4
# On a page declaring itself an article, comments name content only when they hold this
# share and sit inside its <article> element or the page has none: a link posted for
# discussion, the thread below it. A news article's comments hold less, or follow the
# <article> element, or are not in the page at all.
ARTICLE_THREAD_SHARE = 0.8
_FRAME_TAGS = frozenset({"nav", "aside", "header", "footer"})


class _Mirrored(Protocol):
    """What this module reads of a mirrored element (`_dom.Elem`): its class/id and parent."""

    @property
    def hint(self) -> str: ...

    @property
    def parent(self) -> _Mirrored | None: ...

    holds_items: bool


class ContentWords:
    """The chrome words found to name the page's items, and the sibling runs judged so far."""

    def __init__(self, body: LexborNode, body_chars: int, *, article: bool = False) -> None:
        self.body = body
        self.body_chars = body_chars  # len(body.text()), which the caller has read already
        self.article = article
        self.min_run_chars: float | None = None  # computed on the first run judged
        self.words: set[str] = set()
        self._runs: dict[tuple[int, int, str, frozenset[str]], tuple[int, int]] = {}
        self._short_threads: set[frozenset[str]] = set()  # an article's comments, judged
        self._has_article: bool | None = None  # whether the body has an <article> element
        self._holders = False  # whether an element was found holding the items

    def names_content(self, node: LexborNode, tag: str, elem: _Mirrored) -> bool:
        """True when the chrome words of `elem` (mirroring `node`) name the page's items
        (`name_content`, `judge_run`), or name only items' parts and `elem` sits inside an
        element found holding the items."""
        if self.name_content(elem.hint) or self.judge_run(node, tag, elem.hint):
            if len(node.text()) >= self._min_run_chars():
                elem.holds_items = self._holders = True  # the thread or list, not one item
            return True
        return self._holders and self._item_of_holder(node, tag, elem) and on(HOLDER_ITEMS)

    def _item_of_holder(self, node: LexborNode, tag: str, elem: _Mirrored) -> bool:
        """True when `elem` is one of a run of items named by item words, inside a holder."""
        tokens = chrome_tokens(elem.hint)
        if not tokens or not all(map(names_items, tokens)):
            return False
        if not self._run_chars(node, tag, tokens, MIN_THREAD_ITEMS):
            return False
        ancestor = elem.parent
        while ancestor is not None:
            if ancestor.holds_items:
                return True
            ancestor = ancestor.parent
        return False

    def _article_beside(self, node: LexborNode) -> bool:
        """True when the page has an <article> element and `node` is not inside one: the
        comments follow an article marked up as one."""
        if self._has_article is None:
            self._has_article = self.body.css_first("article") is not None
        if not self._has_article:
            return False
        ancestor = node.parent
        while ancestor is not None:
            if ancestor.tag == "article":
                return False
            ancestor = ancestor.parent
        return True

    def _vetoed(self, tokens: frozenset[str]) -> bool:
        """An article's comments are not the article (unless they are nearly all the page)."""
        return (
            self.article
            and any(word in token for token in tokens for word in THREAD_WORDS)
            and on(ARTICLE_COMMENTS)
        )

    def name_content(self, hint: str) -> bool:
        """True when every chrome word of `hint` was found naming the page's items."""
        if not self.words:
            return False
        tokens = chrome_tokens(hint)
        return bool(tokens) and tokens <= self.words

    def judge_run(self, node: LexborNode, tag: str, hint: str) -> bool:
        """True when `node` and its siblings (or the items wrapping them, up to
        MAX_WRAP_DEPTH levels up), named chrome by the same item words, hold RUN_PAGE_SHARE
        of the page's readable text, or `node` alone does (the list of them); those words
        then name content for the rest of the page."""
        tokens = chrome_tokens(hint)
        if not tokens or not all(map(names_items, tokens)):
            return False
        vetoed = self._vetoed(tokens)
        if vetoed and (tokens in self._short_threads or self._article_beside(node)):
            return False
        chars = self._run_chars(node, tag, tokens) or len(node.text())
        floor = self._min_run_chars()
        if chars < (floor * ARTICLE_THREAD_SHARE / RUN_PAGE_SHARE if vetoed else floor):
            if vetoed:  # the first comment judged sits in the largest run: the others in less
                self._short_threads.add(tokens)
            return False
        self.words.update(tokens)
        return True

    def _min_run_chars(self) -> float:
        if self.min_run_chars is None:
            self.min_run_chars = RUN_PAGE_SHARE * _readable_chars(self.body, self.body_chars)
        return self.min_run_chars

    def _run_chars(
        self, node: LexborNode, tag: str, tokens: frozenset[str], min_items: int = MIN_RUN_ITEMS
    ) -> int:
        """The text of the nearest run of `min_items` holding `node` (0 when there is none)."""
        wrapper = node
        for depth in range(MAX_WRAP_DEPTH + 1):
            group = wrapper.parent
            if group is None:
                return 0
            key = (group.mem_id, depth, tag, tokens)
            run = self._runs.get(key)
            if run is None:
                run = self._runs[key] = _run(group, wrapper.tag, depth, (tag, tokens))
            if run[0] >= min_items:
                return run[1]
            wrapper = group
        return 0


def _run(
    group: LexborNode, item_tag: str | None, depth: int, match: tuple[str, frozenset[str]]
) -> tuple[int, int]:
    """How many children of `group` tagged `item_tag` hold a match `depth` levels down, and
    their text length."""
    items = chars = 0
    for item in group.iter():
        if item.tag == item_tag and _holds(item, depth, match):
            items += 1
            chars += len(item.text())
    return items, chars


def _holds(node: LexborNode, depth: int, match: tuple[str, frozenset[str]]) -> bool:
    if depth == 0:
        tag, tokens = match
        if node.tag != tag:
            return False
        attrs = node.attributes
        hint = f"{attrs.get('class') or ''} {attrs.get('id') or ''}".lower()
        return chrome_tokens(hint) == tokens
    return any(_holds(kid, depth - 1, match) for kid in node.iter())


def _readable_chars(body: LexborNode, body_chars: int) -> int:
    """The body's text length (`body_chars`) outside its outermost nav, aside, header and
    footer."""
    frames = 0
    for node in body.css("nav, aside, header, footer"):
        ancestor = node.parent
        while ancestor is not None and ancestor.tag not in _FRAME_TAGS:
            ancestor = ancestor.parent
        if ancestor is None:
            frames += len(node.text())
    return body_chars - frames
