"""One Chromium, driven by Playwright's asyncio API from one dedicated thread, used from trio.

Playwright's async API runs only on asyncio. ``BrowserEngine`` owns a thread running one
asyncio loop; every Playwright object lives and is touched only there. Trio code hands it a
coroutine function (``await engine.run(fn, *args)``); the result (or exception) comes back to
the calling trio task. Cancelling that task (its deadline) cancels the asyncio task too, and
the trio side returns only once the asyncio side has finished, so nothing keeps running on a
page the caller believes idle.

The browser starts on first use, is restarted after it crashes (the next use launches a new
one), and is recycled every ``recycle_after_pages`` pages: new contexts go to a fresh browser
while the old one closes once its last context closes. ``aclose`` closes every browser and
the Playwright driver, leaving no process behind.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

import trio

from csp_web.net.guard_proxy import GuardProxy, Lane
from specialists.browser.config import BrowserConfig

log = logging.getLogger(__name__)
T = TypeVar("T")
P = ParamSpec("P")
_CANCEL_WAIT_S = 10.0  # how long a cancelled caller waits for the asyncio side to unwind


class BrowserUnavailable(Exception):
    """Chromium cannot be started or died under an action; ``reason`` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _BrowserGone(BrowserUnavailable):
    """The browser a context was asked of had already closed."""


def _closed(exc: Exception, handle: BrowserHandle) -> bool:
    """Whether ``exc`` from ``handle``'s browser says that browser is gone: Playwright may
    report the target closed before it flags the browser disconnected."""
    return not handle.browser.is_connected() or type(exc).__name__ == "TargetClosedError"


def find_executable(config: BrowserConfig) -> str:
    """The configured Chromium, else the first of chromium, chromium-browser on PATH.
    Raises BrowserUnavailable naming what was looked for."""
    names = (config.executable,) if config.executable else ("chromium", "chromium-browser")
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    raise BrowserUnavailable(f"no Chromium: {' or '.join(names)} not found")


def launch_args(
    *, proxy_url: str, trusted_spki: tuple[str, ...], sandbox: bool, js_heap_mb: int
) -> list[str]:
    """Chromium's command line: every request through the guard's proxy, side doors shut,
    each renderer's JavaScript heap capped at ``js_heap_mb`` (past it the renderer crashes
    alone: the page's action answers page_crashed, the browser and other pages stay up)."""
    args = [
        f"--proxy-server={proxy_url}",
        # Chromium sends localhost and loopback directly unless told otherwise.
        "--proxy-bypass-list=<-loopback>",
        "--disable-quic",  # UDP would not go through an HTTP proxy
        "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
        "--webrtc-ip-handling-policy=disable_non_proxied_udp",
        "--dns-prefetch-disable",
        # No --disable-features here: Chromium keeps only the last one, and Playwright's own
        # (which stops Google background fetches) must stay; what it would add (prediction,
        # DNS over HTTPS) goes through the proxy anyway.
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-domain-reliability",
        "--disable-sync",
        "--disable-extensions",
        "--no-pings",
        "--no-first-run",
        "--disable-file-system",
        f"--js-flags=--max-old-space-size={js_heap_mb}",
    ]
    if trusted_spki:
        args.append(f"--ignore-certificate-errors-spki-list={','.join(trusted_spki)}")
    if not sandbox:
        # Chromium refuses to run as root with its sandbox; stats says so (BROWSER line).
        args.append("--no-sandbox")
    return args


def sandboxed() -> bool:
    """Whether Chromium keeps its own sandbox: always, unless the daemon runs as root."""
    return os.geteuid() != 0


@dataclass
class BrowserHandle:
    """One launched browser (asyncio side); ``contexts`` counts those still open on it."""

    browser: Any
    generation: int
    pages: int = 0
    contexts: int = 0
    retired: bool = False
    connected: bool = True


@dataclass(frozen=True)
class Opened:
    """One BrowserContext, the browser it is on, and its own lane into the guard proxy."""

    context: Any
    handle: BrowserHandle
    lane: Lane


@dataclass
class EngineStats:
    """What ``REQ:stats`` shows of the engine."""

    launches: int = 0
    crashes: int = 0
    recycles: int = 0
    pages: int = 0
    last_error: str | None = None
    extra: dict[str, int] = field(default_factory=dict)


