"""A cleaned, pure-Python mirror of the parsed page: the one place that walks selectolax nodes.

Everything downstream (pruning, scoring, rendering) works on `Elem`, so it never calls back
into the parser and its cost is plain attribute access. Building the mirror also does the
cleaning that needs no scoring: scripts, styles, form controls, media, nav/aside/footer,
hidden elements, comments, and small elements whose class, id or role names page chrome
are left out.
"""

from __future__ import annotations

from selectolax.lexbor import LexborNode

from ._attrs import always_chrome, is_hidden, named_chrome, names_collapsible
from ._hints import DROP_TAGS
from ._panels import PANEL_TAGS, DetailsPanels, is_details_panel
from ._rules import (
    ALWAYS_CHROME,
    ARIA_HIDDEN_SHORT,
    CHROME_NAMES,
    CODE_TOKENS,
    COLLAPSIBLE_PANELS,
    DETAILS_PANELS,
    HIDDEN_ELEMENTS,
    HIDDEN_PAGE,
    ITEM_RUNS,
    LINK_CARDS,
    SMALL_CHROME,
    TAB_PANELS,
    on,
)
from ._runs import ContentWords

# Browsers cap the tree at 512 levels (Blink's kMaximumHTMLParserDOMTreeDepth); deeper
# subtrees are kept as plain text so no later recursion can run out of stack.
MAX_DEPTH = 200
# Chrome-named elements with less of the page's text than this are skipped while mirroring,
# which removes half the work (the dev corpus gives the same output from 0.05 to 0.2); an
# article wrapper misnamed as chrome holds far more and is judged later by `_prune`.
MIN_CHROME_TEXT_SHARE = 0.1
# A hidden element holding more than this share of the page's text is the page itself, hidden
# until a script shows it (anti-flicker and loading wrappers): it is kept.
HIDDEN_PAGE_SHARE = 0.5
# aria-hidden or collapsed elements with at least this much text are panels, not repeats.
SHOWN_PANEL_MIN_CHARS = 150
LINK_CARD_DEPTH = 4  # how far above an element a link makes it part of a card
_HIDING = frozenset({"hidden", "aria-hidden", "style"})  # attributes that can hide an element
# Inside these, classes name a syntax highlighter's tokens ("hljs-comment", "token tag",
# "meta"), never page chrome.
CODE_TAGS = frozenset({"pre", "code"})


class Elem:
    """One kept element: its tag, a few attributes, and its kept children in order.

    `kids` holds `Elem`s and raw text strings. The counters below are filled bottom-up by
    `_score.measure`; `hint` is the lower-cased class and id, used for class heuristics.
    """

    __slots__ = (
        "attrs",
        "blocky",
        "chrome",
        "commas",
        "dropped",
        "hint",
        "holds_items",
        "kids",
        "link_len",
        "own_commas",
        "own_len",
        "parent",
        "points",
        "prose",
        "score",
        "tag",
        "text_len",
    )

    def __init__(self, tag: str, attrs: dict[str, str | None], parent: Elem | None) -> None:
        self.tag = tag
        self.attrs = attrs
        self.parent = parent
        self.kids: list[Elem | str] = []
        self.hint = ""
        if attrs:
            cls, ident = attrs.get("class"), attrs.get("id")
            if cls or ident:
                self.hint = f"{cls or ''} {ident or ''}".lower()
        self.own_len = 0
        self.own_commas = 0
        self.text_len = 0
        self.link_len = 0
        self.commas = 0
        self.prose = 0.0
        self.points = 0.0
        self.dropped = False
        self.score = 0.0
        self.blocky = False
        self.chrome = False
        self.holds_items = False  # the thread or list of the page's items (see `_runs`)

    def __repr__(self) -> str:
        return f"<{self.tag} {self.hint!r} text={self.text_len}>"


def inside(elem: Elem, ancestor: Elem) -> bool:
    """True when `ancestor` is `elem` or holds it."""
    node: Elem | None = elem
    while node is not None:
        if node is ancestor:
            return True
        node = node.parent
    return False


