"""What runs on the engine's asyncio thread: contexts, pages and the element actions.

Every function here takes and returns plain values or Playwright objects, runs on the
engine's loop (``engine.run(fn, ...)``), and raises ``ActionError`` (a code and detail) for
what the caller must hear, or Playwright's own errors, which ``translate`` turns into codes.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from csp_web.net import GuardConfig, check_url
from csp_web.net.guard_proxy import Lane
from protocol import ErrorCode

from .downloads import Downloads
from .engine import BrowserEngine, BrowserHandle, Opened
from .refs import RefBook, RefStale

# The schemes a popup may show; anything else (file:, chrome:, data:, javascript:) is closed.
_WEB_SCHEMES = ("https:", "http:", "about:blank")
# What Playwright's count() says of a SELECTOR that does not parse (its own CSS parser; the
# page's querySelectorAll or evaluate): the client's field, not the action, failed.
_SELECTOR_SYNTAX = (
    "while parsing css selector",
    "is not a valid selector",
    "is not a valid XPath expression",
)
# Every context's device scale: set, not left to Chromium, since a shot's pixels are its CSS
# size times it (``check_shot``).
DEVICE_SCALE = 1
# The largest screenshot side, in device px: Chromium's compositor draws a capture as one
# texture, and its software GL backend's max texture size is 16,384 px (crbug.com/770769,
# issues.chromium.org/41347676; puppeteer#1576: past it the image repeats). A page far past it
# (100,000 x 1,000,000 px) held the renderer until the task's deadline; a 16,384 px square
# takes 14 s on a 2-core host. The byte cap (max_screenshot_bytes) can only be checked after
# the capture, so it bounds nothing of the drawing.
MAX_SHOT_SIDE_PX = 16_384
# The page's full size as Playwright's own full-page shot measures it (its screenshotter's
# ``_fullPageSize``), in CSS px; null for a document without a body (SVG, XML).
_PAGE_SIZE = """() => {
  const b = document.body, d = document.documentElement;
  if (!b || !d) return null;
  return [
    Math.max(b.scrollWidth, d.scrollWidth, b.offsetWidth, d.offsetWidth, b.clientWidth,
             d.clientWidth),
    Math.max(b.scrollHeight, d.scrollHeight, b.offsetHeight, d.offsetHeight, b.clientHeight,
             d.clientHeight),
  ];
}"""


class ActionError(Exception):
    """A failure with a catalogue code, raised on the engine thread, re-raised on trio's."""

    def __init__(self, code: ErrorCode, detail: str) -> None:
        super().__init__(f"{code}:{detail}")
        self.code = code
        self.detail = detail


@dataclass(frozen=True)
class DialogAnswer:
    """How the next alert/confirm/prompt is answered: accepted (with ``text`` for a
    prompt) or dismissed."""

    accept: bool
    text: str | None = None


@dataclass
class PageSet:
    """One BrowserContext, its lane into the guard proxy and its main page; popups
    counted against ``max_pages``. ``lost`` says why the page is gone when something other
    than ``close_pages`` took it (its renderer crashed, it closed itself, its context or
    browser closed); ``gone`` is set then (engine thread)."""

    opened: Opened
    page: Any  # the current tab: every action acts on it (``switch`` changes it)
    tabs: list[Any] = field(default_factory=list)  # the main page, then admitted popups
    dialog: DialogAnswer | None = None  # armed by ``dialog`` for the next one, then cleared
    popups_kept: int = 0
    popups_closed: int = 0
    popup_decided: asyncio.Event = field(default_factory=asyncio.Event)
    lost: str | None = None
    gone: asyncio.Event = field(default_factory=asyncio.Event)
    ref_books: dict[Any, RefBook] = field(default_factory=dict)  # per page: refs.book_of
    downloads: Downloads = field(default_factory=lambda: Downloads(0, 1))

    @property
    def context(self) -> Any:
        return self.opened.context

    @property
    def handle(self) -> BrowserHandle:
        return self.opened.handle

    @property
    def lane(self) -> Lane:
        return self.opened.lane

    def lost_reason(self) -> str | None:
        """Why the page is gone, or None while it can still act (read from any thread)."""
        if self.lost is None and not self.handle.connected:
            return "browser closed"
        return self.lost

    def mark_lost(self, reason: str) -> None:
        """Keep the first reason the page went (engine thread: its event handlers)."""
        if self.lost is None:
            self.lost = reason
        self.gone.set()


