"""The render path trusts what fetch trusts and goes out where fetch goes (issue 24, "Trust and
egress"): a Chromium of its own per test, whose trust and proxy come from ``web.tls`` and
``web.proxy`` alone, as the daemon composes it (``open_browser_services``)."""

from __future__ import annotations

import contextlib
import functools
import os
import ssl
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import certifi
import pytest
import trio
import trustme

from csp_web.app.memory_path import outbox_path
from csp_web.config import Config, TlsConfig, with_section
from csp_web.config.errors import ConfigError
from csp_web.core.api.context import Peer
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.memory.outbox import open_outbox
from csp_web.net import GuardConfig
from protocol import Field, Reply, Status, Task
from specialists.browser.config import BrowserConfig, browser_section
from specialists.browser.render import ChromiumRenderer
from specialists.browser.services import BrowserServices, open_browser_services
from specialists.browser.trust import build_home, extra_certificates
from specialists.web.config import WebConfig, web_section
from specialists.web.pages.ops_fetch import OPS
from specialists.web.services import open_web_services
from tests.harness import build_dispatcher
from tests.net._dns import FixedResolver
from tests.net._origin import Origin
from tests.net._proxy import start_proxy
from tests.web.pages_support import hits, serve

from .conftest import CERT_NAMES
from .support import WAIT_S, Listener, Refusals
from .test_render_fetch import OP_TIMEOUT_S, SHELL, SHELL_MD

pytestmark = pytest.mark.slow  # each test launches a Chromium of its own


@pytest.fixture(scope="module")
def company() -> trustme.CA:
    """The company CA: given to csp-web through ``web.tls.ca_file`` and nothing else."""
    return trustme.CA(organization_name="Company")


@pytest.fixture
def bundle(company: trustme.CA, tmp_path: Path) -> str:
    path = tmp_path / "company-ca.pem"
    company.cert_pem.write_to_path(str(path))
    return str(path)


@pytest.fixture
async def origin(nursery: trio.Nursery, company: trustme.CA) -> Origin:
    """The origin every test serves from: its certificate is the company CA's (no SPKI
    list, no test trust anywhere)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    company.issue_cert(*CERT_NAMES).configure_cert(context)
    served = Origin("https")
    await nursery.start(functools.partial(served.serve, ssl_context=context))
    return served


@pytest.fixture
def browser_settings() -> BrowserConfig:
    return BrowserConfig()  # trusted_spki empty: trust comes from web.tls only


@pytest.fixture
def web_config(bundle: str, guard: GuardConfig) -> WebConfig:
    timed = replace(guard, timeout_s=OP_TIMEOUT_S)
    return WebConfig(guard=timed, tls=TlsConfig(ca_file=bundle))


@contextlib.asynccontextmanager
async def _daemon(
    config: Config, dns: FixedResolver, *, fetch_trust: ssl.SSLContext | None = None
) -> AsyncIterator[tuple[Dispatcher, BrowserServices]]:
    """fetch over the browser's renderer, both opened from ``config`` as the catalogue does
    (``fetch_trust``: web's own trust instead of ``web.tls``, so that only the render judges)."""
    browser = browser_section(config)
    os.makedirs(config.daemon.state_dir, exist_ok=True)
    async with (
        open_browser_services(config, resolver=dns) as services,
        open_web_services(config, resolver=dns, ssl_context=fetch_trust) as web,
        open_outbox(config.outbox_path, config.outbox, config.memory) as outbox,
    ):
        with web.renderer.provided(ChromiumRenderer(services, browser)):
            yield build_dispatcher(config, outbox_path(config, outbox), OPS, web), services


async def _fetch(pages: Dispatcher, url: str, *fields: Field) -> Reply:
    with trio.fail_after(OP_TIMEOUT_S + WAIT_S):
        return await pages.run(Task("fetch", "WEB", "CONTENT", url, fields), Peer("t"))


async def test_a_page_from_the_ca_given_only_in_web_tls_ca_file_is_rendered(
    make_config: functools.partial[Config],
    web_config: WebConfig,
    dns: FixedResolver,
    origin: Origin,
) -> None:
    url = serve(origin, "/shell", SHELL)
    async with _daemon(with_section(make_config(), "web", web_config), dns) as (pages, _):
        reply = await _fetch(pages, url)
    assert (reply.status, reply.get("DATA"), reply.get("ERROR")) == (Status.OK, SHELL_MD, None)
    assert (reply.get("RENDERED"), reply.get("RENDER_REASON")) == ("browser", "root_div")
    assert hits(origin, "/shell") == 2  # fetch's load, then Chromium's


async def test_a_chain_that_only_carries_the_ca_certificate_is_not_trusted_by_the_render(
    make_config: functools.partial[Config],
    web_config: WebConfig,
    dns: FixedResolver,
    company: trustme.CA,
    nursery: trio.Nursery,
    tmp_path: Path,
) -> None:
    """A rogue CA's certificate for the name, served with the company CA's (public)
    certificate appended: an SPKI list naming the company CA would take it; a verified chain
    does not. fetch's own trust is widened to the rogue CA here so that the render judges."""
    rogue = trustme.CA(organization_name="Rogue")
    leaf = rogue.issue_cert(*CERT_NAMES)
    chain = tmp_path / "chain.pem"
    chain.write_bytes(leaf.cert_chain_pems[0].bytes() + company.cert_pem.bytes())
    key = tmp_path / "key.pem"
    leaf.private_key_pem.write_to_path(str(key))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(chain), str(key))
    impostor = Origin("https")
    await nursery.start(functools.partial(impostor.serve, ssl_context=context))
    url = serve(impostor, "/shell", SHELL)
    wide = ssl.create_default_context()
    rogue.configure_trust(wide)
    guard = replace(web_config.guard, allowed_ports=(impostor.port,))
    config = with_section(make_config(), "web", replace(web_config, guard=guard))
    async with _daemon(config, dns, fetch_trust=wide) as (pages, _):
        always = await _fetch(pages, url, ("RENDER", "always"))
        auto = await _fetch(pages, url)
    assert (always.status, always.get("ERROR")) == (
        Status.FAIL,
        "fetch_failed:render_tls_verify_failed",
    )
    assert (auto.status, auto.get("ERROR"), auto.get("RENDER_REASON")) == (
        Status.PARTIAL,
        "empty_content:script_only,render_failed:render_tls_verify_failed",
        "root_div,render_failed:render_tls_verify_failed",
    )
    assert hits(impostor, "/shell") == 1  # fetch's load (cached after); Chromium never got in


