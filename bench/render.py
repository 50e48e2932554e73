"""fetch's render path against a bare Playwright (issue 24, "JavaScript pages": goal <= 1.3x).

The same local app-shell pages (a local HTTPS origin, trustme CA) are read two ways:

- rendered fetch: the fetch op through the dispatcher with ``RENDER always`` and ``NO_CACHE``:
  the served HTML loaded by the guarded client, the page rendered by the browser's Chromium
  (a context and guard-proxy lane of its own), then extracted; the median per page;
- bare: a Playwright of its own on the same Chromium binary, a new context per page,
  ``goto`` (wait for load) and ``content()``, no proxy, no guard, no extraction.

The two alternate page by page; the ratio is rendered fetch / bare, medians over every page
and round.

    python bench/render.py [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Coroutine
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import trio
import trustme

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so `python bench/render.py` finds the packages
    sys.path.insert(0, str(REPO_ROOT))

from csp_web.app.memory_path import outbox_path  # noqa: E402
from csp_web.config import Config, DaemonConfig, with_section  # noqa: E402
from csp_web.core.api.context import Peer  # noqa: E402
from csp_web.memory.outbox import open_outbox  # noqa: E402
from csp_web.net import GuardConfig  # noqa: E402
from protocol import Status, Task  # noqa: E402
from specialists.browser.config import SECTION, BrowserConfig, browser_section  # noqa: E402
from specialists.browser.engine import find_executable  # noqa: E402
from specialists.browser.render import ChromiumRenderer  # noqa: E402
from specialists.browser.services import open_browser_services  # noqa: E402
from specialists.web.config import (  # noqa: E402
    FetchConfig,
    RateConfig,
    WebConfig,
    web_section,
)
from specialists.web.pages.ops_fetch import OPS  # noqa: E402
from specialists.web.services import open_web_services  # noqa: E402
from tests.browser.support import Settable, spki_hash, start_runtime  # noqa: E402
from tests.harness import build_dispatcher  # noqa: E402
from tests.net._dns import FixedResolver  # noqa: E402
from tests.net._origin import Origin, Reply, start_https_origin  # noqa: E402

T = TypeVar("T")
HOST = "origin.test"
PAGES = 5


def shell(number: int) -> bytes:
    """An app shell whose article only its script writes."""
    paragraphs = [f"Page {number}, paragraph {i}: the harbour log of the day." for i in range(20)]
    script = "".join(
        f"r.append(Object.assign(document.createElement('p'), {{textContent: {p!r}}}));"
        for p in paragraphs
    )
    return (
        f"<!doctype html><html><head><title>Log {number}</title></head><body>"
        f"<div id=\"root\"></div><script>const r = document.getElementById('root');{script}"
        "</script></body></html>"
    ).encode()


class Bare:
    """A Playwright of its own on an asyncio loop in a thread: each ``load`` is a new context,
    ``goto`` (wait for load) and ``content()``, its wall seconds."""

    def __init__(self, executable: str) -> None:
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, daemon=True).start()
        self._playwright: Any = None
        self._browser: Any = None
        self._call(self._launch(executable))

    def _call(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result()

    async def _launch(self, executable: str) -> None:
        from playwright.async_api import async_playwright

        self._playwright = await async_playwright().start()
        self._browser = await self._playwright.chromium.launch(
            executable_path=executable, args=[f"--host-resolver-rules=MAP {HOST} 127.0.0.1"]
        )

    def load(self, url: str) -> float:
        return self._call(self._load(url))

    async def _load(self, url: str) -> float:
        started = time.perf_counter()
        context = await self._browser.new_context(ignore_https_errors=True)
        page = await context.new_page()
        await page.goto(url, wait_until="load")
        html = await page.content()
        await context.close()
        elapsed = time.perf_counter() - started
        assert "harbour log" in html
        return elapsed

    def close(self) -> None:
        async def stop() -> None:
            await self._browser.close()
            await self._playwright.stop()

        self._call(stop())
        self._loop.call_soon_threadsafe(self._loop.stop)


async def measure(
    urls: list[str], rounds: int, config: Config, issuer: trustme.CA
) -> tuple[list[float], list[float]]:
    """Wall seconds of each rendered fetch and of each bare load, interleaved page by page
    (so the host's load falls on both alike); round 0 warms both up and is not counted."""
    trust = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    issuer.configure_trust(trust)
    dns = FixedResolver({HOST: ["127.0.0.1"]})
    settings = Settable()
    settings.guard = web_section(config).guard
    browser_config = browser_section(config)
    runtime, served = start_runtime(browser_config, settings)
    runtime.proxy.resolver = dns
    bare = await trio.to_thread.run_sync(Bare, find_executable(browser_config))
    rendered: list[float] = []
    bared: list[float] = []
    try:
        async with (
            open_browser_services(config, guard=settings.current, runtime=runtime) as browser,
            open_web_services(config, resolver=dns, ssl_context=trust) as web,
            open_outbox(config.outbox_path, config.outbox, config.memory) as outbox,
        ):
            dispatcher = build_dispatcher(config, outbox_path(config, outbox), OPS, web)
            with web.renderer.provided(ChromiumRenderer(browser, browser_config)):
                for number in range(rounds + 1):
                    for url in urls:
                        fields = (("RENDER", "always"), ("NO_CACHE", "true"))
                        started = time.perf_counter()
                        reply = await dispatcher.run(
                            Task("fetch", "WEB", "CONTENT", url, fields), Peer("bench")
                        )
                        elapsed = time.perf_counter() - started
                        assert reply.status is Status.OK, reply
                        assert reply.get("RENDERED") == "browser", reply
                        plain = await trio.to_thread.run_sync(bare.load, url)
                        if number:
                            rendered.append(elapsed)
                            bared.append(plain)
    finally:
        await trio.to_thread.run_sync(bare.close)
        runtime.engine.close_sync()
        served.stop()
    return rendered, bared


def serve_shell(origin: Origin, number: int) -> str:
    """Serve ``shell(number)`` on ``origin``; its URL."""
    reply = Reply(200, [("content-type", "text/html; charset=utf-8")], shell(number))
    origin.routes[f"/log/{number}"] = lambda _seen: reply
    return origin.url(HOST, f"/log/{number}")


async def main(rounds: int) -> None:
    ca = trustme.CA()
    issuer = ca.create_child_ca()
    state = tempfile.mkdtemp(prefix="bench-render-")
    async with trio.open_nursery() as nursery:
        origin: Origin = await start_https_origin(nursery, issuer, (HOST,))
        urls = [serve_shell(origin, number) for number in range(PAGES)]
        guard = GuardConfig(
            allowed_ports=(origin.port,), allow_private=("127.0.0.1/32",), timeout_s=60.0
        )
        fast = RateConfig(1_000_000, 1_000_000)  # the bench measures rendering, not the bucket
        browser_config = BrowserConfig(trusted_spki=(spki_hash(issuer),))
        config = with_section(
            Config(daemon=DaemonConfig(state_dir=state)),
            "web",
            WebConfig(guard=guard, fetch=FetchConfig(rate=fast)),
        )
        config = with_section(config, SECTION, browser_config)
        config = replace(config, memory=replace(config.memory, socket_path=None))
        os.makedirs(state, exist_ok=True)
        rendered, bare = await measure(urls, rounds, config, ca)
        nursery.cancel_scope.cancel()
    fetch_ms, bare_ms = statistics.median(rendered) * 1000, statistics.median(bare) * 1000
    print(f"pages: {PAGES} x {rounds} rounds (after one warm-up round each)")
    low_fetch, low_bare = min(rendered) * 1000, min(bare) * 1000
    print(
        f"rendered fetch (RENDER always, NO_CACHE): median {fetch_ms:.1f} ms, min {low_fetch:.1f}"
    )
    print(f"bare Playwright goto+content:            median {bare_ms:.1f} ms, min {low_bare:.1f}")
    print(f"ratio rendered fetch / bare: {fetch_ms / bare_ms:.2f}x (goal <= 1.3x)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    trio.run(main, parser.parse_args().rounds)
