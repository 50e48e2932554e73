"""The guard's settings on reload (issue 9.6): the client and its connection backend read one
current reference; an operation keeps the settings it started with; pooled connections
checked under the old allow-lists never carry a request made under the new ones."""

from __future__ import annotations

import dataclasses
import ssl
from collections.abc import AsyncIterator

import pytest
import trio

from csp_web.core.api.errors import OpError
from csp_web.net import GuardConfig, GuardedClient, open_guarded_client
from protocol import ErrorCode

from ._dns import FixedResolver
from ._origin import PAGE, WAIT_S, Origin, Reply, Seen

LOOPBACK = ("127.0.0.1",)


@pytest.fixture
def closed(config: GuardConfig) -> GuardConfig:
    """The test config with loopback not opened: the origins are private addresses."""
    return dataclasses.replace(config, allow_private=())


@pytest.fixture
async def shut_client(
    closed: GuardConfig, dns: FixedResolver, trust: ssl.SSLContext
) -> AsyncIterator[GuardedClient]:
    async with open_guarded_client(closed, resolver=dns, ssl_context=trust) as opened:
        yield opened


async def _blocked(client: GuardedClient, url: str) -> str:
    with trio.fail_after(WAIT_S), pytest.raises(OpError) as caught:
        await client.fetch(url)
    assert caught.value.code == ErrorCode.SSRF_BLOCKED
    return caught.value.detail


async def test_widening_allow_private_opens_the_origin_to_the_next_fetch(
    shut_client: GuardedClient, config: GuardConfig, origin: Origin
) -> None:
    await _blocked(shut_client, origin.url("origin.test"))
    shut_client.prepare_reload(config)()
    with trio.fail_after(WAIT_S):
        result = await shut_client.fetch(origin.url("origin.test"))
    assert (result.status_code, result.body) == (200, PAGE)
    assert shut_client.config.allow_private == LOOPBACK


async def test_narrowing_allow_private_blocks_the_next_fetch_even_over_a_pooled_connection(
    client: GuardedClient, closed: GuardConfig, origin: Origin
) -> None:
    with trio.fail_after(WAIT_S):
        await client.fetch(origin.url("origin.test"))
    assert origin.connections == 1  # kept alive in the pool, checked under the old rules
    client.prepare_reload(closed)()
    await _blocked(client, origin.url("origin.test"))
    await _blocked(client, origin.url("127.0.0.1"))
    assert len(origin.requests) == 1


async def test_a_reload_before_commit_changes_nothing(
    client: GuardedClient, closed: GuardConfig, origin: Origin
) -> None:
    client.prepare_reload(closed)  # checked, never committed (another service refused)
    with trio.fail_after(WAIT_S):
        result = await client.fetch(origin.url("origin.test"))
    assert result.status_code == 200


async def test_a_fetch_running_at_a_reload_keeps_its_settings_to_its_last_hop(
    client: GuardedClient, closed: GuardConfig, origin: Origin
) -> None:
    commit = client.prepare_reload(closed)

    def reload_then_redirect(seen: Seen) -> Reply:
        commit()  # lands while the fetch is between its first hop and the next
        return Reply(302, [("location", origin.url("other.test"))])

    origin.routes["/reload"] = reload_then_redirect
    with trio.fail_after(WAIT_S):
        result = await client.fetch(origin.url("origin.test", "/reload"))
    # The second hop connected to a new origin name, under the settings the fetch began with.
    assert result.redirect_chain == (
        origin.url("origin.test", "/reload"),
        origin.url("other.test"),
    )
    await _blocked(client, origin.url("other.test"))
