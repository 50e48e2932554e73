"""The browser specialist's services: one engine, its guard proxy, sessions, media, canvases.

``open_browser_services`` is the shape the composition plan's ``open_services`` takes: it
serves the proxy in its own nursery (its upstream connections through ``web.proxy`` when set),
makes the engine (Chromium itself starts on first use, trusting what ``web.tls`` adds:
trust.py),
runs the idle-session reaper, and on exit closes every session, canvas and browser and reaps
every Chromium process. ``open_runtime`` is the proxy and engine alone, which tests share
across a module.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import trio

from csp_web.config import Config, TlsConfig, egress_proxy, shared_section
from csp_web.core.api.ports import FileStore, Port
from csp_web.infra.media import MediaStore
from csp_web.net import GuardConfig, Resolver, parse_proxy
from csp_web.net.guard_proxy import GuardProxy
from csp_web.net.proxy_peers import owned_by_tree
from specialists.browser.config import BrowserConfig, browser_section

from .canvas import CanvasClaims, CanvasNode, LocalCanvas
from .engine import BrowserEngine
from .sessions import OneShots, SessionTable
from .states import StateStore
from .trust import build_home


@dataclass
class Runtime:
    """A running guard proxy and the engine whose Chromium uses it."""

    engine: BrowserEngine
    proxy: GuardProxy
    canvas_engine: BrowserEngine | None = None  # a headed one, when the canvas has a display


@dataclass
class BrowserServices:
    """What the browser and canvas ops use: the browser specialist's typed services."""

    runtime: Runtime
    sessions: SessionTable
    media: MediaStore
    guard: Callable[[], GuardConfig]
    canvas: dict[str, CanvasNode] = field(default_factory=dict)
    oneshots: OneShots = field(default_factory=OneShots)
    canvas_claims: CanvasClaims = field(default_factory=CanvasClaims)
    # Web's fileKey store while the web specialist is open (csp_web.core.api.ports).
    files: Port[FileStore] = field(default_factory=lambda: Port("files"))
    # Saved logins (save_state), encrypted under <state_dir>/browser/states.
    states: StateStore | None = None

    @property
    def engine(self) -> BrowserEngine:
        return self.runtime.engine

    @property
    def proxy(self) -> GuardProxy:
        return self.runtime.proxy

    def stats_line(self) -> str:
        """The BROWSER line of ``REQ:stats``."""
        proxy = self.proxy.stats
        return (
            f"{self.engine.status()} sessions:{len(self.sessions.sessions)}"
            f" idle_closed:{self.sessions.closed_idle} proxied:{proxy.tunnels + proxy.forwarded}"
            f" refused:{proxy.refused} foreign_peers:{proxy.foreign_peers}"
            f" lanes:{proxy.lanes_open}"
        )


def make_proxy(
    guard: Callable[[], GuardConfig], resolver: Resolver | None, *, proxy: str | None = None
) -> GuardProxy:
    """A proxy that serves only Chromium (the engine's driver tree); its engine is bound
    once made, through ``bind_engine``. Every Chromium connection, a render's and the browser
    ops' alike, goes out through ``web.proxy`` when set: a company that requires a proxy
    requires it of the browser too."""
    upstream = parse_proxy(proxy) if proxy is not None else None
    return GuardProxy(guard, resolver=resolver, upstream=upstream)


def bind_engine(proxy: GuardProxy, *engines: BrowserEngine) -> None:
    """Admit only sockets held under the engines' Playwright drivers (their Chromiums)."""
    checks = [owned_by_tree(_driver_of(engine)) for engine in engines]

    def check(peer: tuple[str, int], local: tuple[str, int]) -> bool:
        return any(one(peer, local) for one in checks)

    proxy.peer_check = check


def _driver_of(engine: BrowserEngine) -> Callable[[], int | None]:
    return lambda: engine.driver_pid


