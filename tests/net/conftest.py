"""Fixtures for the guard's tests: real HTTPS and HTTP origins on 127.0.0.1 port 0, a trustme
CA, DNS the test controls, and a client wired to all three."""

from __future__ import annotations

import functools
import ssl
from collections.abc import AsyncIterator

import pytest
import trio
import trustme

from csp_web.net import GuardConfig, GuardedClient, open_guarded_client

from ._dns import FixedResolver
from ._origin import Origin, start_https_origin

# The names the origin's certificate covers; all resolve to 127.0.0.1 in the test DNS.
CERT_NAMES = ("origin.test", "other.test", "rebind.test")
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "SSL_CERT_FILE")


@pytest.fixture(autouse=True)
def _no_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture
async def origin(nursery: trio.Nursery, ca: trustme.CA) -> Origin:
    """An HTTPS origin whose certificate names CERT_NAMES and no address."""
    return await start_https_origin(nursery, ca, CERT_NAMES)


@pytest.fixture
async def plain_origin(nursery: trio.Nursery) -> Origin:
    """A plain-HTTP origin, for the allow_http and downgrade tests."""
    served = Origin("http")
    await nursery.start(functools.partial(served.serve, ssl_context=None))
    return served


@pytest.fixture
def dns() -> FixedResolver:
    answers = {name: ["127.0.0.1"] for name in (*CERT_NAMES, "notincert.test")}
    answers["private.test"] = ["10.0.0.1"]
    return FixedResolver(answers)


@pytest.fixture
def config(origin: Origin, plain_origin: Origin) -> GuardConfig:
    """Loopback opened on purpose (the origins live there), both origin ports allowed."""
    return GuardConfig(allowed_ports=(origin.port, plain_origin.port), allow_private=("127.0.0.1",))


@pytest.fixture
async def client(
    config: GuardConfig, dns: FixedResolver, trust: ssl.SSLContext
) -> AsyncIterator[GuardedClient]:
    async with open_guarded_client(config, resolver=dns, ssl_context=trust) as opened:
        yield opened