def common_ancestor(elems: list[Elem]) -> Elem | None:
    """The nearest element that is or holds every one of `elems` (None: no such element)."""
    node: Elem | None = elems[0]
    while node is not None:
        if all(inside(elem, node) for elem in elems):
            return node
        node = node.parent
    return None


def build_tree(
    body: LexborNode, *, article: bool = False, product: bool = False
) -> tuple[Elem, list[Elem]]:
    """Mirror `body` as an `Elem` tree; also return every `Elem` with parents before children.

    Elements named like chrome (`named_chrome`) that hold under MIN_CHROME_TEXT_SHARE of the
    page's text are left out; larger ones are mirrored and flagged `chrome` for `_prune`.
    Never raises on odd trees; text deeper than MAX_DEPTH is kept flat. On a page that
    declares itself an `article` comments stay chrome however many (`_runs`). On a page
    declaring one `product`, panels of prose (drawers, sheets, modals) are kept (`_panels`).
    """
    body_chars = len(body.text())
    chrome_floor = MIN_CHROME_TEXT_SHARE * body_chars
    content_words = ContentWords(body, body_chars, article=article)
    panels = DetailsPanels() if product else None
    main_chars: dict[int, int] = {}  # each <main>'s text length by mem_id, for `_is_page`
    root = Elem("body", {}, None)
    order = [root]
    # (node, its Elem, depth, whether it sits in code: see CODE_TAGS)
    stack: list[tuple[LexborNode, Elem, int, bool]] = [(body, root, 0, False)]
    while stack:
        node, elem, depth, code = stack.pop()
        kids = elem.kids
        for child in node.iter(include_text=True):
            tag = child.tag
            if tag == "-text":
                text = child.text_content
                if text:
                    kids.append(text)
                    stripped = text.strip()
                    elem.own_len += len(stripped)
                    elem.own_commas += stripped.count(",")
            elif (
                tag
                and tag[0] != "-"
                and (
                    tag not in DROP_TAGS
                    or (
                        panels is not None
                        and tag in PANEL_TAGS
                        and is_details_panel(child, tag, child.attributes)
                        and on(DETAILS_PANELS)
                    )
                )
            ):
                kid = _adopt(
                    child, tag, elem, chrome_floor, content_words, panels, main_chars, code=code
                )
                if kid is None:
                    continue
                kids.append(kid)
                order.append(kid)
                if depth < MAX_DEPTH:
                    stack.append((child, kid, depth + 1, code or tag in CODE_TAGS))
                else:
                    _flatten(child, kid)
    return root, order


def _adopt(
    node: LexborNode,
    tag: str,
    parent: Elem,
    chrome_floor: float,
    content_words: ContentWords,
    panels: DetailsPanels | None,
    main_chars: dict[int, int],
    *,
    code: bool = False,
) -> Elem | None:
    """The `Elem` for `node`, or None when it is hidden or is small chrome.

    Chrome words that name a run of the page's items (`_runs`) name content instead,
    nothing in a product's details panel is chrome (`_panels`), and nothing in `code` (a
    <pre> or <code> holds the node) is chrome by its class: there classes name tokens.
    """
    attrs = node.attributes
    if (
        attrs
        and not _HIDING.isdisjoint(attrs)
        and _hidden(node, attrs)
        and not (_is_page(node, chrome_floor, main_chars) and on(HIDDEN_PAGE))
        and on(HIDDEN_ELEMENTS)
    ):
        return None
    elem = Elem(tag, attrs, parent)
    if panels is not None and panels.keeps(node, tag, elem) and on(DETAILS_PANELS):
        return elem
    if (
        (elem.hint or "role" in attrs)
        and named_chrome(tag, attrs, elem.hint)
        and not (code and on(CODE_TOKENS))
        and not (_in_link(parent) and on(LINK_CARDS))
        and not (content_words.names_content(node, tag, elem) and on(ITEM_RUNS))
        and not (_holds_tab_panels(node, attrs) and on(TAB_PANELS))
        and on(CHROME_NAMES)
    ):
        if (always_chrome(elem.hint) and on(ALWAYS_CHROME)) or (
            len(node.text()) < chrome_floor and on(SMALL_CHROME)
        ):
            return None
        elem.chrome = True
    return elem