async def test_the_render_goes_out_through_web_proxy_to_the_address_the_guard_approved(
    make_config: functools.partial[Config],
    web_config: WebConfig,
    dns: FixedResolver,
    origin: Origin,
    private: Listener,
    nursery: trio.Nursery,
) -> None:
    proxy = await start_proxy(nursery)
    leak = f"https://fetch.private.test:{private.port}/secret"
    page = SHELL.replace(
        "</script>",
        f"fetch({leak!r}).then(r => r.text()).then(t => document.body.append(t))"
        ".catch(() => {});</script>",
    )
    url = serve(origin, "/shell", page)
    config = with_section(make_config(), "web", replace(web_config, proxy=proxy.url))
    refusals = Refusals()
    async with _daemon(config, dns) as (pages, services):
        services.proxy.on_refusal = refusals.add
        reply = await _fetch(pages, url)
        await refusals.wait_for([f"fetch.private.test:{private.port}"])
    assert (reply.status, reply.get("DATA"), reply.get("RENDERED")) == (
        Status.OK,
        SHELL_MD,
        "browser",
    )
    by_target = {r.target: r.error for r in refusals.seen}
    assert by_target[f"fetch.private.test:{private.port}"] == "ssrf_blocked:loopback-127/8"
    assert set(proxy.asked) == {f"CONNECT 127.0.0.1:{origin.port} HTTP/1.1"}
    assert len(proxy.asked) >= 2  # fetch's load and the render's: the guard's, not Chromium's
    assert private.connections == 0  # the script's private target never reached the proxy


async def test_with_system_store_a_ca_the_administrator_added_is_trusted_by_the_render(
    make_config: functools.partial[Config],
    guard: GuardConfig,
    dns: FixedResolver,
    origin: Origin,
    company: trustme.CA,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The OS store OpenSSL reads (SSL_CERT_FILE names it here: the public roots plus the
    company CA, as update-ca-certificates would make it) is what both fetch and Chromium
    trust with ``web.tls.system_store``, and no ca_file."""
    store = tmp_path / "ca-certificates.crt"
    store.write_bytes(Path(certifi.where()).read_bytes() + company.cert_pem.bytes())
    monkeypatch.setenv("SSL_CERT_FILE", str(store))
    timed = replace(guard, timeout_s=OP_TIMEOUT_S)
    config = with_section(
        make_config(), "web", WebConfig(guard=timed, tls=TlsConfig(system_store=True))
    )
    assert extra_certificates(web_section(config).tls) == [company.cert_pem.bytes().strip()]
    url = serve(origin, "/shell", SHELL)
    async with _daemon(config, dns) as (pages, _):
        reply = await _fetch(pages, url)
    assert (reply.status, reply.get("DATA"), reply.get("RENDERED")) == (
        Status.OK,
        SHELL_MD,
        "browser",
    )


def test_web_tls_adds_nothing_to_chromium_unless_set(bundle: str, company: trustme.CA) -> None:
    assert extra_certificates(TlsConfig(ca_file=bundle)) == [company.cert_pem.bytes().strip()]
    assert extra_certificates(TlsConfig()) == []


def test_without_certutil_chromium_is_given_no_home_and_the_log_says_so(
    bundle: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH where no certutil is
    assert build_home(TlsConfig(ca_file=bundle), str(tmp_path)) is None
    assert "certutil (libnss3-tools) not found" in caplog.text


def test_a_ca_file_without_a_certificate_is_a_config_error_naming_the_setting(
    tmp_path: Path,
) -> None:
    empty = tmp_path / "empty.pem"
    empty.write_text("no certificate here\n")
    with pytest.raises(ConfigError, match=r"^web\.tls\.ca_file: "):
        build_home(TlsConfig(ca_file=str(empty)), str(tmp_path))
