"""robots.txt: fetched through the guard, cached per origin for a TTL, and mapped to verdicts
as RFC 9309 §2.3.1 says (4xx allow, 5xx disallow; no answer at all is the network error)."""

from __future__ import annotations

import ssl

import pytest
import trio
import trio.testing

from csp_web.core.api.errors import OpError
from csp_web.net import GuardConfig, GuardedClient, open_guarded_client
from protocol import ErrorCode

from ._dns import FixedResolver
from ._origin import PAGE, WAIT_S, Origin, Reply, Seen

RULES = b"User-agent: *\nDisallow: /private\n"


def robots_count(origin: Origin) -> int:
    return origin.paths().count("/robots.txt")


async def refusal(client: GuardedClient, url: str) -> str:
    """The ROBOTS_DISALLOWED detail a robots-respecting fetch of ``url`` raises."""
    with trio.fail_after(WAIT_S), pytest.raises(OpError) as caught:
        await client.fetch(url, respect_robots=True)
    assert caught.value.code == ErrorCode.ROBOTS_DISALLOWED
    return caught.value.detail


async def test_rules_allow_some_paths_and_refuse_others(
    client: GuardedClient, origin: Origin
) -> None:
    origin.robots = Reply(body=RULES)
    with trio.fail_after(WAIT_S):
        result = await client.fetch(origin.url("origin.test"), respect_robots=True)
        assert await client.robots_allowed(origin.url("origin.test", "/page"))
        assert not await client.robots_allowed(origin.url("origin.test", "/private/x"))
    assert result.body == PAGE
    assert await refusal(client, origin.url("origin.test", "/private/x")) == "disallowed_by_rules"
    assert "/private/x" not in origin.paths()


async def test_a_group_for_our_user_agent_token_applies_to_us(
    client: GuardedClient, origin: Origin
) -> None:
    origin.robots = Reply(body=b"User-agent: csp-web\nDisallow: /\n\nUser-agent: *\nAllow: /\n")
    assert await refusal(client, origin.url("origin.test")) == "disallowed_by_rules"


@pytest.mark.parametrize("status", [500, 503])
async def test_a_server_error_robots_txt_disallows_everything(
    client: GuardedClient, origin: Origin, status: int
) -> None:
    origin.robots = Reply(status)
    assert await refusal(client, origin.url("origin.test")) == "robots_server_error"
    assert origin.paths() == ["/robots.txt"]


@pytest.mark.parametrize("status", [401, 403, 404, 410])
async def test_a_client_error_robots_txt_allows_everything(
    client: GuardedClient, origin: Origin, status: int
) -> None:
    origin.robots = Reply(status)
    with trio.fail_after(WAIT_S):
        result = await client.fetch(origin.url("origin.test", "/private"), respect_robots=True)
    assert result.status_code == 404  # the origin has no /private page; robots let us ask


async def test_a_robots_txt_without_an_answer_fails_as_itself_and_is_asked_again_next_time(
    client: GuardedClient, origin: Origin
) -> None:
    """RFC 9309's "unreachable" still fetches nothing, but the reply says what happened."""
    origin.robots = Reply(hangup=True)
    for _ in range(2):
        with trio.fail_after(WAIT_S), pytest.raises(OpError) as caught:
            await client.fetch(origin.url("origin.test"), respect_robots=True)
        assert (caught.value.code, caught.value.detail) == (
            ErrorCode.FETCH_FAILED,
            "protocol_error",
        )
    assert origin.paths() == ["/robots.txt", "/robots.txt"]


async def test_a_host_that_does_not_resolve_is_dns_failed_not_a_robots_verdict(
    client: GuardedClient, origin: Origin
) -> None:
    with trio.fail_after(WAIT_S), pytest.raises(OpError) as caught:
        await client.fetch(origin.url("nowhere.test"), respect_robots=True)
    assert (caught.value.code, caught.value.detail) == (ErrorCode.DNS_FAILED, "no_such_host")
    with trio.fail_after(WAIT_S), pytest.raises(OpError) as asked:
        await client.robots_allowed(origin.url("nowhere.test"))
    assert asked.value.code == ErrorCode.DNS_FAILED


async def test_fetches_that_do_not_ask_never_read_robots_txt(
    client: GuardedClient, origin: Origin
) -> None:
    origin.robots = Reply(500)
    with trio.fail_after(WAIT_S):
        await client.fetch(origin.url("origin.test"))
    assert origin.paths() == ["/page"]