async def open_pages(
    engine: BrowserEngine,
    guard: GuardConfig,
    *,
    max_pages: int,
    width: int,
    height: int,
    script: bool = True,
    downloads: Downloads | None = None,
    storage_state: dict[str, Any] | None = None,
) -> PageSet:
    """A fresh context (no shared cookies, storage or cache but ``storage_state``'s, a
    saved login) with one page; its pages run no script unless ``script``, and take the
    downloads they start into ``downloads`` (none: Chromium refuses them)."""
    opened = await engine.new_context(
        viewport={"width": width, "height": height},
        device_scale_factor=DEVICE_SCALE,
        service_workers="block",
        accept_downloads=downloads is not None,
        java_script_enabled=script,
        storage_state=storage_state,
    )
    try:
        page = await opened.context.new_page()
    except BaseException:
        await engine.close_context(opened)
        raise
    pages = PageSet(opened, page)
    if downloads is not None:
        pages.downloads = downloads
        downloads.watch(page)
    opened.context.on("page", lambda popup: _admit_popup(pages, popup, guard, max_pages))
    _watch(pages, page)
    opened.context.on("close", lambda _context: pages.mark_lost("context closed"))
    return pages


def _watch(pages: PageSet, page: Any) -> None:
    """Keep ``page`` as a tab: its loss is the session's only while it is the current tab,
    and its dialogs are answered as armed, else dismissed (what Playwright does to a page
    nobody listens to)."""
    pages.tabs.append(page)
    page.on("crash", lambda _page: _tab_went(pages, page, "renderer crashed"))
    page.on("close", lambda _page: _tab_went(pages, page, "page closed"))
    page.on("dialog", lambda dialog: _answer_dialog(pages, dialog))


def _tab_went(pages: PageSet, page: Any, reason: str) -> None:
    if page in pages.tabs:
        pages.tabs.remove(page)
    if page is pages.page:
        pages.mark_lost(reason)


async def _answer_dialog(pages: PageSet, dialog: Any) -> None:
    answer, pages.dialog = pages.dialog, None
    with contextlib.suppress(Exception):  # the page may have gone meanwhile
        if answer is not None and answer.accept:
            await dialog.accept(answer.text)
        else:
            await dialog.dismiss()


def _admit_popup(pages: PageSet, popup: Any, guard: GuardConfig, max_pages: int) -> None:
    """Popups: kept while the session is under its page cap and the URL passes the gate."""
    if popup is pages.page:
        return
    if len(pages.context.pages) > max_pages or not _popup_url_ok(popup.url, guard):
        pages.popups_closed += 1
        _close_soon(popup)
    else:
        pages.popups_kept += 1
        _watch(pages, popup)
        pages.downloads.watch(popup)
    pages.popup_decided.set()


def _popup_url_ok(url: str, guard: GuardConfig) -> bool:
    if url in ("", "about:blank"):
        return True
    if not url.startswith(_WEB_SCHEMES):
        return False
    try:
        check_url(url, guard)
    except Exception:
        return False
    return True


def _close_soon(page: Any) -> None:
    async def close() -> None:
        with contextlib.suppress(Exception):
            await page.close()

    asyncio.get_running_loop().create_task(close())


async def close_pages(engine: BrowserEngine, pages: PageSet) -> None:
    await engine.close_context(pages.opened)


@dataclass(frozen=True)
class Navigated:
    url: str
    title: str
    status: int | None


@contextlib.contextmanager
def loading() -> Iterator[None]:
    """Around a page load (goto, reload, history, set_content): Playwright's timeout there
    is navigation_failed:timeout. Every other Playwright timeout is the action's, which
    ``errors.translate`` answers as the deadline's (timeout_exceeded). The timeout stays the
    cause: ``errors.timed_out`` still sees that the page may spin."""
    from playwright.async_api import TimeoutError as PlaywrightTimeout

    try:
        yield
    except PlaywrightTimeout as exc:
        raise ActionError(ErrorCode.NAVIGATION_FAILED, "timeout") from exc


async def navigate(pages: PageSet, url: str, timeout_ms: float) -> Navigated:
    """Load ``url`` and wait for its load event; the final URL and title. A URL that
    turns out a download is no failure: the page stays where it was, the download is told."""
    try:
        with loading():
            response = await pages.page.goto(url, wait_until="load", timeout=timeout_ms)
    except Exception as exc:
        if "Download is starting" not in str(exc):
            raise
        response = None
    return Navigated(pages.page.url, await pages.page.title(), response and response.status)


@dataclass(frozen=True)
class Target:
    """The element an action names: a SELECTOR (``css:...`` or ``xpath:...``) or a REF
    (``e12``, from the page's latest snapshot: ``refs``); exactly one of them."""

    selector: str | None = None
    ref: str | None = None

    @property
    def name(self) -> str:
        """The element as the client named it."""
        return self.ref or self.selector or ""

    def fields(self) -> tuple[tuple[str, str], ...]:
        """The reply fields that name the element acted on."""
        if self.ref is not None:
            return (("REF", self.ref),)
        return (("SELECTOR", self.name),)


