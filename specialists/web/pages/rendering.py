"""The render path of a load (issue 24, "JavaScript pages"): an app shell read from the DOM
the browser's Chromium builds, through the ``Renderer`` port (csp_web.core.api.ports).

    page = await render_if_needed(services, page, mode="auto", ...)

The mode is RENDER's, else ``web.fetch.render``: ``never`` keeps the HTML as served;
``auto`` renders a page whose served HTML is an app shell (``appshell.py``); ``always``
renders every HTML page. Without a renderer in the port (no browser specialist, or Chromium
absent) ``auto`` acts as ``never`` and says so (``RENDER_REASON <tell>,render_unavailable``;
an empty page's ``empty_content:script_only,render_unavailable``), and ``always`` is refused
before any load (``mode_of``: ``browser_unavailable:render_always``).

When an ``auto`` render fails for the renderer's sake, not the page's (``FALLBACK_CODES``:
Chromium gone mid-run, its crash, the render's time-out, a busy browser), the page is answered
as served, saying so (``RENDER_REASON <tell>,render_failed:<why>``; an empty one
``empty_content:script_only,render_failed:<why>``); ``always`` answers the failure. A verdict
on the page itself (the guard's refusal of where it lands, a DOM past the cap) is answered as
such in either mode.

Concurrent renders of one URL are one render (``flights.py``, as downloads are): the followers
read the leader's page or its failure, unless that failure was its own time-out.

The render is the browser's: its guard proxy judges every request the page's scripts make
(a refusal of the page itself answers the guard's code), in a context of its own, within what
is left of the op's deadline. The rendered snapshot is cached like a page, in its own
namespace (``fetch_rendered``) keyed by the served page's final URL: a direct and a rendered
snapshot of one URL never stand for each other, and NO_CACHE and MAX_AGE apply to both.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time

import trio

from csp_web.core.api.errors import OpError
from csp_web.core.api.ports import Rendered, Renderer
from protocol import ErrorCode

from .emptiness import RENDERED_EMPTY, SCRIPT_ONLY, is_empty, is_placeholder
from .flights import follow, lead
from .loading import (
    Page,
    fresh,
    from_snapshot,
    html_page,
    normalise_url,
    op_deadline,
    to_snapshot,
)
from .services import PagesServices

log = logging.getLogger(__name__)

RENDER_NAMESPACE = "fetch_rendered"
MODES = ("auto", "never", "always")
OFF = "render_off"
UNAVAILABLE = "render_unavailable"
FAILED = "render_failed"
# A render's failures that say nothing of the page: RENDER auto then answers it as served.
FALLBACK_CODES = frozenset(
    {
        ErrorCode.BROWSER_UNAVAILABLE,
        ErrorCode.PAGE_CRASHED,
        ErrorCode.BUSY,
        ErrorCode.FETCH_FAILED,
        ErrorCode.ACTION_FAILED,
        ErrorCode.PROXY_FAILED,
    }
)
TIMEOUT = "render_timeout"


def mode_of(services: PagesServices, asked: str | None) -> str:
    """The render mode in effect: RENDER's when given, else ``web.fetch.render``; ``always``
    without a renderer raises OpError(BROWSER_UNAVAILABLE), before any load."""
    mode = asked if asked is not None else services.config.fetch.render
    if mode == "always" and services.renderer.get() is None:
        raise OpError(ErrorCode.BROWSER_UNAVAILABLE, "render_always")
    return mode


async def render_if_needed(
    services: PagesServices,
    page: Page,
    *,
    mode: str,
    no_cache: bool,
    deadline: float,
    max_age_s: float | None,
) -> Page:
    """``page`` as served, or the page its DOM makes once rendered (see the module's
    docstring). Raises the renderer's OpError: the guard's codes, TOO_LARGE (``rendered_dom``
    past ``guard.max_decoded_bytes``); with ``always`` also BUSY, BROWSER_UNAVAILABLE,
    PAGE_CRASHED, PROXY_FAILED, FETCH_FAILED (``render_timeout`` at ``deadline``,
    ``render_<net error>``), which ``auto`` answers with the page as served."""
    if page.kind != "html":
        return page
    reason = "always" if mode == "always" else page.shell
    if reason is None:
        return page
    renderer = services.renderer.get()
    if mode == "never" or renderer is None:
        return _unrendered(page, OFF if mode == "never" else UNAVAILABLE)
    key = normalise_url(page.url, services)
    if not no_cache:
        cached = fresh(from_snapshot(await services.cache.get(RENDER_NAMESPACE, key)), max_age_s)
        if cached is not None:
            return cached
    try:
        return await _render_once(services, renderer, page, reason, key, deadline)
    except OpError as exc:
        if mode == "always" or exc.code not in FALLBACK_CODES:
            raise
        why = exc.detail if exc.code is ErrorCode.FETCH_FAILED else str(exc.code)
        log.info("render of %s failed (%s:%s): answered as served", key, exc.code, exc.detail)
        return _unrendered(page, f"{FAILED}:{why}")


async def _render_once(
    services: PagesServices,
    renderer: Renderer,
    page: Page,
    reason: str,
    key: str,
    deadline: float,
) -> Page:
    """``page`` rendered and cached, or the outcome of the render of ``key`` in flight."""
    flights = services.render_flights
    while True:
        flight = flights.get(key)
        if flight is None:
            run = functools.partial(
                _render_and_store, services, renderer, page, reason, key, deadline
            )
            built = await lead(flights, key, run, shareable=_shareable)
        else:
            built = await follow(flight, deadline, OpError(ErrorCode.FETCH_FAILED, TIMEOUT))
        if built is not None:
            assert isinstance(built, Page)
            return built
        # The leader ended without an outcome for everyone: the next round leads or joins.


def _shareable(exc: OpError) -> bool:
    """Whether a render's failure holds for its followers too: not the leader's time-out."""
    return not (exc.code is ErrorCode.FETCH_FAILED and exc.detail == TIMEOUT)


async def _render_and_store(
    services: PagesServices,
    renderer: Renderer,
    page: Page,
    reason: str,
    key: str,
    deadline: float,
) -> Page:
    rendered = await _render(renderer, page.url, deadline)
    check_size(rendered.html, services.config.guard.max_decoded_bytes)
    build = functools.partial(rendered_page, page, rendered, reason, time.time())
    built = await services.pool.run(build, deadline=op_deadline(services), shape=Page)
    ttl_s = services.config.cache.fetch_ttl_s
    await services.cache.set(RENDER_NAMESPACE, key, to_snapshot(built), ttl_s=ttl_s)
    return built


def check_size(html: str, limit: int) -> None:
    """Raise OpError(TOO_LARGE, "rendered_dom") when the DOM's UTF-8 serialisation is over
    ``limit`` bytes: a script can build a page far past what a download may bring, and the
    extractor reads it all (the same cap as a decoded body, ``guard.max_decoded_bytes``)."""
    if len(html) > limit or len(html.encode("utf-8", "surrogatepass")) > limit:
        raise OpError(ErrorCode.TOO_LARGE, "rendered_dom")


def _unrendered(page: Page, why_not: str) -> Page:
    """``page`` as served, saying why it was not rendered (and so why it may be empty: no
    text, or only its title and a placeholder, ``emptiness.is_placeholder``)."""
    script_only = page.empty == SCRIPT_ONLY or (
        page.empty is None and is_placeholder(page.markdown)
    )
    empty = f"{SCRIPT_ONLY},{why_not}" if script_only else page.empty
    return dataclasses.replace(page, render_reason=f"{page.shell},{why_not}", empty=empty)


async def _render(renderer: Renderer, url: str, deadline: float) -> Rendered:
    """``url`` rendered within ``deadline``; the renderer's own time-out and a navigation that
    failed are fetch's ``fetch_failed:render_<why>`` (a certificate Chromium does not trust:
    ``render_tls_verify_failed``), an error status ``http_<status>``."""
    remaining = deadline - trio.current_time()
    if remaining > 0:
        with trio.move_on_at(deadline):
            try:
                rendered = await renderer.render(url, timeout_s=remaining)
            except OpError as exc:
                if exc.code is not ErrorCode.NAVIGATION_FAILED:
                    raise
                log.info("render of %s failed: %s", url, exc.detail)
                why = "tls_verify_failed" if exc.detail.startswith("err_cert_") else exc.detail
                raise OpError(ErrorCode.FETCH_FAILED, f"render_{why}") from exc
            if rendered.status is not None and rendered.status >= 400:
                raise OpError(ErrorCode.FETCH_FAILED, f"http_{rendered.status}")
            return rendered
    raise OpError(ErrorCode.FETCH_FAILED, TIMEOUT)


def rendered_page(served: Page, rendered: Rendered, reason: str, fetched_at: float) -> Page:
    """The snapshot of a rendered DOM: the views the extractor makes of it, the served
    page's redirects (and the browser's landing when it moved on), ``rendered`` with its
    ``reason``. Pure, CPU-bound; runs in the worker pool."""
    chain = served.redirect_chain
    if rendered.url != served.url:
        chain = (*chain, rendered.url)
    base = Page(
        url=rendered.url,
        status=rendered.status or served.status,
        content_type="text/html",
        kind="html",
        redirect_chain=chain,
        fetched_at=fetched_at,
        rendered=True,
        render_reason=reason,
    )
    page = html_page(base, rendered.html)
    page = dataclasses.replace(page, shell=None, title=page.title or rendered.title or None)
    if is_empty(page.markdown):
        page = dataclasses.replace(page, empty=RENDERED_EMPTY)
    return page
