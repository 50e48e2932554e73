"""The deny table alone: every row refuses its range by name, hidden IPv4 is unwrapped, the
allow-list opens what it names and nothing else."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from csp_web.core.api.errors import OpError
from csp_web.net import GuardConfig, check_address, deny_rule
from csp_web.net.denylist import IPV4_RULES, IPV6_RULES, Rule, rfc6052_ipv4
from protocol import ErrorCode

# One address inside every row, and the rule that must name it.
HOSTILE_ADDRESSES = [
    ("0.1.2.3", "this-network-0/8"),
    ("10.2.3.4", "private-10/8"),
    ("100.64.0.1", "cgnat-100.64/10"),
    ("127.0.0.1", "loopback-127/8"),
    ("127.255.255.254", "loopback-127/8"),
    ("169.254.169.254", "link-local-169.254/16"),
    ("172.16.0.1", "private-172.16/12"),
    ("172.31.255.255", "private-172.16/12"),
    ("192.0.0.8", "ietf-192.0.0/24"),
    ("192.0.2.1", "test-net-1-192.0.2/24"),
    ("192.88.99.1", "6to4-relay-192.88.99/24"),
    ("192.168.1.1", "private-192.168/16"),
    ("198.18.0.1", "benchmark-198.18/15"),
    ("198.19.255.255", "benchmark-198.18/15"),
    ("198.51.100.7", "test-net-2-198.51.100/24"),
    ("203.0.113.9", "test-net-3-203.0.113/24"),
    ("224.0.0.1", "multicast-224/4"),
    ("239.255.255.250", "multicast-224/4"),
    ("240.0.0.1", "reserved-240/4"),
    ("255.255.255.255", "broadcast-255.255.255.255"),
    ("::", "unspecified-::/128"),
    ("::1", "loopback-::1/128"),
    ("fc00::1", "ula-fc00::/7"),
    ("fd12:3456::1", "ula-fc00::/7"),
    ("fe80::1", "link-local-fe80::/10"),
    ("fe80::1%eth0", "link-local-fe80::/10"),
    ("fec0::1", "site-local-fec0::/10"),
    ("ff02::1", "multicast-ff00::/8"),
    ("100::1", "discard-100::/64"),
    ("2001:db8::1", "documentation-2001:db8::/32"),
    ("3fff::1", "documentation-3fff::/20"),
    ("5f00::1", "srv6-sid-5f00::/16"),
    ("::ffff:0:7f00:1", "loopback-127/8-via-ipv4-translated"),
    ("::ffff:0:a00:1", "private-10/8-via-ipv4-translated"),
    ("2001:2::1", "ietf-2001::/23"),
    ("::ffff:10.0.0.1", "private-10/8-via-ipv4-mapped"),
    ("::ffff:7f00:1", "loopback-127/8-via-ipv4-mapped"),
    ("::ffff:169.254.169.254", "link-local-169.254/16-via-ipv4-mapped"),
    ("::10.0.0.1", "private-10/8-via-ipv4-compatible"),
    ("::127.0.0.1", "loopback-127/8-via-ipv4-compatible"),
    ("64:ff9b::127.0.0.1", "loopback-127/8-via-nat64"),
    ("64:ff9b::a9fe:a9fe", "link-local-169.254/16-via-nat64"),
    ("64:ff9b:1::a00:1", "private-10/8-via-nat64-local"),
    ("2002:a00:1::1", "private-10/8-via-6to4"),
    ("2002:7f00:1::", "loopback-127/8-via-6to4"),
    # Teredo: client 10.0.0.1 stored bit-inverted as f5ff:fffe (RFC 4380 §4).
    ("2001:0:4136:e378:8000:63bf:f5ff:fffe", "private-10/8-via-teredo"),
    # Teredo with a public client (8.8.8.8, inverted f7f7:f7f7): 2001::/23 refuses it still.
    ("2001:0:4136:e378:8000:63bf:f7f7:f7f7", "ietf-2001::/23"),
    # Issue 22: the local-use NAT64 prefix (RFC 8215) in each RFC 6052 layout that fits in it,
    # each embedding 127.0.0.1; the issue's own address reads 8.8.8.8 as /96, 127.0.0.1 as /48.
    ("64:ff9b:1:7f00:0:100:808:808", "loopback-127/8-via-nat64-local"),
    ("64:ff9b:1:7f00:0:100::", "loopback-127/8-via-nat64-local"),  # /48
    ("64:ff9b:1:7f:0:1::", "loopback-127/8-via-nat64-local"),  # /56
    ("64:ff9b:1::7f:0:100:0", "loopback-127/8-via-nat64-local"),  # /64
    ("64:ff9b:1::7f00:1", "loopback-127/8-via-nat64-local"),  # /96
    ("64:ff9b:1:a9:fe:a9fe::", "link-local-169.254/16-via-nat64-local"),  # /56 IMDS
    # ...and the prefix itself is not globally reachable (IANA special-purpose registry).
    ("64:ff9b:1:808:8:808:808:808", "nat64-local-64:ff9b:1::/48"),  # 8.8.8.8 in every layout
    # Teredo's server address (bits 32-63) is judged as well as its client.
    ("2001:0:7f00:1:8000:63bf:f7f7:f7f7", "loopback-127/8-via-teredo"),
    # ISATAP (RFC 5214) under a public prefix tunnels to the IPv4 in its interface ID.
    ("2606:4700::5efe:7f00:1", "loopback-127/8-via-isatap"),
    ("2606:4700::200:5efe:a9fe:a9fe", "link-local-169.254/16-via-isatap"),
    ("2606:4700::100:5efe:a00:1", "private-10/8-via-isatap"),
    # Outside 2000::/3 nothing is global unicast: a compatible address of a public IPv4
    # address, the NAT64 /32 beyond its /96, and the reserved blocks.
    ("::8.8.8.8", "reserved-::/3"),
    ("64:ff9b:0:0:1::808:808", "reserved-::/3"),
    ("64:ff9b:7f00:1::", "reserved-::/3"),
    ("400::1", "reserved-::/3"),
    ("4000::1", "reserved-4000::/2"),
    ("8000::1", "reserved-8000::/1"),
    ("e000::1", "reserved-8000::/1"),
]

PUBLIC_ADDRESSES = [
    "8.8.8.8",
    "1.1.1.1",
    "100.128.0.0",
    "172.32.0.0",
    "198.20.0.0",
    "223.255.255.255",
    "2606:4700:4700::1111",
    "2001:200::1",
    "::ffff:8.8.8.8",
    "64:ff9b::8.8.8.8",
    "2002:808:808::1",
    "2606:4700::5efe:808:808",
    "2606:4700::200:5efe:808:808",
]


@pytest.mark.parametrize(("address", "rule"), HOSTILE_ADDRESSES)
def test_each_deny_row_refuses_its_range_naming_the_rule_not_the_address(
    address: str, rule: str
) -> None:
    with pytest.raises(OpError) as caught:
        check_address(ipaddress.ip_address(address), GuardConfig())
    assert (caught.value.code, caught.value.detail) == (ErrorCode.SSRF_BLOCKED, rule)
    assert address not in str(caught.value).replace(rule, "")


@pytest.mark.parametrize("address", PUBLIC_ADDRESSES)
def test_public_addresses_pass_the_deny_table(address: str) -> None:
    check_address(ipaddress.ip_address(address), GuardConfig())


@pytest.mark.parametrize("rule", IPV4_RULES, ids=lambda rule: rule.name)
def test_each_ipv4_row_covers_its_first_and_last_address_and_not_its_neighbours(
    rule: Rule,
) -> None:
    first = int(rule.network.network_address)
    last = int(rule.network.broadcast_address)
    assert deny_rule(ipaddress.IPv4Address(first)) == rule.name
    # 255.255.255.255, the last of 240/4, is named by its own broadcast row.
    assert deny_rule(ipaddress.IPv4Address(last)) in (rule.name, "broadcast-255.255.255.255")
    for neighbour in (first - 1, last + 1):
        if 0 <= neighbour < 2**32:
            assert deny_rule(ipaddress.IPv4Address(neighbour)) != rule.name


# Wrapper rows judge the IPv4 inside them; the hypothesis properties below cover those.
PLAIN_IPV6_RULES = [rule for rule in IPV6_RULES if rule.unwrap is None]


@pytest.mark.parametrize("rule", PLAIN_IPV6_RULES, ids=lambda rule: rule.name)
def test_each_plain_ipv6_row_refuses_its_first_and_last_address_and_not_its_neighbours(
    rule: Rule,
) -> None:
    first = int(rule.network.network_address)
    last = int(rule.network.broadcast_address)
    # An earlier, narrower row (Teredo inside 2001::/23) may be the one that names it.
    assert deny_rule(ipaddress.IPv6Address(first)) is not None
    assert deny_rule(ipaddress.IPv6Address(last)) is not None
    for neighbour in (first - 1, last + 1):
        if 0 <= neighbour < 2**128:
            assert deny_rule(ipaddress.IPv6Address(neighbour)) != rule.name


ipv4s = st.integers(min_value=0, max_value=2**32 - 1).map(ipaddress.IPv4Address)
WRAPPERS = {
    "ipv4-mapped": lambda v4: ipaddress.IPv6Address(0xFFFF_0000_0000 | int(v4)),
    "nat64": lambda v4: ipaddress.IPv6Address((0x64FF9B << 96) | int(v4)),
    "6to4": lambda v4: ipaddress.IPv6Address((0x2002 << 112) | (int(v4) << 80)),
}


@pytest.mark.parametrize("wrapper", sorted(WRAPPERS))
@given(v4=ipv4s)
def test_an_ipv4_address_hidden_in_ipv6_gets_the_verdict_of_the_bare_address(
    wrapper: str, v4: ipaddress.IPv4Address
) -> None:
    inner = deny_rule(v4)
    expected = None if inner is None else f"{inner}-via-{wrapper}"
    assert deny_rule(WRAPPERS[wrapper](v4)) == expected


@given(v4=ipv4s)
def test_teredo_is_refused_and_names_a_denied_client_address(v4: ipaddress.IPv4Address) -> None:
    inverted = int(v4) ^ 0xFFFF_FFFF
    teredo = ipaddress.IPv6Address((0x2001_0000 << 96) | (0x4136E378 << 64) | inverted)
    inner = deny_rule(v4)
    assert deny_rule(teredo) == ("ietf-2001::/23" if inner is None else f"{inner}-via-teredo")


def test_check_address_takes_the_address_as_text_too() -> None:
    with pytest.raises(OpError) as caught:
        check_address("169.254.169.254", GuardConfig())
    assert caught.value.detail == "link-local-169.254/16"
    with pytest.raises(ValueError, match="does not appear to be an IPv4 or IPv6 address"):
        check_address("example.com", GuardConfig())


def test_allow_list_opens_an_address_it_names_and_its_mapped_form() -> None:
    config = GuardConfig(allow_private=("127.0.0.0/8", "10.1.2.3"))
    for address in ("127.0.0.1", "::ffff:127.0.0.1", "10.1.2.3"):
        check_address(ipaddress.ip_address(address), config)


def test_allow_list_leaves_neighbouring_private_addresses_refused() -> None:
    config = GuardConfig(allow_private=("10.1.2.3", "fd00::/64"))
    for address, rule in (("10.1.2.4", "private-10/8"), ("fd00:0:0:1::1", "ula-fc00::/7")):
        with pytest.raises(OpError) as caught:
            check_address(ipaddress.ip_address(address), config)
        assert caught.value.detail == rule


# RFC 6052 §2.4's table: 192.0.2.33 under 2001:db8:122:344::/96 and its shorter prefixes.
RFC6052_EXAMPLES = [
    ("2001:db8:c000:221::", 32),
    ("2001:db8:1c0:2:21::", 40),
    ("2001:db8:122:c000:2:2100::", 48),
    ("2001:db8:122:3c0:0:221::", 56),
    ("2001:db8:122:344:c0:2:2100:0", 64),
    ("2001:db8:122:344::192.0.2.33", 96),
]


@pytest.mark.parametrize(("address", "bits"), RFC6052_EXAMPLES)
def test_rfc6052_decoding_reads_the_rfc_s_own_examples(address: str, bits: int) -> None:
    decoded = rfc6052_ipv4(ipaddress.IPv6Address(address), bits)
    assert decoded == ipaddress.IPv4Address("192.0.2.33")


def _local_nat64(v4: ipaddress.IPv4Address, bits: int) -> ipaddress.IPv6Address:
    """``v4`` in the RFC 6052 layout of a ``bits`` prefix under 64:ff9b:1::/48."""
    prefix = 0x0064_FF9B_0001 << 80
    value = int(v4)
    if bits == 96:
        return ipaddress.IPv6Address(prefix | value)
    before_u = 64 - bits  # IPv4 bits that fit between the prefix and the u octet
    high, low = value >> (32 - before_u), value & ((1 << (32 - before_u)) - 1)
    return ipaddress.IPv6Address(prefix | (high << 64) | (low << (56 - (32 - before_u))))


@pytest.mark.parametrize("bits", [48, 56, 64, 96])
@given(v4=ipv4s)
def test_local_use_nat64_is_refused_and_names_a_denied_ipv4_in_any_layout(
    bits: int, v4: ipaddress.IPv4Address
) -> None:
    address = _local_nat64(v4, bits)
    assert rfc6052_ipv4(address, bits) == v4
    inner = deny_rule(v4)
    verdict = deny_rule(address)
    assert verdict is not None
    if inner is not None:
        assert verdict == f"{inner}-via-nat64-local"


@given(v4=ipv4s)
def test_an_isatap_interface_id_gets_the_verdict_of_its_ipv4_address(
    v4: ipaddress.IPv4Address,
) -> None:
    inner = deny_rule(v4)
    for u_bit in (0, 0x0200):
        isatap = ipaddress.IPv6Address(
            (0x2606_4700 << 96) | ((u_bit << 48) | (0x5EFE << 32)) | int(v4)
        )
        assert deny_rule(isatap) == (None if inner is None else f"{inner}-via-isatap")


def test_allow_list_opens_a_wrapped_address_only_when_it_names_every_reading() -> None:
    """64:ff9b:1:7f00:0:100:808:808 reads 8.8.8.8 as /96 and 127.0.0.1 as /48: opening
    8.8.8.8 (or 127.0.0.1) alone must not open it."""
    address = ipaddress.ip_address("64:ff9b:1:7f00:0:100:808:808")
    for allowed in ("8.8.8.8", "127.0.0.0/8"):
        with pytest.raises(OpError):
            check_address(address, GuardConfig(allow_private=(allowed,)))
    check_address(address, GuardConfig(allow_private=("64:ff9b:1::/48",)))


@pytest.mark.parametrize(
    ("address", "rule"),
    [
        ("fd00::5efe:7f00:1", "ula-fc00::/7"),
        ("2606:4700::5efe:7f00:1", "loopback-127/8-via-isatap"),
        ("2002:7f00:1::1", "loopback-127/8-via-6to4"),
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "loopback-127/8-via-teredo"),
    ],
)
def test_opening_an_ipv4_address_does_not_open_a_host_tunnelled_through_it(
    address: str, rule: str
) -> None:
    """A 6to4, Teredo or ISATAP address is another host behind the IPv4 endpoint: opening
    127.0.0.1 (as the tests' origins need) must not open fd00::5efe:7f00:1, a ULA host."""
    with pytest.raises(OpError) as caught:
        check_address(ipaddress.ip_address(address), GuardConfig(allow_private=("127.0.0.1",)))
    assert caught.value.detail == rule
