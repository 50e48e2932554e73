"""A real daemon for the MCP face to be a client of: web ops on a Unix socket, the guard
opened for a local trustme HTTPS origin (as tests/web does), DNS the test controls.

No Memory Specialist listens, so every memory write the daemon makes stays in its outbox,
where the tests read the audit records of the calls the face made.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import pytest
import trio
import trustme

from csp_web.app.catalog import SPECIALISTS
from csp_web.app.memory_path import open_memory_path
from csp_web.config import Config, with_section
from csp_web.core.daemon.compose import op_table, open_daemon
from csp_web.core.daemon.lifecycle import serve
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.net import GuardConfig
from specialists.web import make_web
from specialists.web.config import web_section
from tests.harness import outbox_of
from tests.net._dns import FixedResolver
from tests.net._origin import Origin, Reply, start_https_origin

REPO = Path(__file__).resolve().parent.parent.parent
WAIT_S = 60.0  # a bound on each test's waits: a cold interpreter and the SDK import take seconds
CERT_NAMES = ("origin.test",)
PAGE_TITLE = "Tides"


def catalogue_tools(*domains: str) -> list[str]:
    """The tools the face lists for the catalogue's ops under ``domains`` (``<in>_<req>``,
    sorted by name), from the op table itself: a new op needs no edit to these tests."""
    table = op_table(SPECIALISTS)
    return sorted(f"{op.domain.lower()}_{op.req}" for op in table if op.domain in domains)


PAGE = (
    f"<!doctype html><html><head><title>{PAGE_TITLE}</title></head><body><article>"
    f"<h1>{PAGE_TITLE}</h1><p>{'The North Sea has two high tides every day. ' * 20}</p>"
    "</article></body></html>"
).encode()


@dataclass
class WebDaemon:
    socket_path: str
    dispatcher: Dispatcher
    origin: Origin

    def url(self, path: str = "/tides") -> str:
        return self.origin.url("origin.test", path)

    def records(self, kind: str) -> list[dict[str, object]]:
        """The daemon's memory writes of ``kind`` (audit, exec_log), oldest first."""
        rows = outbox_of(self.dispatcher)._store.oldest(10_000)
        return [json.loads(write.data) for _, write in rows if write.type == kind]


@pytest.fixture
async def origin(nursery: trio.Nursery, ca: trustme.CA) -> Origin:
    served = await start_https_origin(nursery, ca, CERT_NAMES)
    served.routes["/tides"] = lambda _seen: _page()
    return served


def _page() -> Reply:
    return Reply(200, [("content-type", "text/html; charset=utf-8")], PAGE)


@pytest.fixture
def web_config(config: Config, origin: Origin) -> Config:
    guard = GuardConfig(allowed_ports=(origin.port,), allow_private=("127.0.0.1",))
    return with_section(config, "web", replace(web_section(config), guard=guard))


@pytest.fixture
async def web_daemon(
    web_config: Config, origin: Origin, trust: ssl.SSLContext, sock_dir: str
) -> AsyncIterator[WebDaemon]:
    """The daemon with the web ops on ``<sock_dir>/csp.sock``."""
    path = os.path.join(sock_dir, "csp.sock")
    dns = FixedResolver({"origin.test": ["127.0.0.1"]})
    web = make_web(resolver=dns, ssl_context=trust)
    async with (
        open_daemon(web_config, (web,), memory=open_memory_path(web_config)) as daemon,
        trio.open_nursery() as nursery,
    ):
        dispatcher = await nursery.start(partial(serve, daemon, stdio=None, socket_path=path))
        yield WebDaemon(path, dispatcher, origin)
        nursery.cancel_scope.cancel()


def face_env() -> dict[str, str]:
    """The environment of a ``python -m csp_web mcp`` child: this checkout's code first."""
    return {"PYTHONPATH": os.environ.get("PYTHONPATH") or str(REPO)}


def face_command(*args: str) -> tuple[str, list[str]]:
    return sys.executable, ["-m", "csp_web", "mcp", *args]
