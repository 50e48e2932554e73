"""The browser specialist: the ``browser`` and ``canvas`` ops on a real Chromium (Playwright),
every request through the fetch guard. See docs/browser.md."""

from __future__ import annotations

from csp_web.registry import Op


def browser_ops() -> list[Op]:
    """The browser specialist's ops."""
    from . import ops_browser, ops_canvas

    return [*ops_browser.OPS, *ops_canvas.OPS]
