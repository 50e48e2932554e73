"""The ``redis:`` section: absent means embedded, loading is strict, limits at N and N+1."""

from __future__ import annotations

import pytest

from csp_web.app.catalog import config_from_mapping
from csp_web.config import Config, ConfigError
from csp_web.config.redis import RedisConfig


def test_without_a_redis_section_the_daemon_is_embedded() -> None:
    assert Config().redis == RedisConfig()
    assert Config().redis.url is None


def test_a_redis_section_loads_with_secrets_named_by_environment_variable() -> None:
    config = config_from_mapping(
        {
            "redis": {
                "url": "rediss://cache.internal:6380/2",
                "username": "fleet",
                "password_env": "FLEET_REDIS_PASSWORD",
                "tls_ca_file": "/etc/ssl/redis-ca.pem",
                "key_prefix": "prod:",
                "fallback_share": 0.25,
            }
        }
    )
    assert config.redis.url == "rediss://cache.internal:6380/2"
    assert (config.redis.password_env, config.redis.key_prefix) == ("FLEET_REDIS_PASSWORD", "prod:")


SENTINELS_EMPTY = "redis.sentinel: sentinels: expected at least one host:port"
MASTER_NAME = "redis.sentinel: master: expected the monitored master's name"
NEGATIVE = "redis.sentinel: db, replica_acks: must not be negative"


def not_host_port(entry: str) -> str:
    return f"redis.sentinel: sentinels: {entry!r} is not host:port"


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"password": "x"}, "redis.password: unknown key"),
        ({"url": "http://cache:6379"}, "redis: url: expected redis://, rediss:// or unix://"),
        ({"fallback_share": 1.01}, "redis: fallback_share: must be at most 1"),
        ({"fallback_share": 0}, "redis.fallback_share: must be positive"),
        ({"call_timeout_s": 0}, "redis.call_timeout_s: must be positive"),
        (
            {"url": "unix:///run/redis.sock", "cluster": True},
            "redis: cluster: needs url, a redis:// or rediss:// node of the cluster",
        ),
        (
            {"cluster": True},
            "redis: cluster: needs url, a redis:// or rediss:// node of the cluster",
        ),
        (
            {"url": "redis://node1:7000", "cluster": True, "key_prefix": "a{b:"},
            "redis: key_prefix: no { or } on a cluster (they would pick the key slot)",
        ),
        (
            {"url": "redis://node1:7000/1", "cluster": True},
            "redis: cluster: a Redis Cluster has only database 0",
        ),
        (
            {"url": "redis://x:6379", "sentinel": {"master": "m", "sentinels": ["s:26379"]}},
            "redis: sentinel: the sentinels name the master: url null, cluster false",
        ),
        (
            {"cluster": True, "sentinel": {"master": "m", "sentinels": ["s:26379"]}},
            "redis: sentinel: the sentinels name the master: url null, cluster false",
        ),
        ({"sentinel": {"master": "m", "sentinels": []}}, SENTINELS_EMPTY),
        ({"sentinel": {"master": "", "sentinels": ["s:1"]}}, MASTER_NAME),
        ({"sentinel": {"master": "my master", "sentinels": ["s:1"]}}, MASTER_NAME),
        ({"sentinel": {"master": "m", "sentinels": ["s"]}}, not_host_port("s")),
        ({"sentinel": {"master": "m", "sentinels": [":26379"]}}, not_host_port(":26379")),
        ({"sentinel": {"master": "m", "sentinels": ["s:0"]}}, not_host_port("s:0")),
        ({"sentinel": {"master": "m", "sentinels": ["s:65536"]}}, not_host_port("s:65536")),
        ({"sentinel": {"master": "m", "sentinels": ["s:２"]}}, not_host_port("s:２")),
        ({"sentinel": {"master": "m", "sentinels": ["u@s:1"]}}, not_host_port("u@s:1")),
        (
            {"sentinel": {"master": "m", "sentinels": ["s:1", 7]}},
            "redis.sentinel.sentinels[1]: expected str",
        ),
        ({"sentinel": {"master": "m", "sentinels": ["s:1"], "db": -1}}, NEGATIVE),
        ({"sentinel": {"master": "m", "sentinels": ["s:1"], "replica_acks": -1}}, NEGATIVE),
        (
            {"sentinel": {"master": "m", "sentinels": ["s:1"], "port": 1}},
            "redis.sentinel.port: unknown key",
        ),
    ],
)
def test_a_bad_redis_setting_is_refused_by_its_path(
    section: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        config_from_mapping({"redis": section})
    assert str(refused.value) == message


def test_a_fallback_share_of_exactly_one_is_accepted() -> None:
    assert config_from_mapping({"redis": {"fallback_share": 1}}).redis.fallback_share == 1.0


def test_a_sentinel_section_loads_its_sentinels_and_the_link_is_shared() -> None:
    config = config_from_mapping(
        {
            "redis": {
                "sentinel": {
                    "master": "mymaster",
                    "sentinels": ["10.0.0.5:26379", "[fd00::6]:26379", "s3.internal:65535"],
                    "password_env": "SENTINEL_PASSWORD",
                    "db": 0,
                    "tls": True,
                    "replica_acks": 0,
                }
            }
        }
    )
    sentinel = config.redis.sentinel
    assert sentinel is not None
    assert sentinel.addresses() == [
        ("10.0.0.5", 26379),
        ("fd00::6", 26379),
        ("s3.internal", 65535),
    ]
    assert (sentinel.master, sentinel.replica_acks, sentinel.tls) == ("mymaster", 0, True)
    assert config.redis.url is None
    assert config.redis.shared
    assert not Config().redis.shared
