"""Canvas nodes: a page a node shows. Node ``main`` is this host's own Chromium page.

``CanvasNode`` is what the canvas op drives; a remote node (the node issue) is another class
with the same five methods, added to ``BrowserServices.canvas`` under its name. Every call may
raise OpError with a catalogue code. ``CanvasClaims`` says whose each node's canvas is: the
uid that presented it, until it hides it or leaves it unused for ``canvas_idle_s``.

A canvas lost without its owner's hide (an action that ran out of time dropped its page, which
may still spin; its renderer crashed) is told once, as a browser session's loss is:
``session_lost:<node>``, to its owner's next action but a present or hide (which start anew).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio

from csp_web.core.api.errors import OpError
from csp_web.net import GuardConfig
from protocol import ErrorCode

from .engine import BrowserEngine
from .errors import refusals_on, timed_out
from .pages import PageSet, close_pages, loading, open_pages

_SCOPE = ("canvas",)


def _told(exc: BaseException) -> bool:
    """Whether ``exc`` is itself the news that the canvas was lost (``_require``'s)."""
    return isinstance(exc, OpError) and exc.code is ErrorCode.SESSION_LOST


class CanvasNode(Protocol):
    """One node's canvas. ``url`` or ``html`` (exactly one) is what ``present`` shows; inline
    ``html`` runs in a fresh context with an opaque origin, its script only if ``script``."""

    @property
    def shown(self) -> str | None: ...

    async def present(
        self,
        *,
        url: str | None,
        html: str | None,
        width: int,
        height: int,
        timeout_ms: float,
        script: bool,
    ) -> str: ...

    async def hide(self) -> None: ...

    async def navigate(self, url: str, timeout_ms: float) -> str: ...

    async def evaluate(self, expression: str, timeout_ms: float, max_bytes: int) -> str: ...

    async def snapshot(self, timeout_ms: float) -> bytes: ...


@dataclass
class Claim:
    owner: str
    last_used: float


@dataclass
class CanvasClaims:
    """Whose each node's canvas is. ``clock`` is trio's by default; tests inject their own."""

    clock: Callable[[], float] = trio.current_time
    claims: dict[str, Claim] = field(default_factory=dict)
    # By node: the owner whose canvas a failed action lost, not yet told (one per node: a
    # node shows one canvas, and a new one makes the loss moot).
    untold: dict[str, str] = field(default_factory=dict)
    _locks: dict[str, trio.Lock] = field(default_factory=dict)

    @asynccontextmanager
    async def acting(
        self, name: str, node: CanvasNode, owner: str, idle_s: float, *, anew: bool = False
    ) -> AsyncIterator[None]:
        """Hold node ``name`` for one action of ``owner``. Raises OpError(session_lost) once
        when an action of ``owner`` failed and lost the canvas it showed, unless this action
        starts ``anew`` (present, hide); OpError(permission_denied) while another owner's
        canvas is shown and used within ``idle_s``; an older one is hidden first (its page
        closed), so the newcomer starts from an empty canvas. After the action the canvas is
        ``owner``'s if it shows something, no one's if not."""
        lock = self._locks.setdefault(name, trio.Lock())
        async with lock:
            self._tell_lost(name, node, owner, anew=anew)
            await self._admit(name, node, owner, idle_s)
            shown = node.shown is not None
            try:
                yield
            except BaseException as exc:
                if shown and node.shown is None and not _told(exc):
                    self.untold[name] = owner  # its reply names its own failure, not the loss
                raise
            finally:
                if node.shown is None:
                    self.claims.pop(name, None)
                else:
                    self.claims[name] = Claim(owner, self.clock())
                    self.untold.pop(name, None)

    def _tell_lost(self, name: str, node: CanvasNode, owner: str, *, anew: bool) -> None:
        if self.untold.get(name) != owner:
            return
        del self.untold[name]
        if node.shown is None and not anew:
            raise OpError(ErrorCode.SESSION_LOST, name, scope=_SCOPE)

    async def _admit(self, name: str, node: CanvasNode, owner: str, idle_s: float) -> None:
        claim = self.claims.get(name)
        if claim is None or claim.owner == owner or node.shown is None:
            return
        if self.clock() - claim.last_used < idle_s:
            raise OpError(
                ErrorCode.PERMISSION_DENIED, f"canvas {name} belongs to another peer", scope=_SCOPE
            )
        await node.hide()
        del self.claims[name]


class LocalCanvas:
    """Node ``main``: one context and page in ``engine`` (headed when it has a display).
    Inline HTML gets a context of its own, dropped by the next present or navigate."""

    def __init__(self, engine: BrowserEngine, guard: Any) -> None:
        self.engine = engine
        self._guard = guard  # Callable[[], GuardConfig]
        self._pages: PageSet | None = None
        self._size: tuple[int, int] | None = None
        self._inline = False  # the pages show inline HTML (opaque origin, maybe no script)
        self.shown: str | None = None
        self._lock = trio.Lock()

    async def present(
        self,
        *,
        url: str | None,
        html: str | None,
        width: int,
        height: int,
        timeout_ms: float,
        script: bool,
    ) -> str:
        until = trio.current_time() + timeout_ms / 1000
        async with self._lock, self._dropping_when_hung():
            if html is not None:
                await self._drop()  # no earlier page's origin, cookies or storage
                pages = await self._open(width, height, script=script)
                self._inline = True
                await self.engine.run(_set_content, pages, html, _left_ms(until))
                self.shown = "inline"
                return self.shown
            assert url is not None
            return await self._goto(await self._open_for_urls(width, height), url, until)

    async def _goto(self, pages: PageSet, url: str, until: float) -> str:
        with refusals_on(pages.lane, scope="canvas", url=url):
            self.shown = await self.engine.run(_goto, pages, url, _left_ms(until))
        return self.shown

    async def _open_for_urls(self, width: int, height: int) -> PageSet:
        """The canvas's pages, unless they hold inline HTML (then fresh ones, with script)."""
        if self._inline:
            await self._drop()
        return await self._open(width, height, script=True)

    async def _open(self, width: int, height: int, *, script: bool) -> PageSet:
        pages = self._pages
        if pages is not None and pages.lost_reason():
            await self._drop()
            pages = None
        if pages is None:
            guard: GuardConfig = self._guard()
            pages = await self.engine.run(
                open_pages,
                self.engine,
                guard,
                max_pages=1,
                width=width,
                height=height,
                script=script,
            )
            self._pages, self._size, self._inline = pages, (width, height), False
        elif self._size != (width, height):
            await self.engine.run(_resize, pages, width, height)
            self._size = (width, height)
        return pages

    async def _require(self) -> PageSet:
        """The pages shown; session_lost when they showed something and went since (their
        renderer crashed, their context closed: told here, once), canvas_not_presented when
        none are."""
        if self._pages is not None and self._pages.lost_reason():
            lost = self.shown is not None
            await self._drop()
            if lost:
                raise OpError(ErrorCode.SESSION_LOST, "main", scope=_SCOPE)
        if self._pages is None or self.shown is None:
            raise OpError(ErrorCode.CANVAS_NOT_PRESENTED, "main", scope=_SCOPE)
        return self._pages

    @asynccontextmanager
    async def _dropping_when_hung(self) -> AsyncIterator[None]:
        """An action that ran out of time drops the page: its script may still spin."""
        try:
            yield
        except BaseException as exc:
            if timed_out(exc):
                await self._drop()
            raise

    async def hide(self) -> None:
        async with self._lock:
            await self._drop()

    async def navigate(self, url: str, timeout_ms: float) -> str:
        until = trio.current_time() + timeout_ms / 1000
        async with self._lock, self._dropping_when_hung():
            pages = await self._require()
            if self._inline:
                assert self._size is not None  # set whenever pages are
                pages = await self._open_for_urls(*self._size)
            return await self._goto(pages, url, until)

    async def evaluate(self, expression: str, timeout_ms: float, max_bytes: int) -> str:
        async with self._lock:
            pages = await self._require()
            with trio.move_on_after(timeout_ms / 1000) as scope:
                value = await self.engine.run(_evaluate, pages, expression)
            if scope.cancelled_caught:
                # The page's main thread may still spin: a fresh page next time.
                await self._drop()
                raise OpError(ErrorCode.EVAL_FAILED, f"timeout {timeout_ms:.0f} ms", scope=_SCOPE)
            if len(value.encode("utf-8")) > max_bytes:
                detail = f"eval result over {max_bytes} bytes"
                raise OpError(ErrorCode.TOO_LARGE, detail, scope=_SCOPE)
            return value

    async def _drop(self) -> None:
        pages, self._pages, self.shown, self._inline = self._pages, None, None, False
        if pages is not None:
            with trio.CancelScope(shield=True):
                await self.engine.run(close_pages, self.engine, pages)

    async def snapshot(self, timeout_ms: float) -> bytes:
        async with self._lock, self._dropping_when_hung():
            pages = await self._require()
            data: bytes = await self.engine.run(_screenshot, pages, timeout_ms)
            return data

    async def aclose(self) -> None:
        await self.hide()


def _left_ms(until: float) -> float:
    """Milliseconds from now to trio time ``until`` (at least 1): what the time spent
    opening a context leaves a page load, so that its own timeout comes first."""
    return max(1.0, (until - trio.current_time()) * 1000)


async def _set_content(pages: PageSet, html: str, timeout_ms: float) -> None:
    with loading():  # an inline page loads too: its script may hold the load event
        await pages.page.set_content(html, wait_until="load", timeout=timeout_ms)


async def _goto(pages: PageSet, url: str, timeout_ms: float) -> str:
    with loading():
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
