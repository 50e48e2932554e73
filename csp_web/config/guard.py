"""The guarded HTTP client's settings (``web.guard``, ``web.tls``, ``web.proxy``): frozen
dataclasses, units in the names, held by the web specialist's own section and found by the
rest of the daemon by their class (``shared_section``: the browser's guard proxy, replay).

Every default cites where it comes from. The TLS trust store is not data and is passed to
``csp_web.net.open_guarded_client`` instead; the running settings a reload swaps are
``csp_web.net.GuardSettings``.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from dataclasses import dataclass, field
from functools import lru_cache

from csp_web import __version__

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# One DNS label of letters, digits, hyphens and underscores (RFC 1123 plus the underscore that
# real service names such as _dmarc carry); labels of at most 63 octets (RFC 1035 §2.3.4).
HOST_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
MAX_HEADER_BYTES = 100 * 1024  # httpcore.AsyncHTTP11Connection.MAX_INCOMPLETE_EVENT_SIZE


@dataclass(frozen=True)
class GuardConfig:
    """What the guard lets through and how much it will spend on one operation."""

    allow_http: bool = False  # seed 001: "All URLs must use HTTPS"
    allowed_ports: tuple[int, ...] = (443,)  # 80 joins when allow_http is on
    # Private CIDRs or host names that tests and operators open on purpose; off by default.
    # A name passes the gate's blocked-name rows and reaches whatever addresses it resolves to.
    allow_private: tuple[str, ...] = ()
    max_redirects: int = field(default=3, metadata={"zero_ok": True})  # seed 001: at most 3
    timeout_s: float = 10.0  # seed 000: "Timeout: 10s per request", one deadline per operation
    max_body_bytes: int = 1_000_000  # seed 001: "Maximum download size: 1MB", bytes on the wire
    # What we hand on is never more than we would have accepted unencoded (seed 001's 1MB).
    max_decoded_bytes: int = 1_000_000
    # The response's status line and header fields, counted as parsed. 100 KiB is httpcore's
    # own cap on a header block still arriving (h11's max_incomplete_event_size) and curl's
    # CURL_MAX_HTTP_HEADER; it is also the most this may be, since httpcore buffers no more.
    max_header_bytes: int = MAX_HEADER_BYTES
    # sitemaps.org caps URLs at 2,048 characters, under the 2,083 of IE that browsers and CDNs
    # still treat as the portable maximum.
    max_url_chars: int = 2048
    # A slower answer has already spent a fifth of seed 000's 10 s budget; glibc's default of
    # 5 s per try (resolv.conf(5)) would spend half of it.
    dns_timeout_s: float = 2.0
    user_agent: str = f"csp-web/{__version__}"
    # RFC 9309 §2.4: a cached robots.txt SHOULD NOT be used for more than 24 hours; seed 000
    # keeps web results for 1 hour, and so do we.
    robots_ttl_s: float = 3600.0
    # RFC 9309 §2.5: crawlers MUST parse at least 500 KiB; we read no more than that.
    robots_max_bytes: int = 500 * 1024
    robots_cache_entries: int = 1000  # seed 001 bounds its cache (5,000); robots are per host

    def __post_init__(self) -> None:
        for port in self.allowed_ports:
            if not 0 < port < 65536:
                raise ValueError(f"allowed_ports: {port} is not a TCP port")
        for name in ("timeout_s", "dns_timeout_s", "robots_ttl_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive")
        for name in ("max_body_bytes", "max_decoded_bytes", "max_url_chars", "robots_max_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if not 0 < self.max_header_bytes <= MAX_HEADER_BYTES:
            raise ValueError(f"max_header_bytes must be between 1 and {MAX_HEADER_BYTES}")
        if self.max_redirects < 0 or self.robots_cache_entries < 1:
            raise ValueError("max_redirects must be >= 0 and robots_cache_entries >= 1")
        split_allow_list(self.allow_private)  # raises ValueError naming a bad entry

    @property
    def effective_ports(self) -> frozenset[int]:
        """The ports a URL may name: ``allowed_ports``, plus 80 when plain http is allowed."""
        return frozenset(self.allowed_ports) | ({80} if self.allow_http else set())


@lru_cache(maxsize=64)
def split_allow_list(entries: tuple[str, ...]) -> tuple[tuple[Network, ...], frozenset[str]]:
    """``allow_private`` as (networks, host names); a host name is lower-case, no final dot.

    Raises ValueError naming the first entry that is neither an address, a CIDR nor a host name.
    """
    networks: list[Network] = []
    names: set[str] = set()
    for entry in entries:
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
            continue
        except ValueError:
            pass
        name = entry.lower().removesuffix(".")
        if not all(HOST_LABEL.fullmatch(label) for label in name.split(".")):
            raise ValueError(f"allow_private: {entry!r} is not an address, CIDR or host name")
        names.add(name)
    return tuple(networks), frozenset(names)


@dataclass(frozen=True)
class TlsConfig:
    """Whom the web specialist's HTTPS requests trust. Verification is never off: these only
    add trust, so that a site behind a company CA can be read (issue 24)."""

    ca_file: str | None = None  # a PEM bundle added to certifi's roots (or to the OS store)
    # The OS trust store (the truststore package, MIT: the one maintained way to verify
    # against Linux, macOS and Windows stores from Python) instead of certifi's roots.
    system_store: bool = False


def proxy_address(url: str) -> tuple[str, int]:
    """(host, port) of a ``web.proxy`` URL. Raises ValueError unless it is
    ``http://host:port``: no other scheme, credentials (not supported yet), path or query."""
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"proxy: {url!r}: bad port") from exc
    if parts.scheme != "http" or not parts.hostname or port is None:
        raise ValueError(f"proxy: {url!r} is not http://host:port")
    if parts.username is not None or parts.path not in ("", "/") or parts.query:
        raise ValueError(f"proxy: {url!r}: only http://host:port (no credentials or path)")
    return parts.hostname, port
