"""Single-flight across daemons: identical concurrent downloads (fetch and prefetch) run once.

Within a daemon, ``specialists.web.pages.loading`` already joins concurrent loads of one URL;
the one task that would download asks here first. It claims ``p fl:<sha256 of the key>`` with
``SET NX PX`` (the lease is its own deadline, so a daemon that dies mid-download frees the key
by itself). The winner downloads, stores the result in the shared cache, then deletes the
claim and publishes a ``flight`` event in one script. The others wait for that event, at most
``redis.flight_wait_s`` and their own deadline, then read the cache: one request upstream for
the fleet. A follower re-raises the leader's failure when it is about the URL (not the
leader's own deadline or rate token), and downloads itself when the wait ends without a page,
when the event subscription is down, or when Redis is unavailable (counted as fallbacks).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, TypeVar

import trio

from csp_web.core.api.errors import OpError
from protocol import ErrorCode

from .redis_link import RedisLink, RedisUnavailable

T = TypeVar("T")

_FINISH = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
redis.call('PUBLISH', ARGV[3], ARGV[2])
return 1
"""

LEASE_MARGIN_S = 1.0  # a claim outlives its leader's deadline by this much


@dataclass
class _Wait:
    done: trio.Event = field(default_factory=trio.Event)
    error: tuple[ErrorCode, str] | None = None  # the leader's failure, when shareable


class SharedFlights:
    """The fleet's downloads in flight; one per daemon, over its link."""

    def __init__(self, link: RedisLink) -> None:
        self._link = link
        self._waits: dict[str, _Wait] = {}
        self._finish = link.client.register_script(_FINISH)
        self.led = 0
        self.followed = 0
        link.on_event("flight", self._on_event)

    def _claim_key(self, key: str) -> tuple[str, str]:
        digest = hashlib.sha256(key.encode("utf-8")).hexdigest()
        return digest, self._link.key("fl", digest)

    async def run(
        self,
        key: str,
        *,
        deadline: float,
        lead: Callable[[], Awaitable[T]],
        reuse: Callable[[], Awaitable[T | None]],
        shareable: Callable[[OpError], bool],
    ) -> T:
        """``lead()`` unless another daemon is already at it; then its result through
        ``reuse()`` (a cache read), its shareable failure, or ``lead()`` after the wait."""
        digest, claim_key = self._claim_key(key)
        if not self._link.events_live:  # nobody could tell us the peer's download ended
            self._link.fallback("flight_local")
            return await lead()
        lease_ms = max(1, math.ceil((deadline - trio.current_time() + LEASE_MARGIN_S) * 1000))
        owner = self._link.daemon_id
        try:
            claimed = await self._link.call(
                lambda r: r.set(claim_key, owner, nx=True, px=lease_ms), "flight_claim"
            )
        except RedisUnavailable:
            self._link.fallback("flight_local")
            return await lead()
        if claimed:
            self.led += 1
            return await self._lead(digest, claim_key, lead, shareable)
        self.followed += 1
        return await self._follow(digest, deadline, lead, reuse)

    async def _lead(
        self,
        digest: str,
        claim_key: str,
        lead: Callable[[], Awaitable[T]],
        shareable: Callable[[OpError], bool],
    ) -> T:
        error: OpError | None = None
        try:
            return await lead()
        except OpError as exc:
            error = exc if shareable(exc) else None
            raise
        finally:
            data: dict[str, Any] = {"flight": digest}
            if error is not None:
                data |= {"code": str(error.code), "detail": error.detail}
            event = self._link.event("flight", **data)
            args = [self._link.daemon_id, event, self._link.channel]
            # Shielded, bounded by the call's own deadline; when it fails, the followers' wait
            # and the claim's lease both run out.
            with trio.CancelScope(shield=True), suppress(RedisUnavailable):
                await self._link.call(
                    lambda r: self._finish(keys=[claim_key], args=args, client=r),
                    "flight_finish",
                )

    async def _follow(
        self,
        digest: str,
        deadline: float,
        lead: Callable[[], Awaitable[T]],
        reuse: Callable[[], Awaitable[T | None]],
    ) -> T:
        wait = self._waits.setdefault(digest, _Wait())
        try:
            result = await reuse()  # the leader may have finished before we listened
            if result is not None:
                return result
            bound = min(deadline, trio.current_time() + self._link.config.flight_wait_s)
            with trio.move_on_at(bound):
                await wait.done.wait()
        finally:
            if self._waits.get(digest) is wait and not wait.done.is_set():
                del self._waits[digest]
        if wait.error is not None:
            code, detail = wait.error
            raise OpError(code, detail)
        result = await reuse()
        if result is not None:
            return result
        self._link.fallback("flight_lead_after_wait")
        return await lead()

    def _on_event(self, message: dict[str, Any]) -> None:
        wait = self._waits.pop(str(message.get("flight")), None)
        if wait is None:
            return
        code, detail = message.get("code"), message.get("detail")
        if isinstance(code, str) and isinstance(detail, str):
            member = ErrorCode._value2member_map_.get(code)  # else the follower downloads
            if isinstance(member, ErrorCode):
                wait.error = (member, detail)
        wait.done.set()