async def test_robots_txt_is_cached_until_the_ttl_and_fetched_again_at_it(
    client: GuardedClient, origin: Origin, mock_clock: trio.testing.MockClock
) -> None:
    origin.robots = Reply(body=RULES)

    async def fetch_counting_robots() -> int:
        with trio.fail_after(WAIT_S):  # one bound per fetch: jumps would expire a shared one
            await client.fetch(origin.url("origin.test"), respect_robots=True)
        return robots_count(origin)

    assert [await fetch_counting_robots(), await fetch_counting_robots()] == [1, 1]
    mock_clock.jump(3599)
    assert await fetch_counting_robots() == 1
    mock_clock.jump(1)
    assert await fetch_counting_robots() == 2


async def test_every_redirect_hop_answers_to_its_own_origins_robots_txt(
    client: GuardedClient, origin: Origin
) -> None:
    def robots_by_host(seen: Seen) -> Reply:
        closed = seen.headers["host"].startswith("other.test")
        return Reply(body=b"User-agent: *\nDisallow: /\n" if closed else b"")

    origin.routes["/robots.txt"] = robots_by_host
    origin.routes["/away"] = lambda _seen: Reply(302, [("location", origin.url("other.test"))])
    assert await refusal(client, origin.url("origin.test", "/away")) == "disallowed_by_rules"
    assert origin.paths() == ["/robots.txt", "/away", "/robots.txt"]


async def test_a_robots_txt_redirect_is_followed(client: GuardedClient, origin: Origin) -> None:
    origin.robots = Reply(301, [("location", "/real-robots")])
    origin.routes["/real-robots"] = lambda _seen: Reply(body=RULES)
    assert await refusal(client, origin.url("origin.test", "/private")) == "disallowed_by_rules"


async def test_a_robots_txt_with_too_many_redirects_counts_as_unavailable(
    client: GuardedClient, origin: Origin
) -> None:
    origin.robots = Reply(302, [("location", "/chain/4")])
    with trio.fail_after(WAIT_S):
        assert await client.robots_allowed(origin.url("origin.test", "/private"))


@pytest.fixture
def small_robots_config(config: GuardConfig) -> GuardConfig:
    return GuardConfig(
        allowed_ports=config.allowed_ports,
        allow_private=config.allow_private,
        robots_max_bytes=100,
        robots_cache_entries=1,
    )


@pytest.mark.parametrize(("size", "allowed"), [(100, True), (101, False)])
async def test_a_robots_txt_of_robots_max_bytes_is_read_and_one_more_byte_disallows(
    origin: Origin,
    small_robots_config: GuardConfig,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    size: int,
    allowed: bool,
) -> None:
    origin.robots = Reply(body=(b"# " + b"x" * 200)[: size - 1] + b"\n")
    async with open_guarded_client(small_robots_config, resolver=dns, ssl_context=trust) as client:
        with trio.fail_after(WAIT_S):
            assert await client.robots_allowed(origin.url("origin.test")) is allowed


@pytest.mark.parametrize(("entries", "fetches"), [(1, 3), (2, 2)])
async def test_the_robots_cache_holds_at_most_its_entry_budget(
    origin: Origin,
    small_robots_config: GuardConfig,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    entries: int,
    fetches: int,
) -> None:
    config = GuardConfig(
        allowed_ports=small_robots_config.allowed_ports,
        allow_private=small_robots_config.allow_private,
        robots_cache_entries=entries,
    )
    async with open_guarded_client(config, resolver=dns, ssl_context=trust) as client:
        with trio.fail_after(WAIT_S):
            for host in ("origin.test", "other.test", "origin.test"):
                await client.robots_allowed(origin.url(host))
    assert robots_count(origin) == fetches


async def test_robots_allowed_refuses_a_url_the_guard_refuses(
    client: GuardedClient, origin: Origin
) -> None:
    with trio.fail_after(WAIT_S), pytest.raises(OpError) as caught:
        await client.robots_allowed(origin.url("private.test"))
    assert (caught.value.code, caught.value.detail) == (ErrorCode.SSRF_BLOCKED, "private-10/8")
    with pytest.raises(OpError) as caught:
        await client.robots_allowed("https://localhost/")
    assert caught.value.code == ErrorCode.URL_REJECTED
    assert origin.connections == 0
