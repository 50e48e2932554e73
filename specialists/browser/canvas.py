"""Canvas nodes: a page a node shows. Node ``main`` is this host's own Chromium page.

``CanvasNode`` is what the canvas op drives; a remote node (the node issue) is another class
with the same five methods, added to ``BrowserServices.canvas`` under its name. Every call may
raise OpError with a catalogue code.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

import trio

from csp_web.core.errors import OpError
from csp_web.net import GuardConfig
from protocol import ErrorCode

from .engine import BrowserEngine
from .errors import refusals_on
from .pages import PageSet, close_pages, open_pages


class CanvasNode(Protocol):
    """One node's canvas. ``url`` or ``html`` (exactly one) is what ``present`` shows."""

    @property
    def shown(self) -> str | None: ...

    async def present(
        self, *, url: str | None, html: str | None, width: int, height: int, timeout_ms: float
    ) -> str: ...

    async def hide(self) -> None: ...

    async def navigate(self, url: str, timeout_ms: float) -> str: ...

    async def evaluate(self, expression: str, timeout_ms: float, max_bytes: int) -> str: ...

    async def snapshot(self, timeout_ms: float) -> bytes: ...


class LocalCanvas:
    """Node ``main``: one context and page in ``engine`` (headed when it has a display)."""

    def __init__(self, engine: BrowserEngine, guard: Any) -> None:
        self.engine = engine
        self._guard = guard  # Callable[[], GuardConfig]
        self._pages: PageSet | None = None
        self._size: tuple[int, int] | None = None
        self.shown: str | None = None
        self._lock = trio.Lock()

    async def present(
        self, *, url: str | None, html: str | None, width: int, height: int, timeout_ms: float
    ) -> str:
        async with self._lock:
            pages = await self._open(width, height)
            if html is not None:
                await self.engine.run(_set_content, pages, html, timeout_ms)
                self.shown = "inline"
            else:
                assert url is not None
                with refusals_on(pages.lane, scope="canvas", url=url):
                    self.shown = await self.engine.run(_goto, pages, url, timeout_ms)
            return self.shown

    async def _open(self, width: int, height: int) -> PageSet:
        pages = self._pages
        if pages is not None and not pages.handle.connected:
            pages = self._pages = None
        if pages is None:
            guard: GuardConfig = self._guard()
            pages = await self.engine.run(
                open_pages, self.engine, guard, max_pages=1, width=width, height=height
            )
            self._pages, self._size = pages, (width, height)
        elif self._size != (width, height):
            await self.engine.run(_resize, pages, width, height)
            self._size = (width, height)
        return pages

    def _require(self) -> PageSet:
        if self._pages is None or self.shown is None:
            raise OpError(ErrorCode.CANVAS_NOT_PRESENTED, "main", scope=("canvas",))
        return self._pages

    async def hide(self) -> None:
        async with self._lock:
            pages, self._pages, self.shown = self._pages, None, None
            if pages is not None:
                with trio.CancelScope(shield=True):
                    await self.engine.run(close_pages, self.engine, pages)

    async def navigate(self, url: str, timeout_ms: float) -> str:
        async with self._lock:
            pages = self._require()
            with refusals_on(pages.lane, scope="canvas", url=url):
                self.shown = await self.engine.run(_goto, pages, url, timeout_ms)
            return self.shown

    async def evaluate(self, expression: str, timeout_ms: float, max_bytes: int) -> str:
        async with self._lock:
            pages = self._require()
            with trio.move_on_after(timeout_ms / 1000) as scope:
                value = await self.engine.run(_evaluate, pages, expression)
            if scope.cancelled_caught:
                # The page's main thread may still spin: a fresh page next time.
                await self._drop()
                raise OpError(ErrorCode.EVAL_FAILED, f"timeout {timeout_ms:.0f} ms")
            if len(value.encode("utf-8")) > max_bytes:
                raise OpError(ErrorCode.TOO_LARGE, f"eval result over {max_bytes} bytes")
            return value

    async def _drop(self) -> None:
        pages, self._pages, self.shown = self._pages, None, None
        if pages is not None:
            with trio.CancelScope(shield=True):
                await self.engine.run(close_pages, self.engine, pages)

    async def snapshot(self, timeout_ms: float) -> bytes:
        async with self._lock:
            pages = self._require()
            data: bytes = await self.engine.run(_screenshot, pages, timeout_ms)
            return data

    async def aclose(self) -> None:
        await self.hide()


async def _set_content(pages: PageSet, html: str, timeout_ms: float) -> None:
    await pages.page.set_content(html, wait_until="load", timeout=timeout_ms)


async def _goto(pages: PageSet, url: str, timeout_ms: float) -> str:
    await pages.page.goto(url, wait_until="load", timeout=timeout_ms)
    return str(pages.page.url)


async def _resize(pages: PageSet, width: int, height: int) -> None:
    await pages.page.set_viewport_size({"width": width, "height": height})


async def _evaluate(pages: PageSet, expression: str) -> str:
    from .pages import ActionError

    try:
        value = await pages.page.evaluate(expression)
    except Exception as exc:
        message = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise ActionError(ErrorCode.EVAL_FAILED, message) from exc
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise ActionError(ErrorCode.EVAL_FAILED, "result is not JSON") from exc


async def _screenshot(pages: PageSet, timeout_ms: float) -> bytes:
    data: bytes = await pages.page.screenshot(type="png", timeout=timeout_ms)
    return data
