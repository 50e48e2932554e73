"""What runs on the engine's thread for snapshots: the page's accessibility tree with refs,
element screenshots, and screenshots with the refs drawn on them.

The tree is Playwright's AI snapshot (``aria_snapshot(mode="ai")``: the accessibility tree
as YAML-shaped text, same- and cross-origin iframes included), rewritten by
``snapshot_text.rewrite`` so the refs are the page's own labels (``refs.RefBook``).
"""

from __future__ import annotations

import contextlib
import math
import re
from dataclasses import dataclass
from typing import Any

from protocol import ErrorCode

from .pages import ActionError, PageSet, Target, check_shot, locate, page_clip
from .refs import book_of
from .snapshot_text import Box, Rewritten, rewrite

_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class Snapshot:
    """One snapshot: the page's URL and title, its text, how many refs it carries, and
    whether the ref cap cut it."""

    url: str
    title: str
    text: str
    refs: int
    cut: bool


@dataclass(frozen=True)
class Caps:
    """A snapshot's bounds (``BrowserConfig.snapshot_*``): the tree's levels, the refs it
    issues and the elements it may walk."""

    depth: int
    refs: int
    elements: int


async def take(pages: PageSet, scope: Target | None, caps: Caps, timeout_ms: float) -> Snapshot:
    """The page's tree (or ``scope``'s, the element and what it holds) down to
    ``caps.depth``; its refs become the page's live ones (``refs``), replacing the last
    snapshot's. Raises ActionError(too_large) for a page of more than ``caps.elements``."""
    taken = await _rewritten(pages, scope, caps, timeout_ms=timeout_ms)
    page = pages.page
    title = _SURROGATE.sub("\ufffd", await page.title())
    return Snapshot(str(page.url), title, taken.text, len(taken.live), taken.cut)


async def _rewritten(
    pages: PageSet, scope: Target | None, caps: Caps, *, timeout_ms: float, boxes: bool = False
) -> Rewritten:
    """Take the snapshot, label its refs and publish them, unless a frame navigated while it
    was taken (then nothing it names is live: its refs answer ref_stale)."""
    book = book_of(pages.ref_books, pages.page)
    document = book.document
    located: Any = pages.page if scope is None else await locate(pages, scope)
    await _check_size(pages, located if scope is not None else None, caps.elements)
    text = await located.aria_snapshot(mode="ai", depth=caps.depth, boxes=boxes, timeout=timeout_ms)
    taken = rewrite(text, book.label, max_refs=caps.refs)
    book.publish(taken.live if book.document == document else {})
    return taken


async def _check_size(pages: PageSet, scope: Any, cap: int) -> None:
    """Refuse, before walking it, a tree of more than ``cap`` elements (every frame's, for the
    page): Playwright's walk has no bound of its own and takes seconds per few thousand
    elements, so a 100k-element page would run to the deadline. Counted in Playwright's
    utility world, which the page's scripts cannot reach."""
    if scope is not None:
        found = 1 + await scope.locator("*").count()
    else:
        found = 0
        for frame in pages.page.frames:
            found += await frame.locator("*").count()
            if found > cap:
                break
    if found > cap:
        why = f"over {cap} elements: scope it with SELECTOR or REF"
        raise ActionError(ErrorCode.TOO_LARGE, why)


async def element_shot(pages: PageSet, target: Target, timeout_ms: float) -> bytes:
    """A PNG of the one element ``target`` names: its box, measured once, checked
    (``check_shot``: too_large before Chromium draws it) and shot as the page's clip, as
    Playwright's own element shot does (scrolled into view, the box in document coordinates,
    its enclosing whole pixels); an element grown by script after the measure cannot grow
    the capture. One not visible is action_failed."""
    locator = await locate(pages, target)
    await locator.scroll_into_view_if_needed(timeout=timeout_ms)
    box = await locator.bounding_box(timeout=timeout_ms)
    if box is None or box["width"] <= 0 or box["height"] <= 0:
        raise ActionError(ErrorCode.ACTION_FAILED, f"{target.name} is not visible")
    check_shot("element", box["width"], box["height"])
    left, top = await pages.page.evaluate(_SCROLLED)
    clip = _enclosing(box["x"] + left, box["y"] + top, box["width"], box["height"])
    data: bytes = await pages.page.screenshot(
        full_page=True, clip=clip, type="png", timeout=timeout_ms
    )
    return data


_SCROLLED = "() => [window.scrollX, window.scrollY]"


def _enclosing(x: float, y: float, width: float, height: float) -> dict[str, float]:
    """The whole-pixel rectangle enclosing the one given (Playwright's ``enclosingIntRect``)."""
    left, top = math.floor(x + 1e-3), math.floor(y + 1e-3)
    right, bottom = math.ceil(x + width - 1e-3), math.ceil(y + height - 1e-3)
    return {"x": left, "y": top, "width": right - left, "height": bottom - top}


# The overlay: a closed shadow root, so the page's style sheets cannot restyle the labels,
# absolutely placed in document coordinates (a full-page shot scrolls nothing).
_DRAW = """(boxes) => {
  const host = document.createElement('csp-web-labels');
  host.style.cssText = 'position:absolute;left:0;top:0;width:0;height:0;z-index:2147483647;'
    + 'pointer-events:none;display:block';
  const root = host.attachShadow({mode: 'closed'});
  for (const [label, x, y, w, h] of boxes) {
    const box = document.createElement('div');
    box.style.cssText = `position:absolute;left:${x + scrollX}px;top:${y + scrollY}px;`
      + `width:${w}px;height:${h}px;outline:2px solid #e0115f;box-sizing:border-box`;
    const tag = document.createElement('span');
    tag.textContent = label;
    tag.style.cssText = 'position:absolute;left:0;top:-14px;font:bold 11px/13px monospace;'
      + 'background:#e0115f;color:#fff;padding:0 2px;white-space:nowrap';
    box.appendChild(tag);
    root.appendChild(box);
  }
  document.documentElement.appendChild(host);
  return host;
}"""


async def labelled_shot(
    pages: PageSet, caps: Caps, *, full_page: bool, timeout_ms: float
) -> tuple[bytes, int]:
    """A PNG of the page with each actionable element's box and label drawn on it, from a
    snapshot taken now (whose refs become the live ones, as ``take``'s); the overlay is
    removed after the shot, whatever happens. The PNG and how many labels it shows."""
    clip = await page_clip(pages) if full_page else None  # refused before the snapshot
    taken = await _rewritten(pages, None, caps, timeout_ms=timeout_ms, boxes=True)
    page = pages.page
    host = await page.evaluate_handle(_DRAW, [_row(box) for box in taken.boxes])
    try:
        data: bytes = await page.screenshot(
            full_page=clip is not None, clip=clip, type="png", timeout=timeout_ms
        )
    finally:
        with contextlib.suppress(Exception):  # a page gone mid-shot has nothing to clean
            await host.evaluate("(host) => host.remove()")
            await host.dispose()
    return data, len(taken.boxes)


def _row(box: Box) -> list[object]:
    return [box.label, box.x, box.y, box.width, box.height]
