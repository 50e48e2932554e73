"""The deny table: which addresses a fetch may never connect to, each row with a rule name.

The table is explicit CIDRs from the IANA special-purpose registries (RFC 6890 and its
successors), not ``ipaddress.is_private``/``is_global``, whose answers have changed between
Python releases. Rows that hide an IPv4 address inside IPv6 (mapped, compatible, NAT64, 6to4,
Teredo) unwrap it and judge it by the IPv4 rows; a denial then reads ``<ipv4-rule>-via-<row>``.

A refusal names the rule that fired and never the address, so a FAIL reply cannot be used to
map the inside of the network.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass

from csp_web.config.guard import GuardConfig, Network, split_allow_list
from csp_web.core.errors import OpError
from protocol import ErrorCode

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Unwrap = Callable[[ipaddress.IPv6Address], ipaddress.IPv4Address | None]


@dataclass(frozen=True)
class Rule:
    """One row: addresses in ``network`` are denied as ``name``.

    A row with ``unwrap`` denies only when the IPv4 address it extracts is denied; otherwise
    the later rows still judge the IPv6 address itself.
    """

    name: str
    network: Network
    unwrap: Unwrap | None = None


def _v4(name: str, cidr: str) -> Rule:
    return Rule(name, ipaddress.IPv4Network(cidr))


def _v6(name: str, cidr: str, unwrap: Unwrap | None = None) -> Rule:
    return Rule(name, ipaddress.IPv6Network(cidr), unwrap)


def _low32(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(int(ip) & 0xFFFF_FFFF)


def _sixtofour(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    return ip.sixtofour


def _teredo_client(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    # The client address is the bit-inverted last 32 bits (RFC 4380 §4); ipaddress inverts it.
    teredo = ip.teredo
    return None if teredo is None else teredo[1]


IPV4_RULES: tuple[Rule, ...] = (
    _v4("this-network-0/8", "0.0.0.0/8"),  # RFC 791
    _v4("private-10/8", "10.0.0.0/8"),  # RFC 1918
    _v4("cgnat-100.64/10", "100.64.0.0/10"),  # RFC 6598
    _v4("loopback-127/8", "127.0.0.0/8"),  # RFC 1122
    _v4("link-local-169.254/16", "169.254.0.0/16"),  # RFC 3927; cloud metadata lives here
    _v4("private-172.16/12", "172.16.0.0/12"),  # RFC 1918
    _v4("ietf-192.0.0/24", "192.0.0.0/24"),  # RFC 6890
    _v4("test-net-1-192.0.2/24", "192.0.2.0/24"),  # RFC 5737
    _v4("6to4-relay-192.88.99/24", "192.88.99.0/24"),  # RFC 7526
    _v4("private-192.168/16", "192.168.0.0/16"),  # RFC 1918
    _v4("benchmark-198.18/15", "198.18.0.0/15"),  # RFC 2544
    _v4("test-net-2-198.51.100/24", "198.51.100.0/24"),  # RFC 5737
    _v4("test-net-3-203.0.113/24", "203.0.113.0/24"),  # RFC 5737
    _v4("multicast-224/4", "224.0.0.0/4"),  # RFC 5771
    _v4("broadcast-255.255.255.255", "255.255.255.255/32"),  # RFC 919; before 240/4 to name it
    _v4("reserved-240/4", "240.0.0.0/4"),  # RFC 1112
)

IPV6_RULES: tuple[Rule, ...] = (
    _v6("unspecified-::/128", "::/128"),  # RFC 4291; before ::/96, which contains it
    _v6("loopback-::1/128", "::1/128"),  # RFC 4291
    _v6("ipv4-mapped", "::ffff:0:0/96", _low32),  # RFC 4291 §2.5.5.2
    _v6("ipv4-compatible", "::/96", _low32),  # RFC 4291 §2.5.5.1, deprecated
    _v6("ipv4-translated", "::ffff:0:0:0/96", _low32),  # RFC 2765 (SIIT), ::ffff:0:a.b.c.d
    _v6("nat64", "64:ff9b::/96", _low32),  # RFC 6052
    # RFC 8215 local-use NAT64; we read the IPv4 where the common /96 deployment puts it.
    _v6("nat64-local", "64:ff9b:1::/48", _low32),
    _v6("6to4", "2002::/16", _sixtofour),  # RFC 3056
    _v6("teredo", "2001::/32", _teredo_client),  # RFC 4380; 2001::/23 below denies it anyway
    _v6("ietf-2001::/23", "2001::/23"),  # RFC 2928
    _v6("discard-100::/64", "100::/64"),  # RFC 6666
    _v6("documentation-2001:db8::/32", "2001:db8::/32"),  # RFC 3849
    _v6("documentation-3fff::/20", "3fff::/20"),  # RFC 9637
    _v6("srv6-sid-5f00::/16", "5f00::/16"),  # RFC 9602, segment routing, not the Internet
    _v6("ula-fc00::/7", "fc00::/7"),  # RFC 4193
    _v6("link-local-fe80::/10", "fe80::/10"),  # RFC 4291
    _v6("site-local-fec0::/10", "fec0::/10"),  # RFC 3879, deprecated but still routed inside
    _v6("multicast-ff00::/8", "ff00::/8"),  # RFC 4291
)


def deny_rule(ip: IPAddress) -> str | None:
    """The name of the first deny-table row that refuses ``ip``, or None when it may be used."""
    if isinstance(ip, ipaddress.IPv4Address):
        return next((rule.name for rule in IPV4_RULES if ip in rule.network), None)
    for rule in IPV6_RULES:
        if ip not in rule.network:
            continue
        if rule.unwrap is None:
            return rule.name
        inner = rule.unwrap(ip)
        inner_rule = None if inner is None else deny_rule(inner)
        if inner_rule is not None:
            return f"{inner_rule}-via-{rule.name}"
    return None


def embedded_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 wrapper row carries, if ``ip`` falls in one."""
    if isinstance(ip, ipaddress.IPv4Address):
        return None
    for rule in IPV6_RULES:
        if rule.unwrap is not None and ip in rule.network:
            return rule.unwrap(ip)
    return None


def is_allowed(ip: IPAddress, config: GuardConfig) -> bool:
    """Whether ``allow_private`` opens ``ip`` (or the IPv4 address it wraps)."""
    networks, _names = split_allow_list(config.allow_private)
    candidates = [ip, embedded_ipv4(ip)]
    return any(
        c is not None and c.version == net.version and c in net
        for c in candidates
        for net in networks
    )


def check_address(ip: IPAddress | str, config: GuardConfig) -> None:
    """Refuse ``ip`` unless the deny table passes it or ``allow_private`` opens it.

    Raises OpError(SSRF_BLOCKED, <rule name>); the detail never holds the address.
    Raises ValueError when a string ``ip`` is not an IP address.
    """
    if isinstance(ip, str):
        ip = ipaddress.ip_address(ip)
    if is_allowed(ip, config):
        return
    rule = deny_rule(ip)
    if rule is not None:
        raise OpError(ErrorCode.SSRF_BLOCKED, rule)
