"""The ``Renderer`` port (csp_web.core.api.ports) on the browser's Chromium: a page built by
script, rendered for another specialist (web's fetch).

Each render is a context of its own (no cookies, storage or cache shared), on its own lane of
the guard proxy, so every request it makes is judged as the browser op's are and a refusal is
answered with the guard's code. Renders are counted as one-shot actions of their own owner
(``render``, within ``max_oneshot_per_peer``), so they cannot take every context from the
browser op's peers, nor the reverse.
"""

from __future__ import annotations

import trio

from csp_web.core.api.ports import Rendered
from csp_web.net import check_url
from specialists.browser.config import BrowserConfig

from . import pages as page_ops
from .errors import refusals_on, translate
from .services import BrowserServices

OWNER = "render"  # the one-shot table's owner of every render, beside the peers' uids
_SCOPE = "browser"


class ChromiumRenderer:
    """Renders on ``services``' engine with ``config``'s viewport and caps."""

    def __init__(self, services: BrowserServices, config: BrowserConfig) -> None:
        self._services = services
        self._config = config

    async def render(self, url: str, *, timeout_s: float) -> Rendered:
        """See ``csp_web.core.api.ports.Renderer.render``."""
        guard = self._services.guard()
        target = check_url(url, guard).url
        with self._services.oneshots.hold(OWNER, self._config.max_oneshot_per_peer):
            try:
                rendered = await self._render_fresh(target, timeout_s)
            except Exception as exc:  # Chromium that cannot start (or stopped) included
                error = translate(exc, scope=_SCOPE, url=target)
                if error is exc:
                    raise
                raise error from exc
        if rendered.url != "about:blank":
            check_url(rendered.url, guard)  # the landing passes the gate too (no file: page)
        return rendered

    async def _render_fresh(self, url: str, timeout_s: float) -> Rendered:
        engine, config = self._services.engine, self._config
        fresh = await engine.run(
            page_ops.open_pages,
            engine,
            self._services.guard(),
            max_pages=config.max_pages_per_session,
            width=config.viewport_width,
            height=config.viewport_height,
        )
        timeout_ms = max(1.0, timeout_s * 1000)
        try:
            with refusals_on(fresh.lane, scope=_SCOPE, url=url):
                done = await engine.run(page_ops.navigate, fresh, url, timeout_ms)
                got = await engine.run(page_ops.extract, fresh, None, None, timeout_ms)
        finally:
            with trio.CancelScope(shield=True):
                await engine.run(page_ops.close_pages, engine, fresh)
        return Rendered(got.url, done.status, got.title, got.html or "")
