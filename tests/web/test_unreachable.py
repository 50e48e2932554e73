"""Issue 8.15: a host that cannot be resolved or reached is reported as what happened
(``dns_failed``, ``fetch_failed:connect_failed``), never as a robots.txt refusal, by every op
that reads a page: fetch, meta, resolve and summarize."""

from __future__ import annotations

import socket
from dataclasses import replace
from pathlib import Path

import pytest

from csp_web.config import Config, DaemonConfig, with_section
from csp_web.net import GuardConfig
from protocol import Reply, Status
from specialists.web.config import WebConfig
from specialists.web.pages import ops_fetch, ops_summarize
from tests.net._origin import Origin
from tests.web.conftest import DispatcherFactory
from tests.web.pages_support import run

# (op, OUT, the module whose OPS hold it, whether the URL goes inline or as a URL field)
PAGE_OPS = [
    ("fetch", "CONTENT", ops_fetch, True),
    ("meta", "META", ops_fetch, True),
    ("resolve", "URL", ops_fetch, True),
    ("summarize", "SUMMARY", ops_summarize, False),
]


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.fixture
def web_config(origin: Origin, closed_port: int, tmp_path: Path) -> Config:
    """Like conftest's, with the closed port allowed too, so only the connect can fail."""
    guard = GuardConfig(allowed_ports=(origin.port, closed_port), allow_private=("127.0.0.1",))
    return with_section(
        Config(daemon=DaemonConfig(state_dir=str(tmp_path / "state"))),
        "web",
        replace(WebConfig(), guard=guard),
    )


async def page_op(make_dispatcher: DispatcherFactory, op: str, url: str) -> Reply:
    for name, out, module, inline in PAGE_OPS:
        if name == op:
            dispatcher = make_dispatcher(module.OPS)
            if inline:
                return await run(dispatcher, name, out, url)
            return await run(dispatcher, name, out, None, ("URL", url))
    raise AssertionError(op)


@pytest.mark.parametrize("op", [name for name, *_ in PAGE_OPS])
async def test_a_host_that_does_not_resolve_replies_dns_failed_not_robots(
    make_dispatcher: DispatcherFactory, op: str, closed_port: int
) -> None:
    reply = await page_op(make_dispatcher, op, f"https://nowhere.test:{closed_port}/page")
    assert reply.status is Status.FAIL
    assert reply.get("ERROR") == "dns_failed:no_such_host"


@pytest.mark.parametrize("op", [name for name, *_ in PAGE_OPS])
async def test_a_host_that_refuses_the_connection_replies_connect_failed_not_robots(
    make_dispatcher: DispatcherFactory, op: str, closed_port: int
) -> None:
    reply = await page_op(make_dispatcher, op, f"https://origin.test:{closed_port}/page")
    assert reply.status is Status.FAIL
    assert reply.get("ERROR") == "fetch_failed:connect_failed"


async def test_a_robots_txt_that_forbids_the_page_still_replies_robots_disallowed(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    origin.robots.status, origin.robots.body = 200, b"User-agent: *\nDisallow: /\n"
    reply = await page_op(make_dispatcher, "fetch", origin.url("origin.test"))
    assert reply.get("ERROR") == "robots_disallowed:disallowed_by_rules"
