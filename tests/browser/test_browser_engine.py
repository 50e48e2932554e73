"""The engine: Chromium restarted after a crash, recycled every N pages, no process left
after close, and a cancelled trio caller cancels the asyncio side."""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import replace

import pytest
import trio

from csp_web.core.dispatch.dispatcher import Dispatcher
from protocol import Status
from specialists.browser.config import BrowserConfig
from specialists.browser.engine import BrowserEngine, launch_args
from specialists.browser.services import BrowserServices, Runtime

from .support import WAIT_S, browser_main_pid, chromium_processes, descendants, wait_gone
from .test_browser_op import error, run, session_pages


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def _browser_pids(engine: BrowserEngine) -> list[int]:
    assert engine.driver_pid is not None
    return browser_main_pid(engine.driver_pid)


async def test_a_killed_browser_loses_its_sessions_and_the_next_action_restarts_it(
    dispatcher: Dispatcher, services: BrowserServices
) -> None:
    doomed = ("SESSION", "doomed")
    assert (await run(dispatcher, ("ACTION", "screenshot"), doomed)).status is Status.OK
    engine = services.engine
    pages = session_pages(services, "doomed")
    (main,) = _browser_pids(engine)
    crashes, launches = engine.stats.crashes, engine.stats.launches
    os.kill(main, signal.SIGKILL)
    await engine.run(wait_gone, pages)
    lost = await run(dispatcher, ("ACTION", "extract"), doomed)
    assert error(lost) == "session_lost:doomed"  # not an empty about:blank page
    reply = await run(dispatcher, ("ACTION", "screenshot"), doomed)
    assert reply.status is Status.OK, reply  # the name is free: a new session, a new browser
    assert engine.stats.crashes == crashes + 1
    assert engine.stats.launches == launches + 1
    assert "crashes:" in services.stats_line()


async def test_a_browser_dead_before_its_disconnect_is_heard_is_replaced_for_a_new_context(
    dispatcher: Dispatcher, services: BrowserServices
) -> None:
    assert (await run(dispatcher, ("ACTION", "screenshot"))).status is Status.OK
    engine = services.engine
    (main,) = _browser_pids(engine)
    crashes, launches = engine.stats.crashes, engine.stats.launches

    async def kill_then_open() -> int:
        os.kill(main, signal.SIGKILL)  # no await between: the engine has heard nothing yet
        opened = await engine.new_context()
        await engine.close_context(opened)
        return opened.handle.generation

    assert await engine.run(kill_then_open) == launches + 1
    assert (engine.stats.crashes, engine.stats.launches) == (crashes + 1, launches + 1)


@pytest.fixture
def browser_settings(browser_config: BrowserConfig) -> BrowserConfig:
    return replace(browser_config, recycle_after_pages=2)


async def test_the_browser_is_recycled_every_n_pages(
    services: BrowserServices, dispatcher: Dispatcher, runtime: Runtime
) -> None:
    engine = services.engine
    engine.config = replace(engine.config, recycle_after_pages=2)
    launches = engine.stats.launches
    for _ in range(3):  # each browser serves two pages: at least one recycle in three
        assert (await run(dispatcher, ("ACTION", "screenshot"))).status is Status.OK
    assert engine.stats.launches >= launches + 1
    assert engine.stats.recycles >= 1
    assert len(_browser_pids(engine)) <= 1  # recycled browsers are gone, not left running
    engine.config = replace(engine.config, recycle_after_pages=200)


async def test_cancelling_the_trio_caller_cancels_the_asyncio_side(
    services: BrowserServices,
) -> None:
    engine = services.engine
    started, finished = [], []

    async def hang() -> None:
        started.append(True)
        try:
            await asyncio.sleep(3600)
        finally:
            finished.append(True)

    with trio.move_on_after(0.2):
        await engine.run(hang)
    assert started == [True]
    assert finished == [True]  # unwound before run() returned


async def test_close_leaves_no_chromium_process(browser_config: BrowserConfig) -> None:
    from .support import Settable, start_runtime

    own, served = start_runtime(browser_config, Settable())
    try:
        engine = own.engine
        pages = await engine.run(_open_and_close_page, engine)
        assert pages == 1
        driver = engine.driver_pid
        assert driver is not None
        tree = [driver, *descendants(driver)]
        assert chromium_processes(driver)
        await engine.aclose()
        with trio.fail_after(WAIT_S):
            while any(_alive(pid) for pid in tree):  # the kernel reaps after exit: bounded
                await trio.sleep(0.05)
    finally:
        own.engine.close_sync()
        served.stop()


async def _open_and_close_page(engine: BrowserEngine) -> int:
    opened = await engine.new_context()
    await opened.context.new_page()
    await engine.close_context(opened)
    return opened.handle.pages


def test_launch_args_shut_the_side_doors_and_keep_the_sandbox_unless_root() -> None:
    args = launch_args(
        proxy_url="http://127.0.0.1:9", trusted_spki=(), sandbox=True, js_heap_mb=512
    )
    for flag in (
        "--proxy-server=http://127.0.0.1:9",
        "--proxy-bypass-list=<-loopback>",
        "--disable-quic",
        "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
        "--dns-prefetch-disable",
        "--js-flags=--max-old-space-size=512",
    ):
        assert flag in args
    assert "--no-sandbox" not in args
    assert not any(a.startswith("--ignore-certificate-errors") for a in args)
    root = launch_args(
        proxy_url="http://127.0.0.1:9", trusted_spki=("k",), sandbox=False, js_heap_mb=512
    )
    assert "--no-sandbox" in root
    assert "--ignore-certificate-errors-spki-list=k" in root
