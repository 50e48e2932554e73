"""Fixtures for the web specialist's tests: a real HTTPS origin (trustme) on 127.0.0.1, DNS the
test controls, web services wired to both, and the daemon's dispatcher over web ops."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path

import pytest
import trio
import trustme

from csp_web.app.memory_path import outbox_path
from csp_web.config import Config, DaemonConfig, with_section
from csp_web.core.api.ops import Op
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.memory.outbox import open_outbox
from csp_web.net import GuardConfig
from specialists.web.config import WebConfig
from specialists.web.services import WebServices, open_web_services
from tests.harness import build_dispatcher
from tests.net._dns import FixedResolver
from tests.net._origin import Origin, start_https_origin

# Names the origin's certificate covers; the test DNS maps each to 127.0.0.1.
CERT_NAMES = ("origin.test", "other.test", "api.test", "search.test")


@pytest.fixture
async def origin(nursery: trio.Nursery, ca: trustme.CA) -> Origin:
    """An HTTPS origin for every name in CERT_NAMES; add routes with ``origin.routes[path]``."""
    return await start_https_origin(nursery, ca, CERT_NAMES)


@pytest.fixture
def dns() -> FixedResolver:
    answers = {name: ["127.0.0.1"] for name in CERT_NAMES}
    answers["private.test"] = ["10.0.0.1"]
    return FixedResolver(answers)


@pytest.fixture
def web_config(origin: Origin, tmp_path: Path) -> Config:
    """Embedded defaults, loopback opened for the origin's port, state in tmp_path; no worker
    processes (``workers: 0``): a task would wait about 1 s for the first worker to start,
    past the deadlines of a few tests that are not about the pool (test_fetch_workers.py is,
    and opens its own)."""
    guard = GuardConfig(allowed_ports=(origin.port,), allow_private=("127.0.0.1",))
    return with_section(
        Config(daemon=DaemonConfig(state_dir=str(tmp_path / "state"))),
        "web",
        replace(WebConfig(), guard=guard, workers=0),
    )


@pytest.fixture
async def web(
    web_config: Config, dns: FixedResolver, trust: ssl.SSLContext
) -> AsyncIterator[WebServices]:
    async with open_web_services(web_config, resolver=dns, ssl_context=trust) as services:
        yield services


DispatcherFactory = Callable[[list[Op[WebServices]]], Dispatcher]


@pytest.fixture
async def make_dispatcher(web_config: Config, web: WebServices) -> AsyncIterator[DispatcherFactory]:
    """Call with a list of ops: the daemon's dispatcher over them and the sys ops, sharing
    ``web``. Run a task with ``await dispatcher.run(task, Peer("test"))``."""
    async with open_outbox(web_config.outbox_path, web_config.outbox, web_config.memory) as outbox:

        def make(ops: list[Op[WebServices]]) -> Dispatcher:
            return build_dispatcher(web_config, outbox_path(web_config, outbox), ops, web)

        yield make
