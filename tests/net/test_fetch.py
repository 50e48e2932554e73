"""The result of a plain fetch, the headers the client owns, and failures before any I/O."""

from __future__ import annotations

import json
import socket
import ssl

import httpx
import pytest
import trio

from csp_web.core.api.errors import OpError
from csp_web.net import GuardConfig, GuardedClient, open_guarded_client
from protocol import ErrorCode

from ._dns import FixedResolver
from ._origin import PAGE, WAIT_S, Origin, Reply


async def test_a_page_comes_back_with_its_url_status_type_charset_and_chain(
    client: GuardedClient, origin: Origin
) -> None:
    url = origin.url("origin.test")
    with trio.fail_after(WAIT_S):
        result = await client.fetch(url)
    assert (result.url, result.status_code, result.body) == (url, 200, PAGE)
    assert (result.content_type, result.charset) == ("text/html", "utf-8")
    assert result.redirect_chain == (url,)
    assert isinstance(result.headers, httpx.Headers)
    assert result.headers["content-length"] == str(len(PAGE))
    assert result.elapsed_s >= 0
    assert result.text() == PAGE.decode()


async def test_an_error_status_is_a_result_for_the_op_to_judge(
    client: GuardedClient, origin: Origin
) -> None:
    with trio.fail_after(WAIT_S):
        result = await client.fetch(origin.url("origin.test", "/status/404"))
    assert (result.status_code, result.body) == (404, b"status")


async def test_the_client_sends_its_user_agent_and_keeps_host_to_itself(
    client: GuardedClient, origin: Origin, config: GuardConfig
) -> None:
    with trio.fail_after(WAIT_S):
        await client.fetch(
            origin.url("origin.test", "/echo"), headers={"Host": "evil.test", "X-Kept": "1"}
        )
    seen = origin.requests[0].headers
    assert seen["user-agent"] == config.user_agent == "csp-web/0.1.0"
    assert seen["host"] == f"origin.test:{origin.port}"
    assert seen["x-kept"] == "1"


async def test_a_post_sends_its_content(client: GuardedClient, origin: Origin) -> None:
    with trio.fail_after(WAIT_S):
        result = await client.fetch(
            origin.url("origin.test", "/echo"), method="post", content=b'{"a": 1}'
        )
    assert json.loads(result.body)["body"] == '{"a": 1}'
    assert json.loads(result.body)["method"] == "POST"


async def test_a_head_request_reads_no_body_whatever_length_it_declares(
    client: GuardedClient, origin: Origin
) -> None:
    origin.routes["/big-brotli"] = lambda _seen: Reply(
        headers=[("content-encoding", "br")], body=b"x" * 2_000_000
    )
    with trio.fail_after(WAIT_S):
        result = await client.fetch(origin.url("origin.test", "/big-brotli"), method="HEAD")
    assert (result.status_code, result.body) == (200, b"")
    assert result.headers["content-length"] == "2000000"


async def test_a_refused_url_costs_no_lookup_and_no_connection(
    client: GuardedClient, origin: Origin, dns: FixedResolver
) -> None:
    with trio.fail_after(WAIT_S), pytest.raises(OpError) as caught:
        await client.fetch(f"http://origin.test:{origin.port}/page")
    assert (caught.value.code, caught.value.detail) == (ErrorCode.URL_REJECTED, "http-not-allowed")
    assert (dns.calls, origin.connections) == ([], 0)


async def test_a_port_with_no_listener_fails_as_connect_failed(
    dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    config = GuardConfig(allowed_ports=(closed_port,), allow_private=("127.0.0.1",))
    async with open_guarded_client(config, resolver=dns, ssl_context=trust) as client:
        with trio.fail_after(WAIT_S), pytest.raises(OpError) as caught:
            await client.fetch(f"https://origin.test:{closed_port}/")
    assert (caught.value.code, caught.value.detail) == (ErrorCode.FETCH_FAILED, "connect_failed")


async def test_a_server_that_hangs_up_without_answering_fails_the_fetch(
    client: GuardedClient, origin: Origin
) -> None:
    origin.routes["/hangup"] = lambda _seen: Reply(hangup=True)
    with trio.fail_after(WAIT_S), pytest.raises(OpError) as caught:
        await client.fetch(origin.url("origin.test", "/hangup"))
    assert (caught.value.code, caught.value.detail) == (ErrorCode.FETCH_FAILED, "protocol_error")


async def test_a_per_call_limit_may_not_be_negative(client: GuardedClient, origin: Origin) -> None:
    with pytest.raises(ValueError, match="negative"):
        await client.fetch(origin.url("origin.test"), max_body_bytes=-1)


async def test_a_client_opened_with_defaults_refuses_loopback(trust: ssl.SSLContext) -> None:
    async with open_guarded_client(ssl_context=trust) as client:
        with trio.fail_after(WAIT_S), pytest.raises(OpError) as caught:
            await client.fetch("https://127.0.0.1/")
    assert (caught.value.code, caught.value.detail) == (ErrorCode.SSRF_BLOCKED, "loopback-127/8")


async def test_allow_private_localhost_alone_lets_a_fetch_reach_a_loopback_origin(
    plain_origin: Origin,
) -> None:
    """Issue 9.7: ``[localhost]`` alone was still ssrf_blocked (its 127.0.0.1 judged anew)."""
    config = GuardConfig(
        allow_http=True, allowed_ports=(plain_origin.port,), allow_private=("localhost",)
    )
    dns = FixedResolver({"localhost": ["127.0.0.1"], "loopback.test": ["127.0.0.1"]})
    async with open_guarded_client(config, resolver=dns) as client:
        with trio.fail_after(WAIT_S):
            result = await client.fetch(plain_origin.url("localhost"))
        with trio.fail_after(WAIT_S), pytest.raises(OpError) as caught:
            await client.fetch(plain_origin.url("loopback.test"))
    assert result.body == PAGE
    assert (caught.value.code, caught.value.detail) == (ErrorCode.SSRF_BLOCKED, "loopback-127/8")
