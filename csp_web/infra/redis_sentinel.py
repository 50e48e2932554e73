"""The master a Redis Sentinel names (``redis.sentinel``), followed across failovers.

redis-py's ``Sentinel(...).master_for(name)`` is a client whose pool asks the sentinels
for the master's address each time it connects, so once a failover has broken its
connections (a refused connect, or ``READONLY`` from the demoted master) the next call
reaches the new master. Nothing connects at construction: a daemon whose sentinels are down
starts and falls back, as with one stopped server.

The sentinels are inside the trust boundary (they choose where the master's password goes:
use their AUTH and TLS, docs/scaling.md), but a reply the client cannot read (a port that is
no number, fields missing) is a failed call, never an exception the link does not expect;
the address they name is used only as this master's, for the link's own Redis calls.
Imported only when a link is made, like redis-py itself.
"""

from __future__ import annotations

import os
from typing import Any

import redis
from redis.sentinel import MasterNotFoundError, Sentinel

from csp_web.config.redis import RedisConfig, SentinelConfig

# What a sentinel's unreadable reply raises in redis-py's parsing (int() of a port, a missing
# "flags" or "ip" field, a reply of another shape).
_UNREADABLE = (ValueError, TypeError, KeyError, IndexError, AttributeError)


class CheckedSentinel(Sentinel):
    """``Sentinel`` whose answer is a (host, port) pair or a failed call."""

    def discover_master(self, service_name: str) -> tuple[str, int]:
        try:
            host, port = super().discover_master(service_name)  # type: ignore[no-untyped-call]
        except _UNREADABLE as exc:
            raise MasterNotFoundError(f"a sentinel's reply was not understood: {exc!r}") from None
        if not isinstance(host, str) or not host or not isinstance(port, int):
            raise MasterNotFoundError(f"a sentinel named no usable address: {host!r}:{port!r}")
        if not 0 < port < 65536:
            raise MasterNotFoundError(f"a sentinel named a port out of range: {port}")
        return host, port


def sentinel_master(config: RedisConfig, options: dict[str, Any]) -> redis.Redis:
    """The client of ``config.sentinel``'s master, with the link's ``options`` (timeouts,
    retries, the master's credentials); the sentinels get the same timeouts, their own
    password, and TLS when ``tls`` is set."""
    assert config.sentinel is not None
    sentinel: SentinelConfig = config.sentinel
    tls: dict[str, Any] = {}
    if sentinel.tls:
        tls = {
            "ssl": True,
            "ssl_ca_certs": config.tls_ca_file,
            "ssl_certfile": config.tls_cert_file,
            "ssl_keyfile": config.tls_key_file,
        }
    password = os.environ.get(sentinel.password_env) if sentinel.password_env else None
    asking = {key: options[key] for key in ("socket_timeout", "socket_connect_timeout", "retry")}
    kwargs = {**asking, "password": password, **tls}
    manager = CheckedSentinel(sentinel.addresses(), sentinel_kwargs=kwargs)  # type: ignore[no-untyped-call]
    client: redis.Redis = manager.master_for(sentinel.master, db=sentinel.db, **options, **tls)  # type: ignore[no-untyped-call]
    return client


def close_sentinels(client: redis.Redis) -> None:
    """Close the sentinels' own connections behind a ``sentinel_master`` client (its pool
    keeps the manager)."""
    for each in client.connection_pool.sentinel_manager.sentinels:  # type: ignore[attr-defined]
        each.close()
