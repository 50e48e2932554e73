"""The actions sites need, on the engine's asyncio thread: keys, hover, select, check,
scroll, waits, history, tabs, uploads and printing.

Like ``pages``, every function here runs on the engine's loop (``engine.run(fn, ...)``),
reaches an element only through ``pages.locate`` and raises ``ActionError`` for what the
caller must hear, or Playwright's own errors, which ``translate`` turns into codes. A wait
that runs out of time raises ``wait_timeout`` itself (not Playwright's timeout): the page is
not spinning, so its session is kept.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from protocol import ErrorCode

from .pages import ActionError, DialogAnswer, Navigated, PageSet, Target, loading, locate

_POLL_S = 0.1  # how often a wait for an element looks again (Playwright polls at 100 ms too)
_TITLE_S = 1.0  # a live tab answers its title in milliseconds; a spinning one never does


async def press(pages: PageSet, target: Target | None, key: str, timeout_ms: float) -> str:
    """Press ``key`` (a checked key or chord) on the element, else on the page."""
    if target is None:
        await pages.page.keyboard.press(key)
    else:
        await (await locate(pages, target)).press(key, timeout=timeout_ms)
    return str(pages.page.url)


async def hover(pages: PageSet, target: Target, timeout_ms: float) -> str:
    await (await locate(pages, target)).hover(timeout=timeout_ms)
    return str(pages.page.url)


async def select(pages: PageSet, target: Target, value: str, timeout_ms: float) -> str:
    """Select the option whose value or label is ``value``; no such option is
    selector_not_found at once (Playwright would wait for one until the deadline)."""
    locator = await locate(pages, target)
    if not await locator.evaluate(_HAS_OPTION, value):
        raise ActionError(ErrorCode.SELECTOR_NOT_FOUND, f"{target.name}: no such option")
    await locator.select_option(value, timeout=timeout_ms)
    return str(pages.page.url)


_HAS_OPTION = (
    "(el, v) => el instanceof HTMLSelectElement"
    " && [...el.options].some((o) => o.value === v || o.label.trim() === v)"
)


async def set_checked(pages: PageSet, target: Target, checked: bool, timeout_ms: float) -> str:
    await (await locate(pages, target)).set_checked(checked, timeout=timeout_ms)
    return str(pages.page.url)


@dataclass(frozen=True)
class Scrolled:
    url: str
    y: int  # the page's vertical scroll offset after the action


_SCROLL_Y = "() => Math.round(window.scrollY)"


async def scroll_into_view(pages: PageSet, target: Target, timeout_ms: float) -> Scrolled:
    await (await locate(pages, target)).scroll_into_view_if_needed(timeout=timeout_ms)
    return Scrolled(pages.page.url, int(await pages.page.evaluate(_SCROLL_Y)))


async def scroll_by(pages: PageSet, pixels: int) -> Scrolled:
    """Scroll the page ``pixels`` down (negative: up), instantly (no smooth animation)."""
    script = "(dy) => { window.scrollBy({top: dy, behavior: 'instant'}); return 0; }"
    await pages.page.evaluate(script, pixels)
    return Scrolled(pages.page.url, int(await pages.page.evaluate(_SCROLL_Y)))


async def wait_text(pages: PageSet, text: str, timeout_ms: float) -> str:
    """Return once an element showing ``text`` is visible; wait_timeout past ``timeout_ms``."""
    from playwright.async_api import TimeoutError as PlaywrightTimeout

    try:
        await pages.page.get_by_text(text).first.wait_for(state="visible", timeout=timeout_ms)
    except PlaywrightTimeout:
        raise ActionError(ErrorCode.WAIT_TIMEOUT, "TEXT did not appear") from None
    return str(pages.page.url)


async def wait_element(pages: PageSet, target: Target, timeout_ms: float) -> str:
    """Return once ``target`` names an element; wait_timeout past ``timeout_ms``."""
    deadline = asyncio.get_running_loop().time() + timeout_ms / 1000
    while True:
        try:
            await locate(pages, target)
        except ActionError as exc:
            if exc.code is not ErrorCode.SELECTOR_NOT_FOUND:
                raise
            if asyncio.get_running_loop().time() + _POLL_S > deadline:
                raise ActionError(ErrorCode.WAIT_TIMEOUT, target.name) from None
            await asyncio.sleep(_POLL_S)
        else:
            return str(pages.page.url)


async def wait_url(pages: PageSet, pattern: str, timeout_ms: float) -> str:
    """Return once the page's URL matches ``pattern`` (a glob with ``*``/``**``/``?``, or
    the exact URL); wait_timeout past ``timeout_ms``."""
    from playwright.async_api import TimeoutError as PlaywrightTimeout

    try:
        await pages.page.wait_for_url(pattern, wait_until="load", timeout=timeout_ms)
    except PlaywrightTimeout:
        raise ActionError(ErrorCode.WAIT_TIMEOUT, "URL did not match") from None
    return str(pages.page.url)


async def history(pages: PageSet, which: str, timeout_ms: float) -> Navigated:
    """``back``, ``forward`` or ``reload``, waiting for the load event; back or forward
    with no page that way is action_failed (the page stays where it is)."""
    page = pages.page
    if which == "reload":
        with loading():
            response = await page.reload(wait_until="load", timeout=timeout_ms)
    else:
        move = page.go_back if which == "back" else page.go_forward
        before = page.url
        with loading():
            response = await move(wait_until="load", timeout=timeout_ms)
        if response is None and page.url == before:
            raise ActionError(ErrorCode.ACTION_FAILED, f"no page to go {which} to")
    return Navigated(page.url, await page.title(), response and response.status)


async def arm_dialog(pages: PageSet, answer: DialogAnswer) -> str:
    """Answer the session's next dialog (in any tab) with ``answer``."""
    pages.dialog = answer
    return str(pages.page.url)