def make_engines(config: BrowserConfig, proxy: GuardProxy, *, home: str | None = None) -> Runtime:
    """The engine (and the canvas's headed one), their Chromium run with ``home`` as HOME
    when given (its NSS database holds web.tls's trust: trust.py)."""
    base = None
    if home is not None:
        # X clients find their cookie under HOME unless told: keep the headed canvas's.
        xauthority = os.environ.get("XAUTHORITY") or os.path.expanduser("~/.Xauthority")
        base = {**os.environ, "HOME": home, "XAUTHORITY": xauthority}
    engine = BrowserEngine(config, proxy=proxy, env=base)
    canvas_engine = None
    if config.canvas.display is not None:
        env = {**(base or os.environ), "DISPLAY": config.canvas.display}
        canvas_engine = BrowserEngine(config, proxy=proxy, headless=False, env=env)
    bind_engine(proxy, *(e for e in (engine, canvas_engine) if e is not None))
    return Runtime(engine, proxy, canvas_engine)


@asynccontextmanager
async def open_runtime(
    config: BrowserConfig, guard: Callable[[], GuardConfig], *, resolver: Resolver | None = None
) -> AsyncIterator[Runtime]:
    """The proxy served in this task's nursery and the engine(s); all closed on exit."""
    proxy = make_proxy(guard, resolver)
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.serve)
        runtime = make_engines(config, proxy)
        try:
            yield runtime
        finally:
            await close_runtime(runtime)
            nursery.cancel_scope.cancel()


async def close_runtime(runtime: Runtime) -> None:
    for engine in (runtime.engine, runtime.canvas_engine):
        if engine is not None:
            await engine.aclose()


@asynccontextmanager
async def open_browser_services(
    config: Config,
    *,
    guard: Callable[[], GuardConfig] | None = None,
    resolver: Resolver | None = None,
    runtime: Runtime | None = None,
) -> AsyncIterator[BrowserServices]:
    """The services, over ``runtime`` when given (a test's shared one, left open) or a new
    one. ``guard`` returns the guard settings in effect (default: the web's ``web.guard``)."""
    current_guard = guard or (lambda: shared_section(config, GuardConfig))
    browser = browser_section(config)
    try:
        tls = shared_section(config, TlsConfig)
        async with _chromium_home(tls) as home, trio.open_nursery() as nursery:
            owned = runtime is None
            if runtime is None:
                runtime = await _start_runtime(
                    nursery, browser, current_guard, resolver, proxy=egress_proxy(config), home=home
                )
            services = _services(config, runtime, current_guard)
            await nursery.start(services.sessions.serve_reaper, lambda: browser.session_idle_s)
            try:
                yield services
            finally:
                with trio.CancelScope(shield=True):
                    await _close_services(services)
                    if owned:
                        await close_runtime(runtime)
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The proxy and reaper raise nothing but Cancelled: a group can only wrap the body's
        # error, which must leave as itself (as open_mcp_host does).
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


@asynccontextmanager
async def _chromium_home(tls: TlsConfig) -> AsyncIterator[str | None]:
    """A private HOME whose NSS database trusts what ``tls`` adds (trust.py), for the
    Chromium started within; removed on exit. None when ``tls`` adds nothing."""
    with tempfile.TemporaryDirectory(prefix="csp-chromium-home-") as folder:
        yield await trio.to_thread.run_sync(build_home, tls, folder)


async def _start_runtime(
    nursery: trio.Nursery,
    config: BrowserConfig,
    guard: Callable[[], GuardConfig],
    resolver: Resolver | None,
    *,
    proxy: str | None,
    home: str | None,
) -> Runtime:
    guard_proxy = make_proxy(guard, resolver, proxy=proxy)
    await nursery.start(guard_proxy.serve)
    return make_engines(config, guard_proxy, home=home)


def _services(
    config: Config, runtime: Runtime, guard: Callable[[], GuardConfig]
) -> BrowserServices:
    browser = browser_section(config)
    media = MediaStore(
        # A folder of its own: node captures (nodes.media_dir, <state_dir>/media) are not
        # the browser's to trim.
        os.path.join(config.daemon.state_dir, "media", "browser"),
        max_bytes=browser.media_max_bytes,
        max_age_s=browser.media_max_age_s,
    )
    canvas_engine = runtime.canvas_engine or runtime.engine
    return BrowserServices(
        runtime,
        SessionTable(runtime.engine),
        media,
        guard,
        {"main": LocalCanvas(canvas_engine, guard)},
        states=StateStore(os.path.join(config.daemon.state_dir, "browser", "states")),
    )


async def _close_services(services: BrowserServices) -> None:
    await services.sessions.aclose()
    for node in services.canvas.values():
        if isinstance(node, LocalCanvas):
            await node.aclose()