class BrowserEngine:
    """The Playwright thread and the browsers it launched. Thread-safe ``run``; see module."""

    def __init__(
        self,
        config: BrowserConfig,
        *,
        proxy: GuardProxy,
        headless: bool = True,
        env: dict[str, str] | None = None,
    ) -> None:
        self.config = config
        self.proxy = proxy
        self.headless = headless
        self.env = env
        self.sandbox = sandboxed()
        self.stats = EngineStats()
        self.driver_pid: int | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="browser", daemon=True)
        self._thread.start()
        self._playwright: Any = None
        self._current: BrowserHandle | None = None
        self._handles: list[BrowserHandle] = []
        self._lock: asyncio.Lock | None = None
        self._closed = False
        # Where Chromium writes downloads while they run (0700, removed at close): each file
        # is read into the fileKey store and removed after its action (downloads.py).
        self.downloads_dir = tempfile.mkdtemp(prefix="csp-browser-downloads-")

    # ---- the bridge --------------------------------------------------------------------

    def submit(
        self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]:
        """Start ``fn(*args, **kwargs)`` on the engine's loop from any thread."""
        if self._closed:
            raise BrowserUnavailable("the browser engine is closed")
        return asyncio.run_coroutine_threadsafe(_call(fn, *args, **kwargs), self._loop)

    async def run(self, fn: Callable[..., Coroutine[Any, Any, T]], *args: Any, **kwargs: Any) -> T:
        """Run ``fn(*args, **kwargs)`` on the engine's loop; its result or exception comes
        back here.

        Cancellation of the calling trio task cancels the asyncio task, then waits (shielded,
        bounded) until that task has finished unwinding before re-raising."""
        if self._closed:
            raise BrowserUnavailable("the browser engine is closed")
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()
        holder: list[asyncio.Task[T]] = []

        def finished(_task: object) -> None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(done.set)

        def start() -> None:  # on the engine's loop; runs before any cancel() scheduled later
            task = self._loop.create_task(fn(*args, **kwargs))
            task.add_done_callback(finished)
            holder.append(task)

        def cancel() -> None:
            holder[0].cancel()

        self._loop.call_soon_threadsafe(start)
        try:
            await done.wait()
        except trio.Cancelled:
            self._loop.call_soon_threadsafe(cancel)
            with trio.CancelScope(shield=True), trio.move_on_after(_CANCEL_WAIT_S):
                await done.wait()
            raise
        return holder[0].result()

    # ---- browsers (engine thread only) -------------------------------------------------

    async def new_context(self, **options: Any) -> Opened:
        """A fresh BrowserContext on the current browser (launched or recycled as needed),
        whose every request goes through a lane of the guard proxy of its own: its refusals
        are kept where only this context's actions read them. A browser that turns out dead
        only here (it died before its disconnect reached us) is counted as crashed and a
        new one launched for this context, once; raises BrowserUnavailable past that."""
        handle = await self._browser()
        try:
            return await self._new_context_on(handle, options)
        except _BrowserGone:
            self._disconnected(handle)
        return await self._new_context_on(await self._browser(), options)

    async def _new_context_on(self, handle: BrowserHandle, options: dict[str, Any]) -> Opened:
        try:
            lane = self.proxy.open_lane()
        except OSError as exc:
            raise BrowserUnavailable(f"no guard proxy lane: {exc.strerror or exc}") from exc
        # The bypass list is explicit: loopback must go through the lane too, whatever
        # Playwright's environment says (PLAYWRIGHT_DISABLE_FORCED_CHROMIUM_PROXIED_LOOPBACK).
        proxy = {"server": lane.url, "bypass": "<-loopback>"}
        try:
            context = await handle.browser.new_context(proxy=proxy, **options)
        except BaseException as exc:
            self.proxy.close_lane(lane)
            if isinstance(exc, Exception) and _closed(exc, handle):
                raise _BrowserGone("the browser closed") from exc
            raise
        handle.contexts += 1
        context.on("page", lambda _page: self._count_page(handle))
        return Opened(context, handle, lane)

    def _count_page(self, handle: BrowserHandle) -> None:
        handle.pages += 1
        self.stats.pages += 1
        if handle.pages >= self.config.recycle_after_pages and not handle.retired:
            handle.retired = True
            self.stats.recycles += 1
            if self._current is handle:
                self._current = None

    async def close_context(self, opened: Opened) -> None:
        """Close the context, then its lane; the last context of a retired browser closes
        the browser too."""
        handle = opened.handle
        try:
            with contextlib.suppress(Exception):
                await opened.context.close()
        finally:
            self.proxy.close_lane(opened.lane)
        handle.contexts -= 1
        if handle.retired and handle.contexts <= 0:
            await self._close_handle(handle)

    async def _browser(self) -> BrowserHandle:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            current = self._current
            if current is not None and current.connected and not current.retired:
                return current
            return await self._launch()

    async def _launch(self) -> BrowserHandle:
        if self._playwright is None:
            from playwright.async_api import async_playwright

            before = _drivers()
            self._playwright = await async_playwright().start()
            self.driver_pid = max(_drivers() - before, default=None)
        executable = find_executable(self.config)
        args = launch_args(
            proxy_url=self.proxy.url,
            trusted_spki=self.config.trusted_spki,
            sandbox=self.sandbox,
            js_heap_mb=self.config.max_js_heap_mb,
        )
        try:
            browser = await self._playwright.chromium.launch(
                executable_path=executable,
                headless=self.headless,
                args=args,
                chromium_sandbox=self.sandbox,
                timeout=self.config.launch_timeout_s * 1000,
                env=self.env,
                downloads_path=self.downloads_dir,
                handle_sigint=False,
                handle_sigterm=False,
                handle_sighup=False,
                # Playwright turns the popup blocker off; pages may not open windows at will.
                ignore_default_args=["--disable-popup-blocking"],
            )
        except Exception as exc:
            self.stats.last_error = str(exc).splitlines()[0][:200]
            raise BrowserUnavailable(f"Chromium did not start: {self.stats.last_error}") from exc
        self.stats.launches += 1
        handle = BrowserHandle(browser, self.stats.launches)
        browser.on("disconnected", lambda _b: self._disconnected(handle))
        self._handles.append(handle)
        self._current = handle
        log.info("browser %d launched: %s %s", handle.generation, executable, browser.version)
        return handle

    def _disconnected(self, handle: BrowserHandle) -> None:
        if handle.connected and not handle.retired and not self._closed:
            self.stats.crashes += 1
            log.warning(
                "browser %d disconnected; the next action starts another", handle.generation
            )
        handle.connected = False
        if self._current is handle:
            self._current = None
        if handle in self._handles:
            self._handles.remove(handle)

    async def _close_handle(self, handle: BrowserHandle) -> None:
        handle.retired = True
        if handle in self._handles:
            self._handles.remove(handle)
        with contextlib.suppress(Exception):
            await handle.browser.close()

    async def _shutdown(self) -> None:
        for handle in list(self._handles):
            await self._close_handle(handle)
        self._current = None
        if self._playwright is not None:
            with contextlib.suppress(Exception):
                await self._playwright.stop()
            self._playwright = None

    def close_sync(self) -> None:
        """Close every browser and the driver, then stop the thread (blocking)."""
        if self._closed:
            return
        with contextlib.suppress(Exception):
            self.submit(self._shutdown).result(timeout=30)
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()
        shutil.rmtree(self.downloads_dir, ignore_errors=True)

    async def aclose(self) -> None:
        """``close_sync`` in a worker thread, shielded: it runs to the end at shutdown."""
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self.close_sync)

    def status(self) -> str:
        """The BROWSER line of ``REQ:stats``."""
        live = sum(1 for handle in self._handles if handle.connected)
        stats = self.stats
        return (
            f"browsers:{live} launches:{stats.launches} crashes:{stats.crashes}"
            f" recycles:{stats.recycles} pages:{stats.pages}"
            f" sandbox:{'on' if self.sandbox else 'off(root)'}"
        )


async def _call(fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
    return await fn(*args, **kwargs)


def _drivers() -> set[int]:
    """This process's Playwright driver children: every Chromium one launches is its
    descendant, which is how the proxy knows its peers (``peers.owned_by_tree``)."""
    found: set[int] = set()
    pid = os.getpid()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as children:
                kids = [int(kid) for kid in children.read().split()]
        except OSError:
            continue
        for kid in kids:
            try:
                with open(f"/proc/{kid}/cmdline", "rb") as cmdline:
                    if b"playwright" in cmdline.read():
                        found.add(kid)
            except OSError:
                continue
    return found
