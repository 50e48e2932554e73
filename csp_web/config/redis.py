"""The ``redis:`` section: shared state for a fleet of daemons (issue 13).

Without ``url`` every daemon keeps its state to itself (diskcache, local buckets, the cron
file), as before. With it, the response cache, rate limits and monthly quotas, download
single-flight and cron run claims live on one Redis server, so several daemons behave as one.
Secrets are never in the file: ``password_env`` names the environment variable that holds the
password (Redis AUTH, or the ACL user's password with ``username``).

``sentinel`` (in place of ``url``) finds the master through Redis Sentinel and follows its
failovers (docs/scaling.md, "Redis Sentinel").
"""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SentinelConfig:
    """Where the sentinels are and which master they watch (redis-py's ``Sentinel``)."""

    master: str  # the name the sentinels monitor the master by ("sentinel monitor <name> ...")
    sentinels: tuple[str, ...]  # host:port of each sentinel ([v6]:port), asked in this order
    # The sentinels' own AUTH (their requirepass): the master's is redis.password_env.
    password_env: str | None = None
    db: int = field(default=0, metadata={"zero_ok": True})  # the master's database number
    # TLS to the sentinels and the master alike, with redis.tls_* files (rediss:// for one server).
    tls: bool = False
    # A run claim counts only once this many replicas hold it (WAIT), so a failover cannot
    # lose it and let a second daemon run the same key (replication is asynchronous); with
    # none answering in time the claim fails and cron pauses. 0: no wait (a failover may
    # lose the last claims, and their runs may happen twice).
    replica_acks: int = field(default=1, metadata={"zero_ok": True})

    def __post_init__(self) -> None:
        if not self.master or any(c.isspace() for c in self.master):
            raise ValueError("master: expected the monitored master's name")
        if not self.sentinels:
            raise ValueError("sentinels: expected at least one host:port")
        if self.db < 0 or self.replica_acks < 0:
            raise ValueError("db, replica_acks: must not be negative")
        for entry in self.sentinels:
            sentinel_address(entry)

    def addresses(self) -> list[tuple[str, int]]:
        return [sentinel_address(entry) for entry in self.sentinels]


def sentinel_address(entry: str) -> tuple[str, int]:
    """(host, port) of ``host:port`` or ``[v6]:port``; ValueError naming the entry."""
    host, sep, port = entry.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"sentinels: {entry[:80]!r} is not host:port")
    if any(c.isspace() or c in "[]/@" for c in host):
        raise ValueError(f"sentinels: {entry[:80]!r} is not host:port")
    return host, int(port)


@dataclass(frozen=True)
class RedisConfig:
    # redis://host:port/db, rediss://host:port/db (TLS) or unix:///path/redis.sock; null: embedded
    url: str | None = None
    username: str | None = None  # an ACL user (Redis 6+); null: the default user
    password_env: str | None = None  # the environment variable holding the password
    tls_ca_file: str | None = None  # rediss:// only: the CA bundle that signs the server
    tls_cert_file: str | None = None  # rediss:// only: a client certificate, when required
    tls_key_file: str | None = None
    key_prefix: str = "csp-web:"  # every key and channel name starts with it
    # url names one node of a Redis Cluster (redis:// or rediss://): the client learns the
    # others and follows the cluster's redirections (docs/scaling.md: keys, slots, eviction).
    cluster: bool = False
    # Redis Sentinel instead of url: the sentinels name the master, and after a failover the
    # new one (docs/scaling.md, "Redis Sentinel"); null: url is the server itself.
    sentinel: SentinelConfig | None = None
    # Every Redis call ends within this (a thread's socket timeout is the same), so a slow or
    # stopped server costs a reply at most this much.
    call_timeout_s: float = 0.25
    connect_timeout_s: float = 0.25
    max_threads: int = 16  # Redis calls in flight at once (worker threads, pool connections)
    retry_s: float = 1.0  # after a failed call, calls fall back at once for this long
    # The share of each rate limit (and of a monthly quota's remainder) one daemon uses on its
    # own while Redis is down: 1 / the number of daemons keeps the fleet within the limit.
    fallback_share: float = 0.5
    # While Redis is down each cache (web, exec) keeps what it fetches on local disk, under
    # its memory tier, up to this many bytes (a row: its JSON value + 1 KiB) in
    # <cache dir>/redis-down, so a working set larger than the memory tier is not fetched
    # again (issue 21 §5); 0: memory tier only. The embedded disk cache's own default bound
    # (web.cache.size_limit_bytes); docs/scaling.md says what is kept and for how long.
    fallback_cache_bytes: int = field(default=256 * 1024 * 1024, metadata={"zero_ok": True})
    flight_wait_s: float = 15.0  # how long a daemon waits for a peer's download of the same URL
    cron_lease_s: float = 60.0  # a run claim outlives its daemon by at most this
    # Which daemon holds each node's link (p node:link:<name>), renewed every third of this
    # while connected: a dead daemon's entries end within it.
    node_lease_s: float = 30.0
    # A node task forwarded to the daemon holding the link fails node_unavailable when that
    # daemon does not take it within this (it died, or its events are down).
    node_ack_s: float = 2.0

    def __post_init__(self) -> None:
        if self.fallback_share > 1:
            raise ValueError("fallback_share: must be at most 1")
        if self.url is not None and not self.url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("url: expected redis://, rediss:// or unix://")
        if self.sentinel is not None and (self.url is not None or self.cluster):
            raise ValueError("sentinel: the sentinels name the master: url null, cluster false")
        if self.cluster and not (self.url or "").startswith(("redis://", "rediss://")):
            raise ValueError("cluster: needs url, a redis:// or rediss:// node of the cluster")
        if self.cluster and ("{" in self.key_prefix or "}" in self.key_prefix):
            raise ValueError("key_prefix: no { or } on a cluster (they would pick the key slot)")
        if self.cluster and urllib.parse.urlsplit(self.url or "").path.strip("/") not in ("", "0"):
            raise ValueError("cluster: a Redis Cluster has only database 0")

    @property
    def shared(self) -> bool:
        """Whether the daemon shares its state on Redis (``url`` or ``sentinel`` set)."""
        return self.url is not None or self.sentinel is not None

    def private_paths(self, state_dir: str) -> tuple[str, ...]:
        """A ``unix://`` Redis's socket folder (its query, such as ``?db=1``, dropped) and
        the client key (``csp_web.config.root.OwnsPaths``)."""
        url = self.url or ""
        socket = url.removeprefix("unix://").partition("?")[0] if url.startswith("unix://") else ""
        paths = [os.path.dirname(os.path.abspath(socket))] if socket else []
        return (*paths, *([self.tls_key_file] if self.tls_key_file else []))
