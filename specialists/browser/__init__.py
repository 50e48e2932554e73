"""The browser specialist: the ``browser`` and ``canvas`` ops on a real Chromium (Playwright),
every request through the fetch guard. See docs/browser.md.

``BROWSER`` is the value the composition root (csp_web.app.catalog) lists. Its ops run in the
tool pool (IN:TOOL); the guard follows ``web.guard`` reloads (the web specialist declares
that path reloadable; this one applies it to its proxy too).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from csp_web.config import BrowserConfig, Config, GuardConfig
from csp_web.core.api.ops import Op
from csp_web.core.api.ports import StatsLine
from csp_web.core.api.specialist import Commit, Specialist

from . import ops_browser, ops_canvas
from .services import BrowserServices, open_browser_services

OPS: tuple[Op[BrowserServices], ...] = (*ops_browser.OPS, *ops_canvas.OPS)


class GuardSetting:
    """The guard settings in effect for the proxy: one reference a reload swaps."""

    def __init__(self, config: GuardConfig) -> None:
        self.config = config

    def __call__(self) -> GuardConfig:
        return self.config


@asynccontextmanager
async def _open(section: BrowserConfig, config: Config) -> AsyncIterator[BrowserServices]:
    async with open_browser_services(config, guard=GuardSetting(config.web.guard)) as services:
        yield services


def _reload(services: BrowserServices, section: BrowserConfig, config: Config) -> Commit:
    guard, new = services.guard, config.web.guard
    assert isinstance(guard, GuardSetting)

    def commit() -> None:
        guard.config = new

    return commit


def _stats_lines(services: BrowserServices) -> Mapping[str, StatsLine]:
    return {"BROWSER": services.stats_line}  # read at each REQ:stats


BROWSER: Specialist[BrowserConfig, BrowserServices] = Specialist(
    name="browser",
    ops=OPS,
    slots=lambda slots: slots.tool,
    section=lambda config: config.tool.browser,
    reloadable=(),
    restart_only=("tool.browser",),
    open_services=_open,
    background=lambda services: (),
    stats_lines=_stats_lines,
    storage=lambda services: {"media": lambda: services.media.storage_full},
    reload=_reload,
)


def browser_ops() -> list[Op[BrowserServices]]:
    """The browser specialist's ops (tests and the ops reference)."""
    return list(OPS)
