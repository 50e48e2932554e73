"""The extraction as a declared list of passes over the page model (`_page.Page`).

Each `Pass` names the parts of the page it reads and the parts it writes; `Elem.x` names a
slot of the mirror's elements (the counters `measure` fills, the flags the mirror sets), so
the element slots each pass touches are declared too. `run_passes` runs them in order; the
content passes (`on_body`) run only when the document has a body to mirror.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from ._clean import drop_repeats, find_skips, trim_tail
from ._dom import build_tree
from ._join import join_items
from ._kind import Layout, declared_types, page_type
from ._lead import lead_before
from ._markdown import render
from ._meta import find_description, find_title
from ._page import Claims, Page
from ._page_sections import names_content
from ._prune import drop_chrome
from ._repeat import find_run, run_items, widen
from ._rules import (
    CHROME_PRUNE,
    DROP_REPEATS,
    JOIN_LEAD,
    KEEP_MOST,
    KEEP_TEXT,
    NAMED_PICK,
    RUN_WIDEN,
    SHELL_DESCRIPTION,
    SPREAD,
    THREAD_JOIN,
    TRIM_TAIL,
    Rule,
    on,
)
from ._score import keep_most, link_density, measure, select_content, spread
from ._shell import readable_tree
from ._text import readable

T = TypeVar("T")
_WORD = re.compile(r"\w+")
_LINK_TARGET = re.compile(r"\]\([^)]*\)")


@dataclass(frozen=True)
class Pass:
    """One step of the extraction: `run` reads the parts in `reads`, writes those in `writes`."""

    name: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    run: Callable[[Page], None]
    on_body: bool = False  # a content pass: runs only when the page has a body to mirror


def _read_claims(page: Page) -> None:
    """Title, description and declared types; read before scripts go (JSON-LD is one)."""
    page.title = find_title(page.tree)
    page.description = find_description(page.tree)
    page.declared = declared_types(page.tree)
    page.claims = Claims.of(page.declared)


def _narrow(page: Page) -> None:
    page.tree = readable_tree(page.tree)


def _mirror(page: Page) -> None:
    body = page.tree.body
    if body is not None:
        claims = page.claims
        page.root, page.order = build_tree(body, article=claims.article, product=claims.product)


def _measure(page: Page) -> None:
    measure(page.order)


def _prune(page: Page) -> None:
    if any(elem.chrome for elem in page.order) and on(CHROME_PRUNE):
        page.order = drop_chrome(page.order)


def _find_run(page: Page) -> None:
    page.run = find_run(page.order)


def _select(page: Page) -> None:
    page.picked = select_content(page.mirror(), page.order)


def _widen(page: Page) -> None:
    picked = page.picked
    keep_pick = page.claims.article or (names_content(picked) and on(NAMED_PICK))
    content, listing = widen(picked, page.run, keep_pick=keep_pick)
    if (content != picked or listing) and not on(RUN_WIDEN):
        content, listing = picked, False
    page.content, page.listing = content, listing


def _spread(page: Page) -> None:
    if not page.listing:
        page.content = _if_on(SPREAD, page.content, spread(page.content, page.mirror()))


def _join_lead(page: Page) -> None:
    """A lead paragraph right before the pick (in the article's header, say) opens it."""
    if not page.listing:
        lead = lead_before(page.content)
        if lead is not None and lead not in page.content and on(JOIN_LEAD):
            page.content = [lead, *page.content]


def _join_items(page: Page) -> None:
    if page.claims.thread:
        page.content = _if_on(THREAD_JOIN, page.content, join_items(page.content, page.order))


def _layout(page: Page) -> None:
    run = page.run
    page.layout = Layout(
        listing=page.listing,
        widened=page.content != page.picked,
        run_items=run_items(run) if run is not None else 0,
        run_link_density=link_density(run) if run is not None else 0.0,
        prose_chars=sum(elem.text_len - elem.link_len for elem in page.content),
    )


def _keep_most(page: Page) -> None:
    content, scattered = keep_most(page.content, page.mirror())
    if scattered and on(KEEP_MOST):
        page.content, page.listing = content, True


def _find_skips(page: Page) -> None:
    page.skip = find_skips(
        page.content, page.title, listing=page.listing, product=page.claims.product
    )


def _render(page: Page) -> None:
    page.blocks = render(page.content, base_url=page.url, skip=page.skip)


def _drop_repeats(page: Page) -> None:
    page.blocks = _if_on(DROP_REPEATS, page.blocks, drop_repeats(page.blocks))


def _trim_tail(page: Page) -> None:
    page.blocks = _if_on(TRIM_TAIL, page.blocks, trim_tail(page.blocks))


def _keep_text(page: Page) -> None:
    """Cleaning must never empty an article that has text: render it again, nothing skipped."""
    if not page.blocks:
        page.blocks = _if_on(
            KEEP_TEXT, page.blocks, render(page.content, base_url=page.url, skip=frozenset())
        )


def _join_blocks(page: Page) -> None:
    page.body = readable("\n\n".join(page.blocks))


def _count_words(page: Page) -> None:
    page.words = len(_WORD.findall(_LINK_TARGET.sub("]", page.body)))


def _shell_description(page: Page) -> None:
    """A body with fewer words than the description is a script-rendered shell's: the
    description says more."""
    description = page.description
    if description and page.words < len(_WORD.findall(description)) and on(SHELL_DESCRIPTION):
        page.body, page.words = description, len(_WORD.findall(description))


def _titled(page: Page) -> None:
    title, body = page.title, page.body
    page.markdown = f"# {title}\n\n{body}" if title and body else body


def _page_kind(page: Page) -> None:
    if page.body:
        page.kind = page_type(page.declared, page.url, page.layout, page.body)


def _if_on(rule: Rule, before: list[T], after: list[T]) -> list[T]:
    """`after`, the part as `rule` leaves it, unless the rule is off and changed it."""
    return after if after == before or on(rule) else before


# The slots of the mirror's elements each pass writes: the mirror builds them, `measure`
# fills the counters bottom-up, `prune` detaches elements and corrects their ancestors'.
_BUILT = (
    "Elem.tag", "Elem.attrs", "Elem.parent", "Elem.hint", "Elem.kids", "Elem.own_len",
    "Elem.own_commas", "Elem.chrome", "Elem.holds_items",
)  # fmt: skip
_COUNTERS = ("Elem.text_len", "Elem.link_len", "Elem.commas", "Elem.prose", "Elem.points")

PASSES: tuple[Pass, ...] = (
    Pass("read-claims", ("tree",), ("title", "description", "declared", "claims"), _read_claims),
    Pass("narrow", ("tree",), ("tree",), _narrow),
    Pass(
        "mirror",
        ("tree", "claims"),
        ("root", "order", *_BUILT),
        _mirror,
    ),
    Pass("measure", ("order",), (*_COUNTERS, "Elem.blocky"), _measure, on_body=True),
    Pass(
        "prune",
        ("order",),
        ("order", "Elem.dropped", "Elem.kids", *_COUNTERS),
        _prune,
        on_body=True,
    ),
    Pass("find-run", ("order",), ("run",), _find_run, on_body=True),
    Pass("select", ("root", "order"), ("picked", "Elem.score"), _select, on_body=True),
    Pass("widen", ("picked", "run", "claims"), ("content", "listing"), _widen, on_body=True),
    Pass("spread", ("content", "root", "listing"), ("content",), _spread, on_body=True),
    Pass("join-lead", ("content", "listing"), ("content",), _join_lead, on_body=True),
    Pass("join-items", ("content", "order", "claims"), ("content",), _join_items, on_body=True),
    Pass("layout", ("content", "picked", "listing", "run"), ("layout",), _layout, on_body=True),
    Pass("keep-most", ("content", "root"), ("content", "listing"), _keep_most, on_body=True),
    Pass(
        "find-skips",
        ("content", "title", "listing", "claims"),
        ("skip",),
        _find_skips,
        on_body=True,
    ),
    Pass("render", ("content", "url", "skip"), ("blocks",), _render, on_body=True),
    Pass("drop-repeats", ("blocks",), ("blocks",), _drop_repeats, on_body=True),
    Pass("trim-tail", ("blocks",), ("blocks",), _trim_tail, on_body=True),
    Pass("keep-text", ("blocks", "content", "url"), ("blocks",), _keep_text, on_body=True),
    Pass("join-blocks", ("blocks",), ("body",), _join_blocks),
    Pass("count-words", ("body",), ("words",), _count_words),
    Pass("shell-description", ("description", "words"), ("body", "words"), _shell_description),
    Pass("titled", ("title", "body"), ("markdown",), _titled),
    Pass("page-kind", ("body", "declared", "url", "layout"), ("kind",), _page_kind),
)


def run_passes(page: Page, passes: tuple[Pass, ...] = PASSES) -> Page:
    """Run `passes` over `page` in order and return it; content passes need a mirror."""
    for step in passes:
        if not step.on_body or page.root is not None:
            step.run(page)
    return page
