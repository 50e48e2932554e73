"""The daemon's one link to a shared Redis (``redis.url``): deadlines, fallbacks, events.

redis-py's asyncio client does not run under trio, so calls use the sync client in worker
threads: ``trio.to_thread.run_sync`` under a ``CapacityLimiter`` (``redis.max_threads``) with
``abandon_on_cancel=True``, inside ``trio.move_on_after(call_timeout_s)``. The client's socket
timeout is the same deadline, so an abandoned thread (a stopped server) ends by itself soon
after and gives its limiter token back; a hung Redis never hangs a reply.

    async with open_redis_link(config.redis) as link:     # None when redis.url is null
        value = await link.call(lambda r: r.get(link.key("x")), "cache_get")

A failed call raises ``RedisUnavailable`` (callers fall back: a cache miss, a skipped write,
a local bucket, a paused cron) and marks the link down for ``retry_s``: calls in that window
fall back at once, without a thread or a timeout, and the first call after it tries again,
so the link recovers without a restart. State changes are logged once each (WARNING down,
INFO up) and ``REQ:stats`` shows the ``REDIS`` line.

Events: one pub/sub channel, ``<prefix>events``, carries JSON messages between daemons
(``{"from": <daemon id>, "kind": ..., ...}``); ``on_event(kind, handler)`` registers a
handler, run on the trio thread. ``events_live`` says whether the subscription is up: while
it is not, messages may have been missed and the cache's memory tier is bypassed.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING, Any, TypeVar, cast

import trio

from csp_web.config.redis import RedisConfig
from protocol import NumberError, parse_int

if TYPE_CHECKING:  # imported when a link is made: embedded daemons never load redis-py
    import redis

log = logging.getLogger(__name__)

T = TypeVar("T")
EventHandler = Callable[[dict[str, Any]], None]

EVENT_POLL_S = 1.0  # the subscriber's longest blocking read (bounds its thread at shutdown)


class RedisUnavailable(Exception):
    """A Redis call failed or ran out of time; the caller falls back."""


def make_client(config: RedisConfig) -> redis.Redis:
    """The sync client for ``config``: timeouts equal to the call deadline, no retries (the
    link decides), TLS and ACL options, the password read from ``password_env``."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    password = os.environ.get(config.password_env) if config.password_env else None
    options: dict[str, Any] = {
        "username": config.username,
        "password": password,
        "socket_timeout": config.call_timeout_s,
        "socket_connect_timeout": config.connect_timeout_s,
        "retry": Retry(NoBackoff(), 0),
        "max_connections": config.max_threads + 2,
    }
    if config.sentinel is not None:
        from csp_web.infra.redis_sentinel import sentinel_master

        return sentinel_master(config, options)
    assert config.url is not None
    if config.url.startswith("rediss://"):
        options |= {
            "ssl_ca_certs": config.tls_ca_file,
            "ssl_certfile": config.tls_cert_file,
            "ssl_keyfile": config.tls_key_file,
        }
    if config.cluster:
        # The cluster client answers the same commands (and follows MOVED and ASK itself).
        return cast("redis.Redis", LazyCluster(config.url, options))
    return redis.Redis.from_url(config.url, **options)


class LazyCluster:
    """A Redis Cluster client made on first use, in the worker thread that first needs it.

    ``RedisCluster``'s constructor connects to learn the slot map: made at start it would block
    the event loop, and stop a daemon from starting while the cluster is down, where one
    server's link starts and falls back. Scripts are registered without it (their SHA needs
    only the encoder); a failed construction is a failed call, tried again after ``retry_s``.
    """

    def __init__(self, url: str, options: dict[str, Any]) -> None:
        self._url = url
        self._options = options
        self._client: Any = None
        self._closed = False
        self._lock = threading.Lock()

    def connected(self) -> Any:
        """The cluster client, made now if it is not yet (blocking: call it in a thread).
        Once closed, none is made: a thread abandoned at shutdown would leak its sockets."""
        from redis.cluster import RedisCluster
        from redis.exceptions import ConnectionError as RedisConnectionError

        with self._lock:
            if self._closed:
                raise RedisConnectionError("the link is closed")
            if self._client is None:
                self._client = RedisCluster.from_url(self._url, **self._options)
            return self._client

    def get_encoder(self) -> Any:
        from redis.connection import Encoder  # type: ignore[attr-defined]  # re-exported

        return Encoder("utf-8", "strict", False)  # type: ignore[no-untyped-call]  # redis-py's defaults

    def register_script(self, script: str) -> Any:
        from redis.commands.core import Script

        return Script(cast("redis.Redis", self), script)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._client is not None:
                # RedisCluster.close leaves the per-node pools' connections open.
                for node in self._client.get_nodes():
                    if node.redis_connection is not None:
                        node.redis_connection.connection_pool.disconnect()
                self._client.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.connected(), name)


