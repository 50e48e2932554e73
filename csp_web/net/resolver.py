"""Name resolution for the guard: one bounded lookup whose every answer the deny table judges.

``Resolver`` is the seam tests use to give fixed or hostile DNS answers; ``SystemResolver`` is
trio's threaded ``getaddrinfo``. ``resolve_checked`` is the one place a host name becomes
addresses, so what was checked is exactly what the backend connects to.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from typing import Protocol

import trio

from csp_web.config.guard import GuardConfig, split_allow_list
from csp_web.core.api.errors import OpError
from csp_web.net.denylist import IPAddress, check_address
from protocol import ErrorCode


class Resolver(Protocol):
    """Turns a host name into address strings, as ``getaddrinfo`` would.

    Raises OSError (``socket.gaierror``) when the name does not resolve. May take any time:
    ``resolve_checked`` bounds it.
    """

    async def resolve(self, host: str, port: int) -> Sequence[str]: ...


class SystemResolver:
    """The operating system's resolver, through ``trio.socket.getaddrinfo`` (a worker thread)."""

    async def resolve(self, host: str, port: int) -> Sequence[str]:
        infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        return [str(sockaddr[0]) for *_, sockaddr in infos]


async def resolve_checked(
    resolver: Resolver, host: str, port: int, config: GuardConfig
) -> list[IPAddress]:
    """The addresses ``host`` resolves to, in answer order, each passed by ``check_address``.

    An IP literal is checked without a lookup. Raises OpError(DNS_FAILED, "timeout") when the
    lookup outlives ``dns_timeout_s``, OpError(DNS_FAILED, "no_such_host") on a resolver
    error or an empty answer, and OpError(SSRF_BLOCKED, <rule>) when ANY answer is denied:
    one bad answer in a set is the signature of rebinding, not bad luck. A host name that
    ``allow_private`` names is opened with whatever it resolves to: the operator named the
    host, not its addresses (``[localhost]`` reaches 127.0.0.1 and ::1, issue 9.7).
    """
    literal = _ip_or_none(host)
    if literal is not None:
        check_address(literal, config)
        return [literal]
    answers = await _lookup(resolver, host, port, config.dns_timeout_s)
    addresses = [_parse_answer(answer) for answer in answers]
    if not addresses:
        raise OpError(ErrorCode.DNS_FAILED, "no_such_host")
    _networks, allowed_names = split_allow_list(config.allow_private)
    if host.lower().removesuffix(".") not in allowed_names:
        for address in addresses:
            check_address(address, config)
    return list(dict.fromkeys(addresses))


async def _lookup(resolver: Resolver, host: str, port: int, timeout_s: float) -> Sequence[str]:
    with trio.move_on_after(timeout_s):
        try:
            return await resolver.resolve(host, port)
        except OSError as exc:  # gaierror and friends; the message would leak resolver detail
            raise OpError(ErrorCode.DNS_FAILED, "no_such_host") from exc
    raise OpError(ErrorCode.DNS_FAILED, "timeout")


def _ip_or_none(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _parse_answer(answer: str) -> IPAddress:
    try:
        return ipaddress.ip_address(answer)
    except ValueError as exc:
        raise OpError(ErrorCode.DNS_FAILED, "bad_answer") from exc
