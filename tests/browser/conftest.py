"""Fixtures for the browser tests: one Chromium and guard proxy per module, real HTTPS origins
per test (trustme), private hosts as raw listeners on 127.0.0.2, and a dispatcher."""

from __future__ import annotations

import functools
import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace

import pytest
import trio
import trustme

from csp_web.app.memory_path import outbox_path
from csp_web.config import Config, with_section
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.memory.outbox import open_outbox
from csp_web.net import GuardConfig
from specialists.browser import browser_ops
from specialists.browser.config import SECTION, BrowserConfig
from specialists.browser.services import BrowserServices, Runtime, open_browser_services
from specialists.tool.config import ToolConfig
from specialists.web.config import WebConfig
from tests.harness import build_dispatcher
from tests.net._dns import FixedResolver
from tests.net._origin import Origin, start_https_origin

from .support import Listener, Refusals, Settable, spki_hash, start_runtime

CERT_NAMES = ("origin.test", "other.test", "rebind.test")
PRIVATE_NAMES = tuple(
    f"{sub}private.test" for sub in ("", "img.", "fetch.", "ws.", "frame.", "popup.")
)


@pytest.fixture(scope="module")
def settings() -> Settable:
    return Settable()


@pytest.fixture(scope="module")
def issuer(ca: trustme.CA) -> trustme.CA:
    """The origins' issuer: an intermediate, so that the chain the origins present holds the
    key Chromium is told to trust (the SPKI list matches presented certificates only)."""
    return ca.create_child_ca()


@pytest.fixture(scope="module")
def browser_config(issuer: trustme.CA) -> BrowserConfig:
    return BrowserConfig(trusted_spki=(spki_hash(issuer),))


@pytest.fixture(scope="module")
def runtime(browser_config: BrowserConfig, settings: Settable) -> Iterator[Runtime]:
    """One proxy thread and one engine for the whole module; closed (and checked) at its end."""
    runtime, served = start_runtime(browser_config, settings)
    try:
        yield runtime
    finally:
        runtime.engine.close_sync()
        served.stop()


@pytest.fixture
async def origin(nursery: trio.Nursery, issuer: trustme.CA) -> Origin:
    return await start_https_origin(nursery, issuer, CERT_NAMES)


@pytest.fixture
async def plain_origin(nursery: trio.Nursery) -> Origin:
    served = Origin("http")
    await nursery.start(functools.partial(served.serve, ssl_context=None))
    return served


@pytest.fixture
async def private(nursery: trio.Nursery) -> Listener:
    listener = Listener("127.0.0.2")
    await nursery.start(listener.serve)
    return listener


@pytest.fixture
def dns() -> FixedResolver:
    answers = {name: ["127.0.0.1"] for name in CERT_NAMES}
    answers.update({name: ["127.0.0.2"] for name in PRIVATE_NAMES})
    return FixedResolver(answers)


@pytest.fixture
def guard(origin: Origin, private: Listener) -> GuardConfig:
    """Only 127.0.0.1 (the origins) is opened; 127.0.0.2 stays loopback, denied."""
    return GuardConfig(
        allowed_ports=(origin.port, private.port), allow_private=("127.0.0.1/32",), timeout_s=5.0
    )


@pytest.fixture
def refusals(runtime: Runtime) -> Iterator[Refusals]:
    seen = Refusals()
    runtime.proxy.on_refusal = seen.add
    yield seen
    runtime.proxy.on_refusal = None


@pytest.fixture
def browser_settings(browser_config: BrowserConfig) -> BrowserConfig:
    """The browser section a test runs under; tests override it with ``replace``."""
    return browser_config


@pytest.fixture
def make_config(
    config: Config, guard: GuardConfig, browser_settings: BrowserConfig
) -> functools.partial[Config]:
    base = with_section(
        with_section(
            replace(config, memory=replace(config.memory, socket_path=None)),
            "web",
            WebConfig(guard=guard),
        ),
        "tool",
        ToolConfig(),
    )
    base = with_section(base, SECTION, browser_settings)
    return functools.partial(replace, base)


@pytest.fixture
async def services(
    runtime: Runtime,
    settings: Settable,
    guard: GuardConfig,
    dns: FixedResolver,
    make_config: functools.partial[Config],
    refusals: Refusals,
) -> AsyncIterator[BrowserServices]:
    settings.guard = guard
    runtime.proxy.resolver = dns
    async with open_browser_services(make_config(), guard=settings.current, runtime=runtime) as s:
        yield s


@pytest.fixture
async def dispatcher(
    services: BrowserServices, make_config: functools.partial[Config]
) -> AsyncIterator[Dispatcher]:
    config = make_config()
    os.makedirs(config.daemon.state_dir, exist_ok=True)
    async with open_outbox(config.outbox_path, config.outbox, config.memory) as outbox:
        yield build_dispatcher(config, outbox_path(config, outbox), browser_ops(), services)
