"""The seams between specialists (csp_web.core.api.ports) as the catalogue composes a daemon: the
browser's Renderer reaches web, web's FileStore reaches the browser, and both really work
(a script-built page rendered by Chromium through the guard; a file kept and read back)."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import replace
from typing import Any

import pytest
import trio

from csp_web.app.catalog import catalogue
from csp_web.config import Config, with_section
from csp_web.core.api.errors import OpError
from csp_web.core.api.ports import Seams
from csp_web.core.api.specialist import Specialist
from csp_web.core.daemon.compose import open_daemon
from csp_web.net import GuardConfig
from protocol import ErrorCode
from specialists.browser.config import browser_section
from specialists.browser.render import ChromiumRenderer
from specialists.browser.services import BrowserServices
from specialists.tool.config import ToolConfig
from specialists.web.config import WebConfig, web_section
from specialists.web.pages.filestore import CacheFileStore
from specialists.web.services import WebServices
from tests.net._origin import Origin, Reply, Seen

WAIT_S = 60.0  # a first Chromium launch on a loaded 2-core host, and one page
SCRIPTED = (
    b"<html><head><title>Shell</title></head><body><div id=root></div><script>"
    b"document.getElementById('root').textContent = 'built by script';"
    b"document.title = 'Built';</script></body></html>"
)


def _page(_seen: Seen) -> Reply:
    return Reply(200, [("content-type", "text/html")], SCRIPTED)


@pytest.fixture
async def origin(nursery: trio.Nursery) -> Origin:
    served = Origin("http", routes={"/app": _page})
    await nursery.start(functools.partial(served.serve, ssl_context=None))
    return served


def _config(config: Config, origin: Origin, *, private: bool = True) -> Config:
    guard = GuardConfig(
        allow_http=True,
        allowed_ports=(origin.port,),
        allow_private=("127.0.0.1/32",) if private else (),
    )
    memory = replace(config.memory, socket_path=None)
    return with_section(
        with_section(replace(config, memory=memory), "web", replace(WebConfig(), guard=guard)),
        "tool",
        ToolConfig(),
    )


@pytest.fixture
async def opened(config: Config, origin: Origin) -> AsyncIterator[tuple[WebServices, Any]]:
    """Web's and the browser's services as the catalogue builds them for one daemon."""
    config = _config(config, origin)
    web, _tool, browser, _node = catalogue(seams=Seams())
    assert isinstance(web, Specialist)
    assert isinstance(browser, Specialist)
    async with AsyncExitStack() as stack:
        web_services = await stack.enter_async_context(
            web.open_services(web_section(config), config)
        )
        browser_services = await stack.enter_async_context(
            browser.open_services(browser_section(config), config)
        )
        yield web_services, browser_services


async def test_the_catalogue_hands_the_browsers_renderer_to_web_and_webs_file_store_to_the_browser(
    opened: tuple[WebServices, BrowserServices], origin: Origin
) -> None:
    web, browser = opened
    renderer, files = web.renderer.get(), browser.files.get()
    assert isinstance(renderer, ChromiumRenderer)
    assert isinstance(files, CacheFileStore)
    with trio.fail_after(WAIT_S):
        rendered = await renderer.render(origin.url("127.0.0.1", "/app"), timeout_s=WAIT_S)
        key = await files.put(b"%PDF-1.4 body", url=rendered.url, name="a.pdf", content_type="x")
        stored = await files.get(key)
    assert (rendered.url, rendered.status, rendered.title) == (
        origin.url("127.0.0.1", "/app"),
        200,
        "Built",
    )
    assert '<div id="root">built by script</div>' in rendered.html
    assert (stored.key, stored.url, stored.name, stored.body) == (
        key,
        rendered.url,
        "a.pdf",
        b"%PDF-1.4 body",
    )
    assert browser.proxy.stats.lanes_open == 0  # the render's context (and lane) is closed


async def test_a_render_the_guard_refuses_fails_with_the_guards_code(
    config: Config, origin: Origin
) -> None:
    seams = Seams()
    config = _config(config, origin, private=False)
    async with open_daemon(config, catalogue(seams=seams), memory=None):
        renderer = seams.renderer.get()
        assert renderer is not None
        with trio.fail_after(WAIT_S), pytest.raises(OpError) as refused:
            await renderer.render(origin.url("127.0.0.1", "/app"), timeout_s=WAIT_S)
    assert refused.value.code is ErrorCode.SSRF_BLOCKED
    assert origin.requests == []
    assert (seams.renderer.get(), seams.files.get()) == (None, None)  # closed with the daemon
