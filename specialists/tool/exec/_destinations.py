"""A program rule's ``network`` and ``env``, checked strictly when the config is loaded.

``network`` lists where a program may connect through its lane of the guard proxy
(_network.py): ``host`` or ``host:port``, 443 when no port is written, as ``npm``'s registry
or a package index is reached. A host is matched exactly as written (lower-cased, a final dot
dropped): no wildcard, no suffix match, so ``registry.npmjs.org`` never lets in
``evil.registry.npmjs.org``. An IP literal that the deny table refuses (private, loopback,
link-local, metadata...) is a config error rather than a rule that would never work; a name is
judged at connect time, by what it resolves to, as fetch judges it.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from csp_web.config.guard import HOST_LABEL
from csp_web.net.denylist import deny_rule

DEFAULT_PORT = 443  # the registries, indexes and git hosts these rules are for speak https
MAX_DESTINATIONS = 64  # per rule: a registry, its CDN, a mirror; more is a wide-open rule
_MAX_HOST_CHARS = 253  # RFC 1035 §2.3.4, without the final dot
_PORT = re.compile(r"[0-9]{1,5}")
_NUMERIC_LABEL = re.compile(r"[0-9]+|0x[0-9a-f]*")  # a last label like this is an address
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Set by the engine for a command with a network rule (_network.py); a rule may not set them.
PROXY_ENV = frozenset(
    {
        *("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"),
        *("NO_PROXY", "no_proxy", "npm_config_proxy", "npm_config_https_proxy"),
        *("npm_config_noproxy", "npm_config_no_proxy"),
    }
)


@dataclass(frozen=True, slots=True, order=True)
class Destination:
    """One ``host:port`` a rule lets its program reach; ``host`` is lower-case, an IPv6
    address without brackets."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_destinations(entries: Iterable[str]) -> tuple[Destination, ...]:
    """Each ``host[:port]`` entry parsed. Raises ValueError naming the first entry with a bad
    host or port, an IP literal the deny table refuses, a duplicate, or past
    ``MAX_DESTINATIONS``."""
    found: list[Destination] = []
    for entry in entries:
        destination = parse_destination(entry)
        if destination in found:
            raise ValueError(f"network: {entry!r} is listed twice")
        found.append(destination)
    if len(found) > MAX_DESTINATIONS:
        raise ValueError(f"network: at most {MAX_DESTINATIONS} destinations per program")
    return tuple(found)


def parse_destination(entry: str) -> Destination:
    """``host``, ``host:port``, ``[v6]`` or ``[v6]:port``; ValueError naming ``entry``."""
    if entry.startswith("["):
        literal, bracket, rest = entry[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(f"network: {entry!r} is not host[:port]")
        host, port = _ip_host(literal, entry), _port(rest[1:] if rest else None, entry)
        return Destination(host, port)
    name, colon, port_text = entry.partition(":")
    return Destination(_host(name, entry), _port(port_text if colon else None, entry))


def _port(text: str | None, entry: str) -> int:
    if text is None:
        return DEFAULT_PORT
    if not _PORT.fullmatch(text) or not 0 < int(text) < 65536:
        raise ValueError(f"network: {entry!r} has no TCP port (1-65535)")
    return int(text)


def _host(text: str, entry: str) -> str:
    host = text.lower().removesuffix(".")
    labels = host.split(".")
    if (
        not host.isascii()
        or len(host) > _MAX_HOST_CHARS
        or not all(HOST_LABEL.fullmatch(label) for label in labels)
    ):
        raise ValueError(f"network: {entry!r} is not a host name (no wildcards; IDNs as xn--)")
    if _NUMERIC_LABEL.fullmatch(labels[-1]):
        return _ip_host(host, entry)
    return host


def _ip_host(text: str, entry: str) -> str:
    """An IP literal's canonical spelling; ValueError when it is not one in canonical form
    (``010.1.1.1``, ``2130706433``) or the deny table refuses it."""
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        raise ValueError(f"network: {entry!r} is not a host name or an IP address") from None
    if ip.version == 4 and str(ip) != text:
        raise ValueError(f"network: {entry!r} is not a canonical IPv4 address")
    rule = deny_rule(ip)
    if rule is not None:
        raise ValueError(f"network: {entry!r} is an address the guard refuses ({rule})")
    return ip.compressed


# What a rule's env may set: an allow list, since the names that make some tool load code
# are endless (PYTHONWARNINGS with BROWSER, npm_config_script_shell, PERL5DB, LUA_INIT,
# RUSTC_WRAPPER, PHPRC, MAVEN_OPTS, CLASSPATH, OPENSSL_CONF, PIP_CONFIG_FILE, EDITOR...).
# Each below names a file of certificates, a registry or index URL, or a yes/no, a count or
# a time: none is a path to code or a command line.
RULE_ENV = frozenset(
    {
        # CA bundles for a TLS-inspecting proxy or a private registry
        *("NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE"),
        *("CURL_CA_BUNDLE", "PIP_CERT", "npm_config_cafile"),
        # where packages come from
        *("npm_config_registry", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST"),
        # how hard a tool tries and what it chatters about
        *("npm_config_fetch_retries", "npm_config_fetch_timeout", "npm_config_audit"),
        *("npm_config_fund", "npm_config_update_notifier", "npm_config_progress"),
        *("PIP_DISABLE_PIP_VERSION_CHECK", "PIP_NO_CACHE_DIR", "PIP_TIMEOUT", "PIP_RETRIES"),
        *("PIP_NO_INPUT", "PIP_PROGRESS_BAR", "TZ", "LANG", "LC_ALL", "NO_COLOR"),
    }
)


def check_rule_env(env: Mapping[str, str], refused: Callable[[str], bool]) -> None:
    """ValueError naming a variable a rule may not set: a malformed name, one ``refused``
    says no to (the engine's own and code-loading names: ``config.env_refused``), a proxy
    variable, which the engine sets for a network rule (``PROXY_ENV``), anything else not in
    ``RULE_ENV``, or a value with a NUL."""
    for name, value in env.items():
        if not _ENV_NAME.fullmatch(name):
            raise ValueError(f"env: {name!r} is not a variable name")
        if refused(name) or name in PROXY_ENV:
            raise ValueError(f"env may not set {name}: the engine owns it or it loads code")
        if name not in RULE_ENV:
            raise ValueError(
                f"env may not set {name}: a rule sets only certificate, registry and"
                " quiet-down variables (docs/exec-policy.md)"
            )
        if "\0" in value:
            raise ValueError(f"env: {name} holds a NUL")
