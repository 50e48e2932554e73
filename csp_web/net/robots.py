"""robots.txt verdicts per origin, fetched through the guard and cached for a while.

How an answer maps to a verdict follows RFC 9309 §2.3.1:

    2xx                     the parsed rules decide (protego)
    4xx, too many redirects "unavailable": allow all
    5xx                     "unreachable": disallow all
    over robots_max_bytes   disallow all: rules we cannot read are not rules we can keep
    no answer at all        no verdict: the network error propagates (DNS_FAILED,
                            FETCH_FAILED "connect_failed", "timeout"...)

RFC 9309 also counts a network failure as "unreachable"; we still fetch nothing then, but a
host that cannot be resolved or reached is reported as what happened, not as a robots.txt
refusal (issue 8.15): ROBOTS_DISALLOWED means robots.txt was read and forbids the URL.
Verdicts that came from an HTTP answer are cached per scheme+host+port for ``robots_ttl_s``;
a failure without an answer is not cached, so the next operation asks again. The gate's and
the deny table's refusals are not verdicts either: they propagate as OpError.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio
from protego import Protego

from csp_web.config.guard import GuardConfig
from csp_web.core.api.errors import OpError
from csp_web.net.result import FetchResult
from csp_web.net.urlgate import ParsedUrl
from protocol import ErrorCode

FetchRobots = Callable[[ParsedUrl], Awaitable[FetchResult]]


@dataclass(frozen=True)
class Verdict:
    """Whether a URL may be fetched, and why; ``reason`` becomes the ROBOTS_DISALLOWED detail."""

    allowed: bool
    reason: str


@dataclass(frozen=True)
class _Entry:
    expires_at: float
    rules: Protego | None  # None: no rules, ``verdict`` stands for every path
    verdict: Verdict


class RobotsCache:
    """Per-origin robots.txt verdicts for one ``user_agent``; bounded to
    ``robots_cache_entries`` origins, the oldest dropped first."""

    def __init__(self, config: GuardConfig, fetch: FetchRobots) -> None:
        self._config = config
        self._fetch = fetch
        self._entries: dict[tuple[str, str, int], _Entry] = {}

    async def check(self, url: ParsedUrl) -> Verdict:
        """The verdict for ``url``, fetching its origin's robots.txt when none is cached.

        Raises OpError(URL_REJECTED | SSRF_BLOCKED) when the guard refuses robots.txt itself,
        and OpError(DNS_FAILED | FETCH_FAILED) when robots.txt got no HTTP answer at all.
        """
        entry = self._entries.get(url.origin)
        if entry is None or trio.current_time() >= entry.expires_at:
            self._entries.pop(url.origin, None)
            entry = await self._load(url)
        if entry.rules is None:
            return entry.verdict
        if entry.rules.can_fetch(url.url, self._config.user_agent):
            return Verdict(True, "allowed_by_rules")
        return Verdict(False, "disallowed_by_rules")

    async def _load(self, url: ParsedUrl) -> _Entry:
        robots_url = ParsedUrl(url.scheme, url.host, url.port, "/robots.txt")
        try:
            result = await self._fetch(robots_url)
        except OpError as exc:
            entry = _entry_for_error(exc, self._expiry())
        else:
            entry = _entry_for(result, self._expiry())
        self._remember(url.origin, entry)
        return entry

    def _expiry(self) -> float:
        return trio.current_time() + self._config.robots_ttl_s

    def _remember(self, origin: tuple[str, str, int], entry: _Entry) -> None:
        self._entries[origin] = entry
        while len(self._entries) > self._config.robots_cache_entries:
            del self._entries[next(iter(self._entries))]


def _entry_for(result: FetchResult, expires_at: float) -> _Entry:
    status = result.status_code
    if 200 <= status < 300:
        rules = Protego.parse(result.body.decode("utf-8", errors="replace"))
        return _Entry(expires_at, rules, Verdict(True, "allowed_by_rules"))
    if 500 <= status < 600:
        return _Entry(expires_at, None, Verdict(False, "robots_server_error"))
    # 4xx, and any 1xx/3xx left over once redirects stopped: RFC 9309 "unavailable".
    return _Entry(expires_at, None, Verdict(True, "robots_unavailable"))


def _entry_for_error(exc: OpError, expires_at: float) -> _Entry:
    if exc.code == ErrorCode.TOO_MANY_REDIRECTS:
        return _Entry(expires_at, None, Verdict(True, "robots_unavailable"))
    if exc.code == ErrorCode.TOO_LARGE:
        return _Entry(expires_at, None, Verdict(False, "robots_too_large"))
    raise exc