@dataclass(frozen=True)
class Tab:
    index: int
    url: str
    title: str
    current: bool


async def tabs(pages: PageSet) -> list[Tab]:
    """The session's open tabs in the order they opened (0 is the first page)."""
    found = []
    for index, page in enumerate(list(pages.tabs)):
        title = await _title(page)
        found.append(Tab(index, page.url, title, page is pages.page))
    return found


async def _title(page: Any) -> str:
    """The tab's title; "" for a tab closing as it is listed, or too busy to say (a page
    spinning in a script must not hold the listing until the deadline)."""
    try:
        return str(await asyncio.wait_for(page.title(), _TITLE_S))
    except Exception:  # TimeoutError included
        return ""


def _tab(pages: PageSet, index: int) -> Any:
    if index >= len(pages.tabs):
        raise ActionError(ErrorCode.TAB_NOT_FOUND, f"{index}: {len(pages.tabs)} tabs open")
    return pages.tabs[index]


async def switch(pages: PageSet, index: int) -> Tab:
    """Make tab ``index`` the current one (every later action acts on it)."""
    page = _tab(pages, index)
    await page.bring_to_front()
    pages.page = page
    return Tab(index, page.url, await _title(page), True)


async def close_tab(pages: PageSet, index: int) -> Tab:
    """Close tab ``index``; closing the current one makes the first other tab current.
    The last tab is not closed (``close`` ends the session): invalid_field."""
    page = _tab(pages, index)
    if len(pages.tabs) == 1:
        raise ActionError(ErrorCode.INVALID_FIELD, "TAB is the session's last: close ends it")
    if page is pages.page:
        pages.page = next(tab for tab in pages.tabs if tab is not page)
    pages.tabs.remove(page)
    await page.close()
    current = pages.page
    return Tab(pages.tabs.index(current), current.url, await _title(current), True)


async def upload(
    pages: PageSet, target: Target, name: str, mime: str, data: bytes, timeout_ms: float
) -> str:
    """Give the file input at ``target`` one file, ``data`` named ``name``: the bytes go
    over, Chromium never reads a path of the host."""
    payload = {"name": name, "mimeType": mime, "buffer": data}
    await (await locate(pages, target)).set_input_files(payload, timeout=timeout_ms)
    return str(pages.page.url)


async def pdf(pages: PageSet) -> tuple[bytes, str]:
    """The page printed to PDF (A4, backgrounds), and the URL printed."""
    data: bytes = await pages.page.pdf(format="A4", print_background=True)
    return data, str(pages.page.url)
