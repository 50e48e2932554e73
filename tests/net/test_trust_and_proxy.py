"""Trust and egress (issue 24): a company CA given only through ``web.tls`` (an extra bundle,
or the OS store), and a forward proxy (``web.proxy``) that is asked to CONNECT to the address
the guard approved, never to a name, so it never widens what the guard allows."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
import trio
import trustme

from csp_web.config import TlsConfig
from csp_web.config.errors import ConfigError
from csp_web.core.api.errors import OpError
from csp_web.net import GuardConfig, Proxy, open_guarded_client, parse_proxy, trust_context
from csp_web.net.forward_proxy import connect_request
from protocol import ErrorCode
from specialists.web.config import WebConfig

from ._dns import FixedResolver
from ._origin import PAGE, WAIT_S, Origin
from ._proxy import ConnectProxy, start_proxy


def ca_file(ca: trustme.CA, tmp_path: Path) -> str:
    path = tmp_path / "company-ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


async def fetch_status(
    config: GuardConfig,
    dns: FixedResolver,
    context: ssl.SSLContext | None,
    url: str,
    proxy: Proxy | None = None,
) -> int:
    with trio.fail_after(WAIT_S):
        async with open_guarded_client(
            config, resolver=dns, ssl_context=context, proxy=proxy
        ) as client:
            return (await client.fetch(url)).status_code


async def test_a_company_ca_given_as_ca_file_is_trusted(
    config: GuardConfig, dns: FixedResolver, origin: Origin, ca: trustme.CA, tmp_path: Path
) -> None:
    context = trust_context(TlsConfig(ca_file=ca_file(ca, tmp_path)))
    assert await fetch_status(config, dns, context, origin.url("origin.test")) == 200


@pytest.mark.parametrize("tls", [TlsConfig(), TlsConfig(system_store=True)])
async def test_without_the_company_ca_its_site_fails_tls_verification(
    config: GuardConfig, dns: FixedResolver, origin: Origin, tls: TlsConfig
) -> None:
    with pytest.raises(OpError) as caught:
        await fetch_status(config, dns, trust_context(tls), origin.url("origin.test"))
    assert (caught.value.code, caught.value.detail) == (ErrorCode.FETCH_FAILED, "tls_verify_failed")


async def test_the_os_trust_store_is_used_when_system_store_is_set(
    config: GuardConfig,
    dns: FixedResolver,
    origin: Origin,
    ca: trustme.CA,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """OpenSSL's default store is what SSL_CERT_FILE names: here, the company CA alone."""
    monkeypatch.setenv("SSL_CERT_FILE", ca_file(ca, tmp_path))
    context = trust_context(TlsConfig(system_store=True))
    assert await fetch_status(config, dns, context, origin.url("origin.test")) == 200
    with pytest.raises(OpError):  # certifi's roots do not read the variable
        await fetch_status(config, dns, trust_context(TlsConfig()), origin.url("origin.test"))


def test_an_unreadable_ca_file_is_a_config_error_naming_the_setting(tmp_path: Path) -> None:
    (tmp_path / "junk.pem").write_text("not a certificate")
    for path in (str(tmp_path / "absent.pem"), str(tmp_path / "junk.pem")):
        with pytest.raises(ConfigError, match=r"^web\.tls\.ca_file: "):
            trust_context(TlsConfig(ca_file=path))


@pytest.fixture
async def proxy(nursery: trio.Nursery) -> ConnectProxy:
    return await start_proxy(nursery)


async def test_fetch_through_the_proxy_asks_it_for_the_approved_address_not_the_name(
    config: GuardConfig,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    origin: Origin,
    proxy: ConnectProxy,
) -> None:
    with trio.fail_after(WAIT_S):
        async with open_guarded_client(
            config, resolver=dns, ssl_context=trust, proxy=parse_proxy(proxy.url)
        ) as client:
            result = await client.fetch(origin.url("origin.test"))
    assert (result.status_code, result.body) == (200, PAGE)
    assert proxy.asked == [f"CONNECT 127.0.0.1:{origin.port} HTTP/1.1"]
    assert origin.sni_names == ["origin.test"]  # TLS inside the tunnel still names the host


async def test_a_hostile_dns_answer_is_refused_before_the_proxy_hears_of_it(
    config: GuardConfig, dns: FixedResolver, trust: ssl.SSLContext, proxy: ConnectProxy
) -> None:
    """private.test resolves to 10.0.0.1: the proxy could reach it, the guard says no."""
    with trio.fail_after(WAIT_S), pytest.raises(OpError) as caught:
        async with open_guarded_client(
            config, resolver=dns, ssl_context=trust, proxy=parse_proxy(proxy.url)
        ) as client:
            await client.fetch(f"https://private.test:{config.allowed_ports[0]}/")
    assert caught.value.code is ErrorCode.SSRF_BLOCKED
    assert proxy.asked == []


async def test_a_proxy_that_refuses_the_tunnel_is_proxy_failed(
    config: GuardConfig,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    origin: Origin,
    proxy: ConnectProxy,
) -> None:
    proxy.refuse = 403
    with pytest.raises(OpError) as caught:
        await fetch_status(
            config, dns, trust, origin.url("origin.test"), proxy=parse_proxy(proxy.url)
        )
    assert (caught.value.code, caught.value.detail) == (ErrorCode.PROXY_FAILED, "connect_403")
    assert origin.connections == 0


async def test_an_unreachable_proxy_is_proxy_failed(
    config: GuardConfig, dns: FixedResolver, trust: ssl.SSLContext, origin: Origin
) -> None:
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    closed_port = listener.getsockname()[1]
    listener.close()  # nothing listens there now
    with pytest.raises(OpError) as caught:
        await fetch_status(
            config,
            dns,
            trust,
            origin.url("origin.test"),
            proxy=parse_proxy(f"http://127.0.0.1:{closed_port}"),
        )
    assert (caught.value.code, caught.value.detail) == (ErrorCode.PROXY_FAILED, "unreachable")


def test_connect_names_an_ipv6_address_in_brackets() -> None:
    assert connect_request("2001:db8::1", 443) == (
        b"CONNECT [2001:db8::1]:443 HTTP/1.1\r\nHost: [2001:db8::1]:443\r\n\r\n"
    )


@pytest.mark.parametrize(
    "url",
    [
        "https://proxy.test:3128",
        "socks5://proxy.test:1080",
        "http://proxy.test",
        "http://user:secret@proxy.test:3128",
        "http://proxy.test:3128/path",
        "http://proxy.test:99999",
    ],
)
def test_a_proxy_setting_that_is_not_http_host_port_is_refused_at_load(url: str) -> None:
    with pytest.raises(ValueError, match=r"^proxy: "):
        WebConfig(proxy=url)
