"""Redirects: each hop passes the gate and the resolver again, the count is capped, and
credentials never cross to another origin."""

from __future__ import annotations

import json
import ssl
import urllib.parse

import pytest
import trio

from csp_web.core.api.errors import OpError
from csp_web.net import GuardConfig, GuardedClient, open_guarded_client
from protocol import ErrorCode

from ._dns import FixedResolver
from ._origin import PAGE, WAIT_S, Origin


def redirect(origin: Origin, to: str, *, status: int = 302, host: str = "origin.test") -> str:
    """A URL on ``origin`` that answers ``status`` with Location: ``to``."""
    query = urllib.parse.urlencode({"to": to, "status": status})
    return origin.url(host, f"/redirect?{query}")


async def fetch_echo(client: GuardedClient, url: str, **options: object) -> dict[str, object]:
    with trio.fail_after(WAIT_S):
        result = await client.fetch(url, **options)  # type: ignore[arg-type]
    echoed: dict[str, object] = json.loads(result.body)
    return echoed


async def test_a_chain_of_three_redirects_is_followed_and_recorded(
    client: GuardedClient, origin: Origin
) -> None:
    with trio.fail_after(WAIT_S):
        result = await client.fetch(origin.url("origin.test", "/chain/3"))
    assert result.body == PAGE
    assert result.redirect_chain == tuple(
        origin.url("origin.test", f"/chain/{n}") for n in (3, 2, 1, 0)
    )
    assert result.url == result.redirect_chain[-1]


async def test_a_chain_of_four_redirects_is_refused_as_too_many(
    client: GuardedClient, origin: Origin
) -> None:
    with trio.fail_after(WAIT_S), pytest.raises(OpError) as caught:
        await client.fetch(origin.url("origin.test", "/chain/4"))
    assert caught.value.code == ErrorCode.TOO_MANY_REDIRECTS
    assert origin.paths() == [f"/chain/{n}" for n in (4, 3, 2, 1)]


@pytest.mark.parametrize("limit", [0, 1, 2])
async def test_a_per_call_redirect_limit_allows_n_and_refuses_n_plus_one(
    client: GuardedClient, origin: Origin, limit: int
) -> None:
    with trio.fail_after(WAIT_S):
        await client.fetch(origin.url("origin.test", f"/chain/{limit}"), max_redirects=limit)
        with pytest.raises(OpError) as caught:
            await client.fetch(
                origin.url("origin.test", f"/chain/{limit + 1}"), max_redirects=limit
            )
    assert caught.value.code == ErrorCode.TOO_MANY_REDIRECTS


async def test_a_per_call_redirect_limit_cannot_raise_the_configured_one(
    client: GuardedClient, origin: Origin
) -> None:
    with trio.fail_after(WAIT_S), pytest.raises(OpError) as caught:
        await client.fetch(origin.url("origin.test", "/chain/4"), max_redirects=10)
    assert caught.value.code == ErrorCode.TOO_MANY_REDIRECTS


@pytest.mark.parametrize(
    ("location", "code", "rule"),
    [
        ("https://private.test:{port}/page", ErrorCode.SSRF_BLOCKED, "private-10/8"),
        ("https://10.0.0.1:{port}/page", ErrorCode.SSRF_BLOCKED, "private-10/8"),
        ("https://[::1]:{port}/page", ErrorCode.SSRF_BLOCKED, "loopback-::1/128"),
        ("https://169.254.169.254:{port}/", ErrorCode.SSRF_BLOCKED, "link-local-169.254/16"),
        ("https://origin.test:8443/page", ErrorCode.URL_REJECTED, "port-not-allowed"),
        ("http://origin.test:{port}/page", ErrorCode.URL_REJECTED, "http-not-allowed"),
        ("https://localhost:{port}/page", ErrorCode.URL_REJECTED, "blocked-name-localhost"),
        ("https://origin.test:{port}\\@evil/", ErrorCode.URL_REJECTED, "backslash"),
        ("https://user@origin.test:{port}/", ErrorCode.URL_REJECTED, "userinfo"),
        ("https://2130706433:{port}/", ErrorCode.URL_REJECTED, "numeric-host"),
        ("file:///etc/passwd", ErrorCode.URL_REJECTED, "scheme-not-allowed"),
        ("https://nowhere.test:{port}/", ErrorCode.DNS_FAILED, "no_such_host"),
    ],
)
async def test_a_redirect_hop_is_gated_and_resolved_like_the_first_request(
    client: GuardedClient, origin: Origin, location: str, code: ErrorCode, rule: str
) -> None:
    with trio.fail_after(WAIT_S), pytest.raises(OpError) as caught:
        await client.fetch(redirect(origin, location.format(port=origin.port)))
    assert (caught.value.code, caught.value.detail) == (code, rule)
    assert origin.paths() == ["/redirect"]


