"""Details panels of a product page: the description in a drawer, a sheet or a modal.

Product pages keep the product's description, its details and its care notes in panels
that a button or an accordion opens: an <aside> drawer, a role="dialog" sheet, a
"product-details-modal". Beside an article such a panel is a pop-up (a sign-up form, a
cart), but on a page declaring one product a panel of prose is that product's text.
"""

from __future__ import annotations

import re
from typing import Protocol

from selectolax.lexbor import LexborNode

from ._attrs import always_chrome

PANEL_MIN_CHARS = 150  # as `_dom.SHOWN_PANEL_MIN_CHARS`: shorter panels are labels and carts
PANEL_MAX_LINK_DENSITY = 0.2  # a panel of links is a menu drawer, not the product's text
PANEL_TAGS = frozenset({"aside", "dialog"})
# Class/id words of a panel that opens over or beside the page.
PANEL_WORDS = re.compile(r"modal|sheet|drawer|popup|overlay|flyout|offcanvas|dialog")
# Words that name the product's own text, in the panel's class/id, label or first words
# ("product-details-modal", a sheet that starts "Description").
DETAILS_WORDS = re.compile(r"descri|details|specification|features", re.IGNORECASE)
LABEL_CHARS = 40  # how far into its text a panel says what it holds


class _Mirrored(Protocol):
    """What this module reads of a mirrored element (`_dom.Elem`): its class/id and parent."""

    @property
    def hint(self) -> str: ...

    @property
    def parent(self) -> _Mirrored | None: ...

    @property
    def attrs(self) -> dict[str, str | None]: ...


class DetailsPanels:
    """The details panels of a product page found while mirroring it, and all they hold."""

    def __init__(self) -> None:
        self._kept: set[int] = set()  # id()s of the panels' Elems and of their descendants

    def keeps(self, node: LexborNode, tag: str, elem: _Mirrored) -> bool:
        """True when `elem` (mirroring `node`) is a details panel or sits inside one: it is
        kept whatever its class names (a panel's "modal__container" is its content)."""
        parent = elem.parent
        if (parent is not None and id(parent) in self._kept) or is_details_panel(
            node, tag, elem.attrs, elem.hint
        ):
            self._kept.add(id(elem))
            return True
        return False


def is_details_panel(
    node: LexborNode, tag: str, attrs: dict[str, str | None], hint: str | None = None
) -> bool:
    """True when `node` (with `attrs`) is a panel (PANEL_TAGS, role="dialog", PANEL_WORDS in
    its class/id) that says it holds the product's details (DETAILS_WORDS) and holds
    PANEL_MIN_CHARS of text, at most PANEL_MAX_LINK_DENSITY of it in links; never a consent
    dialog. `hint` is the lower-cased class and id, read from `attrs` when not given."""
    if hint is None:
        hint = f"{attrs.get('class') or ''} {attrs.get('id') or ''}".lower()
    if not (
        tag in PANEL_TAGS or attrs.get("role") == "dialog" or PANEL_WORDS.search(hint) is not None
    ) or always_chrome(hint):
        return False
    size = len(node.text().strip())
    if size < PANEL_MIN_CHARS or not _names_details(node, attrs, hint):
        return False
    links = sum(len(link.text()) for link in node.css("a"))
    return links <= PANEL_MAX_LINK_DENSITY * size


def _names_details(node: LexborNode, attrs: dict[str, str | None], hint: str) -> bool:
    label = f"{hint} {attrs.get('aria-label') or ''} {node.text()[:LABEL_CHARS]}"
    return DETAILS_WORDS.search(label) is not None