def _holds_tab_panels(node: LexborNode, attrs: dict[str, str | None]) -> bool:
    """True for a tablist holding tab panels: a tablist holds only its tabs' labels, so one
    holding the panels is the widget itself (tabs or an accordion), text and all."""
    return attrs.get("role") == "tablist" and node.css_first('[role="tabpanel"]') is not None


def _hidden(node: LexborNode, attrs: dict[str, str | None]) -> bool:
    """True when `node` is hidden from every reader, or is a short aria-hidden element.

    aria-hidden takes an element out of what screen readers read, not off the screen: a
    short one is a decorative repeat (a pull quote, an icon's label), a longer one a
    collapsed panel or an off-screen carousel slide, which every reader can open. A hidden
    panel named collapsible (`names_collapsible`: an accordion's answer, a tab pane, the
    code sample of another language) opens the same way.
    """
    if is_hidden(attrs):
        long = names_collapsible(attrs) and len(node.text().strip()) >= SHOWN_PANEL_MIN_CHARS
        return not (long and on(COLLAPSIBLE_PANELS))
    return (
        attrs.get("aria-hidden") == "true"
        and len(node.text().strip()) < SHOWN_PANEL_MIN_CHARS
        and on(ARIA_HIDDEN_SHORT)
    )


def _is_page(node: LexborNode, chrome_floor: float, main_chars: dict[int, int]) -> bool:
    """True when `node` holds over HIDDEN_PAGE_SHARE of the page's text (`chrome_floor` is
    MIN_CHROME_TEXT_SHARE of it), or of the <main> around it: hidden, it waits for a script
    to show it (a page behind a large header menu holds less than half of the body).

    `main_chars` keeps each <main>'s text length once measured: a page hides many elements
    (menus, dialogs, icons) inside its one main.
    """
    size = len(node.text())
    if size > chrome_floor * HIDDEN_PAGE_SHARE / MIN_CHROME_TEXT_SHARE:
        return True
    if size == 0:  # holds nothing, so no share of anything
        return False
    frame = _main_around(node)
    if frame is None:
        return False
    frame_chars = main_chars.get(frame.mem_id)
    if frame_chars is None:
        frame_chars = main_chars[frame.mem_id] = len(frame.text())
    return size > HIDDEN_PAGE_SHARE * frame_chars


def _main_around(node: LexborNode) -> LexborNode | None:
    """The nearest <main> (or role="main") element holding `node`, if any."""
    ancestor = node.parent
    while ancestor is not None:
        if ancestor.tag == "main" or ancestor.attributes.get("role") == "main":
            return ancestor
        ancestor = ancestor.parent
    return None


def _in_link(elem: Elem | None) -> bool:
    """True when `elem` is, or sits within LINK_CARD_DEPTH levels of, a link: a card's parts
    (its "caption", its "author") are the card's content, never chrome."""
    for _ in range(LINK_CARD_DEPTH):
        if elem is None:
            return False
        if elem.tag == "a":
            return True
        elem = elem.parent
    return False


def text_of(elem: Elem) -> str:
    """All text under `elem` in document order, unformatted; a <br> becomes a newline."""
    parts: list[str] = []
    stack: list[Elem | str] = [elem]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            parts.append(node)
        elif node.tag == "br":
            parts.append("\n")
        else:
            stack.extend(reversed(node.kids))
    return "".join(parts)


def _flatten(node: LexborNode, elem: Elem) -> None:
    """Keep a too-deep subtree as the plain text of one paragraph."""
    elem.tag = "div"
    text = node.text(deep=True, separator=" ")
    if text:
        elem.kids.append(text)
        elem.own_len = len(text.strip())
        elem.own_commas = text.count(",")