async def test_a_redirect_to_http_is_followed_when_http_is_allowed(
    origin: Origin, plain_origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    config = GuardConfig(
        allow_http=True,
        allowed_ports=(origin.port, plain_origin.port),
        allow_private=("127.0.0.1",),
    )
    async with open_guarded_client(config, resolver=dns, ssl_context=trust) as client:
        with trio.fail_after(WAIT_S):
            result = await client.fetch(redirect(origin, plain_origin.url("origin.test")))
    assert (result.url, result.body) == (plain_origin.url("origin.test"), PAGE)


CREDENTIALS = {
    "Authorization": "Bearer secret",
    "Cookie": "session=secret",
    "Proxy-Authorization": "Basic secret",
    "X-Api-Key": "secret",
    "X-Plain": "kept",
}


async def test_a_cross_origin_redirect_strips_every_credential_header(
    client: GuardedClient, origin: Origin
) -> None:
    url = redirect(origin, origin.url("other.test", "/echo"))
    echoed = await fetch_echo(client, url, headers=CREDENTIALS, credentials_headers={"x-api-key"})
    headers = echoed["headers"]
    assert isinstance(headers, dict)
    assert origin.requests[0].headers["authorization"] == "Bearer secret"
    assert not {"authorization", "cookie", "proxy-authorization", "x-api-key"} & headers.keys()
    assert headers["x-plain"] == "kept"


async def test_a_same_origin_redirect_keeps_credentials(
    client: GuardedClient, origin: Origin
) -> None:
    url = redirect(origin, "/echo")
    echoed = await fetch_echo(client, url, headers={"Authorization": "Bearer secret"})
    assert echoed["headers"]["authorization"] == "Bearer secret"  # type: ignore[index]


async def test_credentials_stripped_once_stay_stripped_back_on_the_first_origin(
    client: GuardedClient, origin: Origin
) -> None:
    back_home = redirect(origin, origin.url("origin.test", "/echo"), host="other.test")
    echoed = await fetch_echo(
        client, redirect(origin, back_home), headers={"Authorization": "Bearer secret"}
    )
    assert "authorization" not in echoed["headers"]  # type: ignore[operator]


async def test_a_cross_origin_redirect_with_credentials_is_refused_when_asked(
    client: GuardedClient, origin: Origin
) -> None:
    url = redirect(origin, origin.url("other.test", "/echo"))
    with trio.fail_after(WAIT_S), pytest.raises(OpError) as caught:
        await client.fetch(
            url, headers={"Authorization": "Bearer secret"}, follow_with_credentials=False
        )
    assert (caught.value.code, caught.value.detail) == (
        ErrorCode.FETCH_FAILED,
        "credentials_redirect",
    )
    assert origin.paths() == ["/redirect"]


async def test_refusing_credential_redirects_still_follows_when_none_are_attached(
    client: GuardedClient, origin: Origin
) -> None:
    url = redirect(origin, origin.url("other.test", "/echo"))
    echoed = await fetch_echo(client, url, follow_with_credentials=False)
    assert echoed["method"] == "GET"


@pytest.mark.parametrize(
    ("status", "method", "body"), [(303, "GET", ""), (302, "GET", ""), (307, "POST", "data")]
)
async def test_a_post_redirect_keeps_or_drops_method_and_body_by_status(
    client: GuardedClient, origin: Origin, status: int, method: str, body: str
) -> None:
    url = redirect(origin, "/echo", status=status)
    echoed = await fetch_echo(
        client, url, method="POST", content=b"data", headers={"Content-Type": "text/plain"}
    )
    assert (echoed["method"], echoed["body"]) == (method, body)
    assert ("content-type" in echoed["headers"]) == (method == "POST")  # type: ignore[operator]


async def test_a_cookie_one_response_sets_is_never_sent_again(
    client: GuardedClient, origin: Origin
) -> None:
    with trio.fail_after(WAIT_S):
        await client.fetch(origin.url("origin.test", "/set-cookie"))
    echoed = await fetch_echo(client, origin.url("origin.test", "/echo"))
    assert "cookie" not in echoed["headers"]  # type: ignore[operator]
