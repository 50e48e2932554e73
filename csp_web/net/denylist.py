"""The deny table: which addresses a fetch may never connect to, each row with a rule name.

The table is explicit CIDRs from the IANA special-purpose registries (RFC 6890 and its
successors), not ``ipaddress.is_private``/``is_global``, whose answers have changed between
Python releases. Rows that hide an IPv4 address inside IPv6 (mapped, compatible, translated,
NAT64 in every RFC 6052 layout its prefix admits, 6to4, Teredo server and client, ISATAP)
unwrap it and judge it by the same IPv4 rows; a denial then reads ``<ipv4-rule>-via-<row>``.
IPv6 outside 2000::/3 is refused, but for mapped and well-known-NAT64 addresses of a public
IPv4 address.

A refusal names the rule that fired and never the address, so a FAIL reply cannot be used to
map the inside of the network.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass

from csp_web.config.guard import GuardConfig, Network, split_allow_list
from csp_web.core.api.errors import OpError
from protocol import ErrorCode

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# Every IPv4 address an IPv6 address may stand for under a row's encoding (none, one, or one
# per layout the row admits).
Unwrap = Callable[[ipaddress.IPv6Address], tuple[ipaddress.IPv4Address, ...]]
_LOW64 = (1 << 64) - 1


@dataclass(frozen=True)
class Rule:
    """One row: addresses in ``network`` are denied as ``name``.

    A row with ``unwrap`` denies only when an IPv4 address it extracts is denied. Otherwise a
    ``final`` row passes the address (what it reaches is that IPv4 address, now judged), and
    any other row leaves the IPv6 address itself to the later rows. A ``tunnel`` row's IPv4
    address is a relay or endpoint on the way to another host, not the host itself, so
    ``allow_private`` naming it does not open the IPv6 address.
    """

    name: str
    network: Network
    unwrap: Unwrap | None = None
    final: bool = False
    tunnel: bool = False


def _v4(name: str, cidr: str) -> Rule:
    return Rule(name, ipaddress.IPv4Network(cidr))


def _v6(
    name: str,
    cidr: str,
    unwrap: Unwrap | None = None,
    *,
    final: bool = False,
    tunnel: bool = False,
) -> Rule:
    return Rule(name, ipaddress.IPv6Network(cidr), unwrap, final, tunnel)


def _low32(ip: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    return (ipaddress.IPv4Address(int(ip) & 0xFFFF_FFFF),)


def rfc6052_ipv4(ip: ipaddress.IPv6Address, prefix_bits: int) -> ipaddress.IPv4Address:
    """The IPv4 address RFC 6052 §2.2 embeds after a ``prefix_bits`` prefix (32, 40, 48, 56,
    64 or 96): the 32 bits that follow the prefix, skipping the reserved u octet (bits 64-71)."""
    value = int(ip)
    without_u = ((value >> 64) << 56) | (value & ((1 << 56) - 1))  # 120 bits
    start = prefix_bits if prefix_bits <= 64 else prefix_bits - 8
    return ipaddress.IPv4Address((without_u >> (120 - 32 - start)) & 0xFFFF_FFFF)


def _rfc6052_canonical(ip: ipaddress.IPv6Address, prefix_bits: int) -> bool:
    """Whether ``ip`` is a well-formed ``prefix_bits`` encoding: u octet and suffix zero."""
    value = int(ip)
    end = prefix_bits + 32 + (8 if prefix_bits <= 64 else 0)
    u_octet = (value >> 56) & 0xFF if prefix_bits < 96 else 0
    return u_octet == 0 and value & ((1 << (128 - end)) - 1) == 0


def _local_nat64(ip: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    # RFC 8215 §3 lets the local-use /48 be deployed as itself or any longer RFC 6052 prefix;
    # we cannot know which, and a translator may ignore the u octet and suffix, so every
    # layout that fits inside it is judged, well-formed ones first (they name the denial).
    # /32 and /40 do not fit: their IPv4 bits would be the /48's own bits.
    layouts = sorted((48, 56, 64, 96), key=lambda bits: not _rfc6052_canonical(ip, bits))
    return tuple(dict.fromkeys(rfc6052_ipv4(ip, bits) for bits in layouts))


def _sixtofour(ip: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    return () if ip.sixtofour is None else (ip.sixtofour,)


def _teredo(ip: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    # The server is bits 32-63, the client the bit-inverted last 32 bits (RFC 4380 §4);
    # ipaddress inverts it.
    return () if ip.teredo is None else ip.teredo


def _isatap(ip: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    # RFC 5214 §6.1: an interface ID of 0000:5efe or 0200:5efe then the IPv4 address, under
    # any /64 prefix; the u and g bits (0x03 of the first octet) are ignored, as routers do.
    iid = int(ip) & _LOW64
    if (iid >> 32) & 0xFCFF_FFFF != 0x0000_5EFE:
        return ()
    return (ipaddress.IPv4Address(iid & 0xFFFF_FFFF),)


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
    # Cloud host agents at public-range addresses. Azure, "What is IP address 168.63.129.16?":
    # the WireServer (VM agent, extension and certificate channel) and Azure DNS. The other
    # documented metadata services sit in rows above: 169.254.169.254 (AWS, Azure, GCE,
    # Oracle, DigitalOcean, Hetzner, OpenStack), 169.254.170.2 (AWS ECS task metadata),
    # 169.254.0.23 (Tencent), 169.254.42.42 (Scaleway), 100.100.100.200 (Alibaba, in CGNAT),
    # 192.0.0.192 (Oracle's older endpoint); fd00:ec2::254 (AWS) and fd20:ce::254 (GCE)
    # are ULA below.
    _v4("azure-wireserver-168.63.129.16", "168.63.129.16/32"),
)

IPV6_RULES: tuple[Rule, ...] = (
    _v6("unspecified-::/128", "::/128"),  # RFC 4291; before ::/96, which contains it
    _v6("loopback-::1/128", "::1/128"),  # RFC 4291
    # Mapped and well-known-NAT64 addresses reach exactly their IPv4 address: final rows.
    _v6("ipv4-mapped", "::ffff:0:0/96", _low32, final=True),  # RFC 4291 §2.5.5.2
    _v6("nat64", "64:ff9b::/96", _low32, final=True),  # RFC 6052 §2.1, /96 only
    _v6("ipv4-compatible", "::/96", _low32),  # RFC 4291 §2.5.5.1, deprecated
    _v6("ipv4-translated", "::ffff:0:0:0/96", _low32),  # RFC 2765 (SIIT), ::ffff:0:a.b.c.d
    _v6("nat64-local", "64:ff9b:1::/48", _local_nat64),  # RFC 8215
    # IANA special-purpose registry: the local-use prefix is not globally reachable.
    _v6("nat64-local-64:ff9b:1::/48", "64:ff9b:1::/48"),
    _v6("6to4", "2002::/16", _sixtofour, tunnel=True),  # RFC 3056
    # RFC 4380; 2001::/23 below denies it anyway.
    _v6("teredo", "2001::/32", _teredo, tunnel=True),
    _v6("ietf-2001::/23", "2001::/23"),  # RFC 2928
    _v6("discard-100::/64", "100::/64"),  # RFC 6666
    _v6("documentation-2001:db8::/32", "2001:db8::/32"),  # RFC 3849
    _v6("documentation-3fff::/20", "3fff::/20"),  # RFC 9637
    _v6("srv6-sid-5f00::/16", "5f00::/16"),  # RFC 9602, segment routing, not the Internet
    _v6("ula-fc00::/7", "fc00::/7"),  # RFC 4193
    _v6("link-local-fe80::/10", "fe80::/10"),  # RFC 4291
    _v6("site-local-fec0::/10", "fec0::/10"),  # RFC 3879, deprecated but still routed inside
    _v6("multicast-ff00::/8", "ff00::/8"),  # RFC 4291
    # Any prefix may carry an ISATAP interface ID, whose router tunnels to the IPv4 inside.
    _v6("isatap", "::/0", _isatap, tunnel=True),  # RFC 5214
    # IANA IPv6 address space: only 2000::/3 is global unicast; the rest is reserved by the
    # IETF or named above, and no Internet host lives there.
    _v6("reserved-::/3", "::/3"),
    _v6("reserved-4000::/2", "4000::/2"),
    _v6("reserved-8000::/1", "8000::/1"),
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
        for inner in rule.unwrap(ip):
            inner_rule = deny_rule(inner)
            if inner_rule is not None:
                return f"{inner_rule}-via-{rule.name}"
        if rule.final:
            return None
    return None


def embedded_ipv4s(ip: IPAddress) -> tuple[ipaddress.IPv4Address, ...]:
    """Every IPv4 host ``ip`` may stand for: the readings of the wrapper rows it falls in,
    tunnel rows left out (their IPv4 address is not the host)."""
    if isinstance(ip, ipaddress.IPv4Address):
        return ()
    found = (
        inner
        for rule in IPV6_RULES
        if rule.unwrap is not None and not rule.tunnel and ip in rule.network
        for inner in rule.unwrap(ip)
    )
    return tuple(dict.fromkeys(found))


def is_allowed(ip: IPAddress, config: GuardConfig) -> bool:
    """Whether ``allow_private`` opens ``ip``: it names ``ip``, or every IPv4 address ``ip``
    may stand for (opening 10.1.2.3 opens ::ffff:10.1.2.3, but not an address one of whose
    readings is 10.1.2.3 and another 127.0.0.1)."""
    networks, _names = split_allow_list(config.allow_private)

    def named(candidate: IPAddress) -> bool:
        return any(candidate.version == net.version and candidate in net for net in networks)

    inner = embedded_ipv4s(ip)
    return named(ip) or (bool(inner) and all(named(candidate) for candidate in inner))


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
