"""What every browser action shares: its page (a session's or a fresh one), its time and
the element it names.

An action module (``ops_browser`` and the ``actions_*`` modules beside it) is a table of
handlers, ``HANDLERS: dict[str, Handler]``, with its fields and reply fields; ``ops_browser``
joins the tables into the one ``browser`` op. A handler reaches its page only through
``on_pages`` and an element only through ``element_target`` and ``pages.locate``, so the
guard's lane, the session's owner and the element rules hold for every action.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

import trio

from csp_web.core.api import budget
from csp_web.core.api.context import OpContext
from csp_web.core.api.deadlines import work_seconds
from csp_web.core.api.errors import OpError
from csp_web.core.api.fields import Params
from csp_web.core.api.replies import Result
from csp_web.net import GuardConfig, check_url
from protocol import ErrorCode
from specialists.browser.config import BrowserConfig, browser_section

from . import downloads as download_ops
from . import pages as page_ops
from .downloads import Downloads
from .errors import refusals_on
from .pages import PageSet, Target
from .refs import LABEL
from .services import BrowserServices
from .sessions import owner_of

T = TypeVar("T")
SCOPE = ("browser",)
_DEFAULT_WORK_S = 30.0  # without a task deadline (never in the daemon: it always sets one)

Handler = Callable[[BrowserServices, OpContext, Params], Awaitable[Result]]
Handlers = Mapping[str, Handler]


def check_selector(selector: str) -> str:
    """``css:<selector>`` or ``xpath:<expression>``, else invalid_field."""
    kind, sep, expression = selector.partition(":")
    if not sep or kind not in ("css", "xpath") or not expression.strip():
        raise OpError(ErrorCode.INVALID_FIELD, "SELECTOR must be css:<selector> or xpath:<path>")
    return selector


def require_field(params: Params, name: str) -> str:
    """The text of field ``name``; absent is missing_field."""
    value = params.opt_text(name)
    if value is None:
        raise OpError(ErrorCode.MISSING_FIELD, name, scope=SCOPE)
    return value


def element_target(params: Params) -> Target:
    """The element an action names: REF (``e12``, from a snapshot) or SELECTOR, exactly one;
    neither is missing_field, both invalid_field."""
    ref, selector = params.opt_text("REF"), params.opt_text("SELECTOR")
    if ref is not None and selector is not None:
        raise OpError(ErrorCode.INVALID_FIELD, "REF or SELECTOR, not both", scope=SCOPE)
    if ref is not None:
        if not LABEL.fullmatch(ref):
            raise OpError(ErrorCode.INVALID_FIELD, "REF must be e<n>, from a snapshot")
        return Target(ref=ref)
    if selector is None:
        raise OpError(ErrorCode.MISSING_FIELD, "REF|SELECTOR", scope=SCOPE)
    return Target(selector=check_selector(selector))


def optional_target(params: Params) -> Target | None:
    """The element an action may name (REF or SELECTOR, as ``element_target``), or None."""
    if params.opt_text("REF") is None and params.opt_text("SELECTOR") is None:
        return None
    return element_target(params)


def check_landing(url: str, services: BrowserServices) -> None:
    """The page must end on a URL the gate passes (no file:, chrome: or data: landing)."""
    if url != "about:blank":
        check_url(url, services.guard())


def timeout_ms() -> float:
    """What is left of the task's deadline, in ms, for one Playwright call."""
    return max(1.0, work_seconds(default_s=_DEFAULT_WORK_S) * 1000)


async def on_pages(
    services: BrowserServices,
    ctx: OpContext,
    session: str | None,
    step: Callable[[PageSet], Awaitable[T]],
    url: str | None = None,
) -> T:
    """Run ``step`` on the session's page, or on a fresh page closed after it (one of the
    peer's ``max_oneshot_per_peer``); a guard refusal it meets (loading ``url`` or anything
    after) is read from that context's lane."""
    config = browser_section(ctx.config)
    guard = services.guard()
    owner = owner_of(ctx.peer.uid, ctx.peer.connection)
    if session is not None:
        async with services.sessions.use(session, owner, config, guard) as held:
            budget.adopt(held)  # the session's budget, or this frame's for it from now on
            await budget.take("browser_actions")
            with refusals_on(held.pages.lane, scope="browser", url=url):
                return await _acting(services, config, held.pages, step)
    await budget.take("browser_actions")
    with services.oneshots.hold(owner, config.max_oneshot_per_peer):
        return await _on_fresh_pages(services, config, guard, step, url)


async def _acting(
    services: BrowserServices,
    config: BrowserConfig,
    pages: PageSet,
    step: Callable[[PageSet], Awaitable[T]],
) -> T:
    """Run ``step`` taking the downloads it starts, then tell them (download_ops.tell)."""
    pages.downloads.arm()
    try:
        result = await step(pages)
    finally:
        pages.downloads.disarm()
    if pages.downloads.pending():
        await _keep_downloads(services, config, pages)
    return result


async def _keep_downloads(services: BrowserServices, config: BrowserConfig, pages: PageSet) -> None:
    """Wait (within the deadline) for ``pages``' downloads, keep each finished one as a
    fileKey and tell them all; Playwright's files are removed whatever happens."""
    engine = services.engine
    landed, dropped = await engine.run(pages.downloads.settle, timeout_ms() / 1000)
    try:
        files = services.files.get()
        cap = config.max_download_bytes
        download_ops.tell(await download_ops.keep(files, landed, dropped, cap))
    finally:
        with trio.CancelScope(shield=True):
            await engine.run(pages.downloads.discard, landed)


async def _on_fresh_pages(
    services: BrowserServices,
    config: BrowserConfig,
    guard: GuardConfig,
    step: Callable[[PageSet], Awaitable[T]],
    url: str | None,
) -> T:
    """Run ``step`` on a context of its own, closed after it whatever happens."""
    engine = services.engine
    fresh = await engine.run(
        page_ops.open_pages,
        engine,
        guard,
        max_pages=config.max_pages_per_session,
        width=config.viewport_width,
        height=config.viewport_height,
        downloads=Downloads.under(config),
    )
    try:
        with refusals_on(fresh.lane, scope="browser", url=url):
            return await _acting(services, config, fresh, step)
    finally:
        with trio.CancelScope(shield=True):
            await engine.run(page_ops.close_pages, engine, fresh)
