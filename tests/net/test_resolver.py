"""Resolution: bounded in time, every answer judged, hostile answers refused by rule name
before any connection, and the system resolver's answers judged like any other."""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import Sequence

import pytest
import trio

from csp_web.core.api.errors import OpError
from csp_web.net import GuardConfig, SystemResolver, open_guarded_client
from csp_web.net.resolver import resolve_checked
from protocol import ErrorCode

from ._dns import FixedResolver, HangingResolver
from ._origin import WAIT_S
from .test_denylist import HOSTILE_ADDRESSES


class SlowResolver:
    """Answers 8.8.8.8 after ``delay_s`` of (mock) time."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    async def resolve(self, host: str, port: int) -> Sequence[str]:
        await trio.sleep(self.delay_s)
        return ["8.8.8.8"]


@pytest.mark.parametrize(("address", "rule"), HOSTILE_ADDRESSES)
async def test_fetch_of_a_name_with_a_hostile_dns_answer_is_refused_by_rule(
    address: str, rule: str, trust: ssl.SSLContext
) -> None:
    dns = FixedResolver({"evil.example": [address]})
    async with open_guarded_client(GuardConfig(), resolver=dns, ssl_context=trust) as client:
        with trio.fail_after(WAIT_S), pytest.raises(OpError) as caught:
            await client.fetch("https://evil.example/")
    assert (caught.value.code, caught.value.detail) == (ErrorCode.SSRF_BLOCKED, rule)
    assert dns.calls == ["evil.example"]


async def test_one_hostile_answer_among_public_ones_refuses_the_whole_name() -> None:
    dns = FixedResolver({"mixed.example": ["8.8.8.8", "2606:4700::1", "10.0.0.1"]})
    with trio.fail_after(WAIT_S), pytest.raises(OpError) as caught:
        await resolve_checked(dns, "mixed.example", 443, GuardConfig())
    assert (caught.value.code, caught.value.detail) == (ErrorCode.SSRF_BLOCKED, "private-10/8")


async def test_public_answers_come_back_in_order_without_duplicates() -> None:
    dns = FixedResolver({"ok.example": ["8.8.8.8", "2606:4700::1", "8.8.8.8"]})
    with trio.fail_after(WAIT_S):
        addresses = await resolve_checked(dns, "ok.example", 443, GuardConfig())
    assert addresses == [ipaddress.ip_address("8.8.8.8"), ipaddress.ip_address("2606:4700::1")]


async def test_an_ip_literal_is_checked_without_asking_the_resolver() -> None:
    dns = FixedResolver({})
    with trio.fail_after(WAIT_S), pytest.raises(OpError) as caught:
        await resolve_checked(dns, "10.0.0.1", 443, GuardConfig())
    assert caught.value.detail == "private-10/8"
    assert dns.calls == []


@pytest.mark.parametrize(
    ("answers", "detail"), [([], "no_such_host"), (["not-an-address"], "bad_answer")]
)
async def test_empty_or_malformed_answers_fail_closed_as_dns_failed(
    answers: list[str], detail: str
) -> None:
    dns = FixedResolver({"odd.example": answers})
    with trio.fail_after(WAIT_S), pytest.raises(OpError) as caught:
        await resolve_checked(dns, "odd.example", 443, GuardConfig())
    assert (caught.value.code, caught.value.detail) == (ErrorCode.DNS_FAILED, detail)


async def test_a_name_that_does_not_resolve_fails_as_dns_failed() -> None:
    async with open_guarded_client(GuardConfig(), resolver=FixedResolver({})) as client:
        with trio.fail_after(WAIT_S), pytest.raises(OpError) as caught:
            await client.fetch("https://nowhere.example/")
    assert (caught.value.code, caught.value.detail) == (ErrorCode.DNS_FAILED, "no_such_host")


async def test_a_resolver_that_never_answers_fails_closed_at_dns_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = GuardConfig(dns_timeout_s=2.0)
    async with open_guarded_client(config, resolver=HangingResolver()) as client:
        started = trio.current_time()
        with trio.fail_after(WAIT_S), pytest.raises(OpError) as caught:
            await client.fetch("https://slow.example/")
    assert (caught.value.code, caught.value.detail) == (ErrorCode.DNS_FAILED, "timeout")
    assert trio.current_time() - started == pytest.approx(2.0)


async def test_an_answer_just_inside_dns_timeout_is_used_and_just_outside_is_not(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = GuardConfig(dns_timeout_s=2.0)
    with trio.fail_after(WAIT_S):
        assert await resolve_checked(SlowResolver(1.999), "a.example", 443, config)
        with pytest.raises(OpError) as caught:
            await resolve_checked(SlowResolver(2.001), "a.example", 443, config)
    assert (caught.value.code, caught.value.detail) == (ErrorCode.DNS_FAILED, "timeout")


async def test_system_resolver_answers_are_judged_by_the_deny_table() -> None:
    # localhost resolves from /etc/hosts, with no network; the gate would refuse the name
    # first, so this drives the resolver seam directly.
    with trio.fail_after(WAIT_S):
        answers = await SystemResolver().resolve("localhost", 443)
        with pytest.raises(OpError) as caught:
            await resolve_checked(SystemResolver(), "localhost", 443, GuardConfig())
    assert answers
    assert caught.value.code == ErrorCode.SSRF_BLOCKED
    assert caught.value.detail in ("loopback-127/8", "loopback-::1/128")


async def test_a_host_name_in_allow_private_reaches_the_private_addresses_it_resolves_to() -> None:
    """Issue 9.7: ``allow_private: [localhost]`` opens localhost, as the config comment says."""
    dns = FixedResolver({"localhost": ["127.0.0.1", "::1"], "printer.test": ["10.0.0.9"]})
    config = GuardConfig(allow_private=("localhost", "Printer.Test."))
    with trio.fail_after(WAIT_S):
        local = await resolve_checked(dns, "localhost", 443, config)
        printer = await resolve_checked(dns, "printer.test", 443, config)
    assert local == [ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")]
    assert printer == [ipaddress.ip_address("10.0.0.9")]


async def test_a_name_allow_private_does_not_list_is_still_judged_by_its_addresses() -> None:
    dns = FixedResolver({"localhost": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
    config = GuardConfig(allow_private=("localhost",))
    with trio.fail_after(WAIT_S), pytest.raises(OpError) as caught:
        await resolve_checked(dns, "other.test", 443, config)
    assert (caught.value.code, caught.value.detail) == (ErrorCode.SSRF_BLOCKED, "loopback-127/8")
