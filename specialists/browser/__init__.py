"""The browser specialist: the ``browser`` and ``canvas`` ops on a real Chromium (Playwright),
every request through the fetch guard. See docs/browser.md.

``BROWSER`` is the value the composition root (csp_web.app.catalog) lists; ``make_browser``
builds it with the daemon's ``Seams``: the browser provides the ``Renderer`` on its Chromium
(render.py) and consumes web's ``FileStore``. Its ops run in the tool pool (IN:TOOL); the
guard follows ``web.guard`` reloads, read by class (``shared_section``): the web specialist
declares that path reloadable; this one applies it to its proxy too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from csp_web.config import Config, GuardConfig, SectionSpec, section_of, shared_section
from csp_web.core.api import extras
from csp_web.core.api.ops import Op
from csp_web.core.api.ports import Seams, StatsLine
from csp_web.core.api.specialist import Commit, Specialist

from . import ops_browser, ops_canvas
from .config import SECTION, BrowserConfig
from .render import ChromiumRenderer
from .services import BrowserServices, open_browser_services

OPS: tuple[Op[BrowserServices], ...] = (*ops_browser.OPS, *ops_canvas.OPS)


class GuardSetting:
    """The guard settings in effect for the proxy: one reference a reload swaps."""

    def __init__(self, config: GuardConfig) -> None:
        self.config = config

    def __call__(self) -> GuardConfig:
        return self.config


@asynccontextmanager
async def _seamed(
    services: BrowserServices, section: BrowserConfig, seams: Seams | None
) -> AsyncIterator[BrowserServices]:
    """``services`` offering the Renderer and reading web's FileStore through ``seams``
    while open; as they are without seams. Without the browser extra (Playwright) no
    Renderer is offered: fetch serves script-built pages unrendered (render_unavailable), as
    with no browser at all."""
    if seams is None:
        yield services
        return
    services.files = seams.files
    if not extras.installed("browser"):
        yield services
        return
    with seams.renderer.provided(ChromiumRenderer(services, section)):
        yield services


def _reload(services: BrowserServices, section: BrowserConfig, config: Config) -> Commit:
    guard, new = services.guard, shared_section(config, GuardConfig)
    assert isinstance(guard, GuardSetting)

    def commit() -> None:
        guard.config = new

    return commit


def _stats_lines(services: BrowserServices) -> Mapping[str, StatsLine]:
    return {"BROWSER": services.stats_line}  # read at each REQ:stats


def make_browser(*, seams: Seams | None = None) -> Specialist[BrowserConfig, BrowserServices]:
    """The browser specialist; ``seams`` are the daemon's ports between specialists (none:
    the browser alone)."""

    @asynccontextmanager
    async def open_services(
        section: BrowserConfig, config: Config
    ) -> AsyncIterator[BrowserServices]:
        guard = GuardSetting(shared_section(config, GuardConfig))
        async with (
            open_browser_services(config, guard=guard) as services,
            _seamed(services, section, seams) as seamed,
        ):
            yield seamed

    return Specialist(
        name="browser",
        ops=OPS,
        slots=lambda slots: slots.tool,
        section=lambda config: section_of(config, SECTION, BrowserConfig),
        own_section=SectionSpec(SECTION, BrowserConfig),
        reloadable=(),
        restart_only=(SECTION,),
        open_services=open_services,
        background=lambda services: (),
        stats_lines=_stats_lines,
        storage=lambda services: {"media": lambda: services.media.storage_full},
        reload=_reload,
    )


BROWSER = make_browser()


def browser_ops() -> list[Op[BrowserServices]]:
    """The browser specialist's ops (tests and the ops reference)."""
    return list(OPS)
