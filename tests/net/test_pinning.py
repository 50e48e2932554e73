"""The mechanism itself: the socket goes to the address that was checked, while TLS (SNI and
certificate) and Host keep the name; nothing routes around it (proxies, second lookups)."""

from __future__ import annotations

import functools
import ssl

import httpx
import pytest
import trio

from csp_web.core.api.errors import OpError
from csp_web.net import GuardConfig, GuardedClient, GuardSettings, open_guarded_client
from csp_web.net.backend import PinnedBackend
from protocol import ErrorCode

from ._dns import FixedResolver, RebindingResolver
from ._origin import PAGE, WAIT_S, Origin


async def test_name_pinned_to_allowed_loopback_connects_and_verifies_the_cert_for_the_name(
    origin: Origin, config: GuardConfig, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    # "origin.test" exists only in the injected DNS and the certificate names no address:
    # success means the socket went to the checked 127.0.0.1 while TLS verified the name.
    async with open_guarded_client(config, resolver=dns, ssl_context=trust) as client:
        with trio.fail_after(WAIT_S):
            result = await client.fetch(origin.url("origin.test"))
    assert (result.status_code, result.body) == (200, PAGE)
    assert origin.sni_names == ["origin.test"]
    assert origin.requests[0].headers["host"] == f"origin.test:{origin.port}"
    assert dns.calls == ["origin.test"]


async def test_without_the_allow_list_the_same_name_is_refused_before_any_connection(
    origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    config = GuardConfig(allowed_ports=(origin.port,))
    async with open_guarded_client(config, resolver=dns, ssl_context=trust) as client:
        with trio.fail_after(WAIT_S), pytest.raises(OpError) as caught:
            await client.fetch(origin.url("origin.test"))
    assert (caught.value.code, caught.value.detail) == (ErrorCode.SSRF_BLOCKED, "loopback-127/8")
    assert origin.connections == 0


async def test_a_certificate_that_does_not_name_the_host_fails_verification(
    origin: Origin, client: GuardedClient
) -> None:
    with trio.fail_after(WAIT_S), pytest.raises(OpError) as caught:
        await client.fetch(origin.url("notincert.test"))
    assert (caught.value.code, caught.value.detail) == (ErrorCode.FETCH_FAILED, "tls_verify_failed")
    assert origin.sni_names == ["notincert.test"]
    assert origin.requests == []


async def test_rebinding_gets_one_lookup_and_the_connect_uses_its_checked_answer(
    origin: Origin, config: GuardConfig, trust: ssl.SSLContext
) -> None:
    # Loopback stands in for "public" here (allow-listed); 10.0.0.1 is what a second lookup
    # would have connected to.
    dns = RebindingResolver([["127.0.0.1"], ["10.0.0.1"]])
    async with open_guarded_client(config, resolver=dns, ssl_context=trust) as client:
        with trio.fail_after(WAIT_S):
            result = await client.fetch(origin.url("rebind.test"))
    assert result.body == PAGE
    assert dns.calls == 1


async def test_rebinding_that_starts_private_is_refused_before_any_connection(
    origin: Origin, config: GuardConfig, trust: ssl.SSLContext
) -> None:
    dns = RebindingResolver([["10.0.0.1"], ["127.0.0.1"]])
    async with open_guarded_client(config, resolver=dns, ssl_context=trust) as client:
        with trio.fail_after(WAIT_S), pytest.raises(OpError) as caught:
            await client.fetch(origin.url("rebind.test"))
    assert (caught.value.code, caught.value.detail) == (ErrorCode.SSRF_BLOCKED, "private-10/8")
    assert origin.connections == 0


async def test_an_allowed_answer_beside_a_denied_one_is_not_used(
    origin: Origin, config: GuardConfig, trust: ssl.SSLContext
) -> None:
    dns = FixedResolver({"origin.test": ["127.0.0.1", "10.0.0.1"]})
    async with open_guarded_client(config, resolver=dns, ssl_context=trust) as client:
        with trio.fail_after(WAIT_S), pytest.raises(OpError) as caught:
            await client.fetch(origin.url("origin.test"))
    assert caught.value.detail == "private-10/8"
    assert origin.connections == 0


async def test_when_the_first_checked_answer_refuses_the_next_one_is_tried(
    origin: Origin, trust: ssl.SSLContext
) -> None:
    # The origin listens on 127.0.0.1 only, so 127.0.0.2 refuses the connection.
    config = GuardConfig(allowed_ports=(origin.port,), allow_private=("127.0.0.0/8",))
    dns = FixedResolver({"origin.test": ["127.0.0.2", "127.0.0.1"]})
    async with open_guarded_client(config, resolver=dns, ssl_context=trust) as client:
        with trio.fail_after(WAIT_S):
            result = await client.fetch(origin.url("origin.test"))
    assert result.body == PAGE


async def test_proxy_environment_variables_are_ignored(
    origin: Origin,
    config: GuardConfig,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    nursery: trio.Nursery,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proxy_connections: list[int] = []

    async def proxy(stream: trio.SocketStream) -> None:
        proxy_connections.append(1)
        await stream.aclose()

    listeners = await nursery.start(functools.partial(trio.serve_tcp, proxy, 0, host="127.0.0.1"))
    proxy_url = f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}"
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "all_proxy"):
        monkeypatch.setenv(name, proxy_url)
    async with open_guarded_client(config, resolver=dns, ssl_context=trust) as client:
        with trio.fail_after(WAIT_S):
            result = await client.fetch(origin.url("origin.test"))
    assert result.body == PAGE
    assert proxy_connections == []
    # Control: a default httpx client does take the proxy, so the proxy above was live.
    async with httpx.AsyncClient(verify=trust) as plain:
        with trio.fail_after(WAIT_S), pytest.raises(httpx.HTTPError):
            await plain.get(origin.url("origin.test"))
    assert proxy_connections == [1]


async def test_the_backend_refuses_unix_sockets(config: GuardConfig, dns: FixedResolver) -> None:
    backend = PinnedBackend(GuardSettings(config), dns)
    with pytest.raises(OpError) as caught:
        await backend.connect_unix_socket("/run/docker.sock")
    assert (caught.value.code, caught.value.detail) == (ErrorCode.SSRF_BLOCKED, "unix-socket")