class RedisLink:
    """Deadline-bounded calls to Redis with a down state, counters and the event channel."""

    def __init__(self, config: RedisConfig, client: redis.Redis) -> None:
        import redis

        self.config = config
        self.client = client
        from redis.exceptions import RedisClusterException

        # What a failed call raises: redis-py's errors (its cluster client's own too), and
        # OSError from a socket it did not wrap.
        self._errors: tuple[type[Exception], ...] = (
            redis.RedisError,
            RedisClusterException,
            OSError,
        )
        self.daemon_id = secrets.token_hex(6)  # tells this daemon's own events apart
        self.channel = config.key_prefix + "events"
        self._limiter = trio.CapacityLimiter(config.max_threads)
        self._down_since: float | None = None
        self._retry_at = -1.0
        # After the down window one call tries Redis (the probe) and the rest keep falling back
        # at once until it answers: every call in flight at the window's end used to try,
        # each in a thread of its own (issue 21: 2-5x slower with Redis stopped).
        self._probing = False
        self._handlers: dict[str, list[EventHandler]] = {}
        self.events_live = False
        self.events_changed = trio.Event()  # set (and replaced) whenever events_live changes
        self.calls = 0
        self.in_flight = 0  # calls waiting for a thread or a reply now
        self.failures = 0
        self.down_spells = 0  # how many times the link went down: tells outages apart
        self.round_trips = 0
        self.fallbacks: Counter[str] = Counter()
        self.last_error = ""
        self.eviction_policy: str | None = None  # Redis's maxmemory-policy, once read
        self._replica_acks = config.sentinel.replica_acks if config.sentinel is not None else 0

    @property
    def mode(self) -> str:
        """How Redis is reached: ``single`` (one server), ``cluster`` or ``sentinel``."""
        if self.config.sentinel is not None:
            return "sentinel"
        return "cluster" if self.config.cluster else "single"

    def key(self, *parts: str) -> str:
        return self.config.key_prefix + ":".join(parts)

    @property
    def up(self) -> bool:
        return self._down_since is None

    def available(self) -> bool:
        """Whether a call now would be tried (not inside the down window, and no other call
        already trying Redis after it)."""
        return self._down_since is None or (
            not self._probing and time.monotonic() >= self._retry_at
        )

    def seconds_to_retry(self) -> float:
        """How long calls still fall back at once (0 when up or the window has passed)."""
        return 0.0 if self._down_since is None else max(0.0, self._retry_at - time.monotonic())

    def integer(self, value: object, what: str) -> int:
        """An integer Redis replied: an int, or ASCII digits (one leading minus) as bytes or
        text, as GET returns a counter. Anything else (a key another client overwrote) is a
        call that failed: logged, and RedisUnavailable, so the caller falls back as usual."""
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        try:
            if not isinstance(value, bytes | str):
                raise NumberError(f"a {type(value).__name__}")
            return parse_int(value)
        except NumberError as exc:
            log.warning("redis %s: not an integer reply (%s)", what, exc.detail)
            raise RedisUnavailable(f"{what}: not an integer reply") from None

    def fallback(self, kind: str) -> None:
        """Count one fallback of ``kind`` (shown by ``REQ:stats``)."""
        self.fallbacks[kind] += 1

    async def call(
        self,
        fn: Callable[[redis.Redis], T],
        what: str,
        *,
        timeout_s: float | None = None,
        replicated: bool = False,
    ) -> T:
        """``fn(client)`` in a worker thread, within ``timeout_s`` (at most
        ``call_timeout_s``); ``fn`` should make one round trip (a pipeline or script counts
        as one). Raises RedisUnavailable when down, failed or late. ``replicated`` (a run
        claim): on a sentinel's master, the write counts only once ``sentinel.replica_acks``
        replicas hold it (``WAIT``, a second round trip), so a failover cannot lose it; when
        they do not in time, RedisUnavailable (counted as the fallback ``unreplicated``,
        the link staying up: the master answers)."""
        if replicated and self._replica_acks:
            return await self._call_replicated(fn, what, timeout_s)
        return await self._call(fn, what, timeout_s)

    async def _call_replicated(
        self, fn: Callable[[redis.Redis], T], what: str, timeout_s: float | None
    ) -> T:
        acks = self._replica_acks
        budget = self.config.call_timeout_s if timeout_s is None else timeout_s
        # WAIT's own timeout ends before the call's deadline (0 would wait for ever).
        wait_ms = max(1, int(min(budget, self.config.call_timeout_s) * 500))

        def write_and_wait(client: redis.Redis) -> tuple[T, int]:
            result = fn(client)
            return result, int(client.wait(acks, wait_ms))

        result, held = await self._call(write_and_wait, what, timeout_s)
        if held < acks:
            self.fallback("unreplicated")
            log.warning("redis %s: %d of %d replicas acknowledged in time", what, held, acks)
            raise RedisUnavailable(f"{what}: not replicated")
        return result

    async def _call(self, fn: Callable[[redis.Redis], T], what: str, timeout_s: float | None) -> T:
        if not self.available():
            raise RedisUnavailable(f"{what}: down ({self.last_error})")
        budget = self.config.call_timeout_s if timeout_s is None else timeout_s
        budget = min(budget, self.config.call_timeout_s)
        self.calls += 1
        self.round_trips += 1
        client = self.client
        probe = self._down_since is not None
        if probe:
            self._probing = True
        self.in_flight += 1
        try:
            with trio.move_on_after(max(budget, 0.0)) as scope:
                result = await trio.to_thread.run_sync(
                    lambda: fn(client), abandon_on_cancel=True, limiter=self._limiter
                )
        except self._errors as exc:
            self._failed(f"{what}: {type(exc).__name__}: {exc}")
            raise RedisUnavailable(self.last_error) from None
        finally:
            self.in_flight -= 1
            if probe:
                self._probing = False
        if scope.cancelled_caught:
            self._failed(f"{what}: no reply within {budget:.3f} s")
            raise RedisUnavailable(self.last_error)
        if self._down_since is not None:
            log.info("redis available again after %.1f s", time.monotonic() - self._down_since)
            self._down_since = None
        return result

    def _failed(self, error: str) -> None:
        self.failures += 1
        self.last_error = error
        self._retry_at = time.monotonic() + self.config.retry_s
        if self._down_since is None:
            self._down_since = time.monotonic()
            self.down_spells += 1
            log.warning("redis unavailable, falling back: %s", error)

    # --- events ---------------------------------------------------------------------------

    def on_event(self, kind: str, handler: EventHandler) -> None:
        self._handlers.setdefault(kind, []).append(handler)

    def event(self, kind: str, **data: Any) -> str:
        """The JSON text of an event from this daemon (scripts publish it with their write)."""
        return json.dumps({"from": self.daemon_id, "kind": kind, **data}, separators=(",", ":"))

    def _deliver(self, raw: bytes) -> None:
        # Anyone who may publish on the channel is inside the trust boundary (a fleet
        # daemon), but a malformed message must still cost one warning, never the events
        # task: a JSON object with a string ``kind``, else ignored; a handler's bug is logged.
        try:
            message = json.loads(raw)
        except (ValueError, RecursionError):
            message = None
        kind = message.get("kind") if isinstance(message, dict) else None
        if not isinstance(kind, str):
            log.warning("redis event ignored: not a csp-web event")
            return
        for handler in self._handlers.get(kind, ()):
            try:
                handler(message)
            except Exception:
                log.exception("redis event %s: its handler failed", kind[:64])

    def _set_live(self, live: bool) -> None:
        if live != self.events_live:
            self.events_live = live
            self.events_changed.set()
            self.events_changed = trio.Event()

    async def serve_background(
        self, port: object, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """The daemon's background task (run by the web specialist: ``Background``)."""
        task_status.started()
        await self.serve_events()

    async def serve_events(self) -> None:
        """Subscribe and deliver events until cancelled; resubscribes after a failure."""
        while True:
            pubsub: redis.client.PubSub | None = None
            try:
                # In a thread: a cluster's client connects when first used (``LazyCluster``).
                pubsub = await trio.to_thread.run_sync(self._pubsub, abandon_on_cancel=True)
                await self._listen(pubsub)
            except self._errors as exc:
                self.last_error = f"events: {type(exc).__name__}: {exc}"
                if self.events_live:
                    log.warning("redis events lost, memory tier bypassed: %s", exc)
            finally:
                self._set_live(False)
                if pubsub is not None:
                    _close_quietly(pubsub, self._errors)
            await trio.sleep(self.config.retry_s)

    def _pubsub(self) -> redis.client.PubSub:
        pubsub: redis.client.PubSub = self.client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
        return pubsub

    async def _listen(self, pubsub: redis.client.PubSub) -> None:
        limiter = trio.CapacityLimiter(1)
        await trio.to_thread.run_sync(
            pubsub.subscribe, self.channel, abandon_on_cancel=True, limiter=limiter
        )
        if not self.events_live:
            log.info("redis events subscribed on %s", self.channel)
        self._set_live(True)
        if self.eviction_policy is None:
            await self._read_eviction_policy()
        while True:
            message = await trio.to_thread.run_sync(
                lambda: pubsub.get_message(timeout=EVENT_POLL_S),
                abandon_on_cancel=True,
                limiter=limiter,
            )
            if message is not None and message.get("type") == "message":
                self._deliver(message["data"])

    async def _read_eviction_policy(self) -> None:
        """Read Redis's ``maxmemory-policy`` once and warn unless it is ``noeviction``: run
        claims, quotas, buckets and node links must never be evicted (docs/scaling.md). A
        server that refuses CONFIG (an ACL, a managed service) is taken at its word."""

        def read() -> str:
            replies: object
            if self.config.cluster:  # every master's: one that may evict is enough to warn
                replies = self.client.config_get("maxmemory-policy", target_nodes="primaries")
            else:
                replies = {"server": self.client.config_get("maxmemory-policy")}
            return _least_safe(replies)

        try:
            policy = await trio.to_thread.run_sync(
                read, abandon_on_cancel=True, limiter=self._limiter
            )
        except self._errors as exc:
            log.info("redis maxmemory-policy not readable (%s): make sure it is noeviction", exc)
            self.eviction_policy = "unreadable"
            return
        self.eviction_policy = policy
        if policy != "noeviction":
            log.warning(
                "redis maxmemory-policy is %s: run claims, quotas and rate limits may be "
                "evicted under memory pressure; set noeviction (docs/scaling.md)",
                policy[:64],
            )

    async def quiesce(self) -> None:
        """Wait until no worker thread uses the client (each ends within its socket
        timeouts), so that closing it leaves no connection a late thread opened after."""
        config = self.config
        with trio.move_on_after(config.call_timeout_s + config.connect_timeout_s + 1):
            for _ in range(int(self._limiter.total_tokens)):
                await self._limiter.acquire_on_behalf_of(object())

    def stats_line(self) -> str:
        """The ``REDIS`` line of ``REQ:stats``."""
        data: dict[str, Any] = {
            "state": "up" if self.up else "down",
            "mode": self.mode,
            "events": "live" if self.events_live else "lost",
            "calls": self.calls,
            "failures": self.failures,
            "round_trips": self.round_trips,
            "fallbacks": dict(sorted(self.fallbacks.items())),
        }
        if not self.up:
            data["error"] = self.last_error
        if self.eviction_policy not in (None, "noeviction", "unreadable"):
            data["eviction"] = self.eviction_policy  # claims and quotas may be evicted
        return json.dumps(data, separators=(",", ":"))


def _least_safe(replies: object) -> str:
    """The maxmemory-policy in ``replies`` (node -> CONFIG GET reply) that is not noeviction,
    if any, else noeviction; "unknown" for a reply of another shape."""
    policies = set()
    for reply in replies.values() if isinstance(replies, dict) else ():
        value = reply.get("maxmemory-policy", "unknown") if isinstance(reply, dict) else "unknown"
        policies.add(value.decode() if isinstance(value, bytes) else str(value))
    unsafe = sorted(policies - {"noeviction"})
    return unsafe[0] if unsafe else ("noeviction" if policies else "unknown")


def _close_quietly(pubsub: redis.client.PubSub, errors: tuple[type[Exception], ...]) -> None:
    # Only closes the socket (no command is sent); a read still blocked on it in an abandoned
    # thread fails there, unseen.
    with suppress(*errors):
        pubsub.close()


@asynccontextmanager
async def open_redis_link(config: RedisConfig) -> AsyncIterator[RedisLink | None]:
    """The link when ``config.url`` or ``config.sentinel`` is set, else None. Its event
    subscriber is a background task (``serve_events``) the daemon runs, so nothing here
    wraps a caller's exception."""
    if not config.shared:
        yield None
        return
    link = RedisLink(config, make_client(config))
    try:
        yield link
    finally:
        with trio.CancelScope(shield=True):
            await link.quiesce()
            await trio.to_thread.run_sync(_close, link, abandon_on_cancel=True)


def _close(link: RedisLink) -> None:
    link.client.close()
    if link.config.sentinel is not None:  # the sentinels' connections too
        from csp_web.infra.redis_sentinel import close_sentinels

        close_sentinels(link.client)
