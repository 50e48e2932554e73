"""The browser's smaller parts: its config section and the daemon's wiring
(ops table, BROWSER stats line) with every specialist composed as ``csp-web serve`` does.
Its media store is the nodes' too: tests/test_media_store.py."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
import trio

from csp_web.app.catalog import config_from_mapping, config_sections
from csp_web.app.compose import open_app_daemon
from csp_web.config import Config, ConfigError
from csp_web.core.api.context import Peer
from protocol import Status, Task
from specialists.browser.config import BrowserConfig, browser_section


def test_trusted_spki_takes_only_base64_sha256_hashes() -> None:
    good = "A" * 43 + "="
    assert BrowserConfig(trusted_spki=(good,)).trusted_spki == (good,)
    for bad in ("not base64!", "AAAA"):
        with pytest.raises(ValueError, match="trusted_spki"):
            BrowserConfig(trusted_spki=(bad,))


SECTIONS = config_sections()


def test_the_browser_section_loads_strictly() -> None:
    config = config_from_mapping(
        {"tool": {"browser": {"canvas": {"allow_eval": True}}}}, sections=SECTIONS
    )
    assert browser_section(config).canvas.allow_eval is True
    with pytest.raises(ConfigError, match=r"tool\.browser\.max_tabs: unknown key"):
        config_from_mapping({"tool": {"browser": {"max_tabs": 3}}}, sections=SECTIONS)
    with pytest.raises(ConfigError, match="max_sessions_per_peer must not exceed"):
        config_from_mapping({"tool": {"browser": {"max_sessions": 2}}}, sections=SECTIONS)


async def test_the_daemon_lists_both_ops_and_a_browser_stats_line(config: Config) -> None:
    config = replace(config, memory=replace(config.memory, socket_path=None))
    async with open_app_daemon(config) as daemon:
        dispatcher = daemon.dispatcher
        with trio.fail_after(30):
            listed = await dispatcher.run(Task("ops", "SYS", "OPS", None, ()), Peer("t"))
            stats = await dispatcher.run(Task("stats", "SYS", "STATS", None, ()), Peer("t"))
        text = "\n".join(value for _, value in listed.fields)
        assert '"req":"browser"' in text.replace(" ", "")
        assert '"req":"canvas"' in text.replace(" ", "")
        assert stats.status is Status.OK
        (line,) = stats.get_all("BROWSER")
        sandbox = "off(root)" if os.geteuid() == 0 else "on"
        assert line.startswith("browsers:0 launches:0 crashes:0 recycles:0 pages:0")
        assert f"sandbox:{sandbox}" in line
        assert line.endswith(" lanes:0")  # one lane per open context: none


def test_playwright_errors_become_catalogue_codes_and_bugs_stay_bugs() -> None:
    from playwright.async_api import Error, TimeoutError

    from csp_web.net.guard_proxy import Lane
    from specialists.browser.errors import timed_out, translate
    from specialists.browser.pages import ActionError, loading

    lane = Lane(1, 0)

    def code(exc: Exception, url: str | None = "https://a.test/") -> str:
        error = translate(exc, scope="browser", lane=lane, since=0, url=url)
        return f"{error.code}:{error.detail}"

    assert code(Error("net::ERR_NAME_NOT_RESOLVED at https://a.test/")) == (
        "navigation_failed:err_name_not_resolved"
    )
    # An action's timeout is the deadline's (outside a task: the time Playwright was given);
    # a page load names its own where it is raised (pages.loading).
    assert code(TimeoutError("Locator.click: Timeout 5ms exceeded.")) == "timeout_exceeded:5ms"
    with pytest.raises(ActionError) as load, loading():
        raise TimeoutError("Page.goto: Timeout 5ms exceeded.")
    assert code(load.value) == "navigation_failed:timeout"
    assert timed_out(load.value)  # still a timeout: its session's page may spin
    assert code(Error("Target page, context or browser has been closed")) == (
        "browser_unavailable:closed mid-action"
    )
    assert code(Error("Element is not visible")) == "action_failed:Element is not visible"
    with pytest.raises(KeyError):
        translate(KeyError("bug"), scope="browser", lane=lane, since=0, url=None)