async def locate(pages: PageSet, target: Target) -> Any:
    """The first element ``target`` names on the current page, now; none is
    selector_not_found at once, not a wait for one to appear until the deadline. A REF
    names the very element its snapshot saw, or none: ref_stale when the page navigated,
    a later snapshot left it out, or the element left the page (``refs``)."""
    if target.ref is not None:
        return await _locate_ref(pages, target.ref)
    locator = pages.page.locator(_engine_selector(target.name))
    try:
        found = await locator.count()
    except Exception as exc:
        if not any(text in str(exc) for text in _SELECTOR_SYNTAX):
            raise
        raise ActionError(ErrorCode.INVALID_FIELD, "SELECTOR is not a valid selector") from None
    if found == 0:
        raise ActionError(ErrorCode.SELECTOR_NOT_FOUND, target.name)
    return locator.first


async def _locate_ref(pages: PageSet, label: str) -> Any:
    book = pages.ref_books.get(pages.page)
    try:
        if book is None:
            raise RefStale(label)
        locator = pages.page.get_by_ref(book.resolve(label))
    except RefStale:
        raise ActionError(ErrorCode.REF_STALE, label) from None
    try:
        found = await locator.count()
    except Exception as exc:  # Playwright's "Invalid frame in aria-ref selector": frame gone
        if "aria-ref" not in str(exc):
            raise
        found = 0
    if found == 0:  # detached, or its frame is gone
        raise ActionError(ErrorCode.REF_STALE, label)
    return locator


def _engine_selector(selector: str) -> str:
    kind, _, expression = selector.partition(":")
    return f"{kind}={expression}"


async def click(pages: PageSet, target: Target, timeout_ms: float) -> str:
    locator = await locate(pages, target)
    await locator.click(timeout=timeout_ms)
    return str(pages.page.url)


async def type_text(pages: PageSet, target: Target, value: str, timeout_ms: float) -> str:
    locator = await locate(pages, target)
    await locator.fill(value, timeout=timeout_ms)
    return str(pages.page.url)


async def screenshot(pages: PageSet, *, full_page: bool, timeout_ms: float) -> bytes:
    """A PNG of the viewport, or of the whole page (``check_shot`` first)."""
    clip = await page_clip(pages) if full_page else None
    data: bytes = await pages.page.screenshot(
        full_page=clip is not None, clip=clip, type="png", timeout=timeout_ms
    )
    return data


async def page_clip(pages: PageSet) -> dict[str, float] | None:
    """The whole page's rectangle (CSS px) for a full-page shot, once ``check_shot`` passed
    it. Given as the shot's clip, it bounds the capture even if the page grows after this
    measure (Playwright trims a clip to the page, never widens it). None for a document
    without a body, whose whole page Playwright would wait for until the deadline: the
    viewport is what is shot of it."""
    measured = await pages.page.evaluate(_PAGE_SIZE)
    if measured is None:
        return None
    # The page's script may have replaced what the measure calls: anything but two sizes
    # is not a page that can be shot whole (a false size only narrows its own clip).
    if not (
        isinstance(measured, list)
        and len(measured) == 2
        and all(isinstance(n, int | float) and n > 0 for n in measured)
    ):
        raise ActionError(ErrorCode.ACTION_FAILED, "the page's size is unreadable")
    width, height = measured
    check_shot("page", width, height)
    return {"x": 0, "y": 0, "width": width, "height": height}


def check_shot(what: str, width: float, height: float) -> None:
    """too_large when a ``width`` x ``height`` CSS px shot of ``what`` (page, element) would
    be past ``MAX_SHOT_SIDE_PX`` device px a side: refused before Chromium draws it."""
    side = max(width, height) * DEVICE_SCALE
    if not side <= MAX_SHOT_SIDE_PX:  # NaN too
        size = f"{math.ceil(width)}x{math.ceil(height)}"
        why = f"{what} {size} px, over {MAX_SHOT_SIDE_PX} px a side"
        raise ActionError(ErrorCode.TOO_LARGE, why)


@dataclass(frozen=True)
class Extracted:
    url: str
    title: str
    html: str | None  # the page, for the extractor; None when ``text`` answers a SELECTOR
    text: str | None


async def extract(
    pages: PageSet, target: Target | None, attribute: str | None, timeout_ms: float
) -> Extracted:
    page = pages.page
    title = await page.title()
    if target is None:
        return Extracted(page.url, title, await page.content(), None)
    locator = await locate(pages, target)
    if attribute is not None:
        value = await locator.get_attribute(attribute, timeout=timeout_ms)
        if value is None:
            raise ActionError(ErrorCode.SELECTOR_NOT_FOUND, f"{target.name}@{attribute}")
        return Extracted(page.url, title, None, value)
    return Extracted(page.url, title, None, await locator.inner_text(timeout=timeout_ms))


def host_port(url: str) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(url)
    default = 443 if parts.scheme == "https" else 80
    return (parts.hostname or "", parts.port or default)
