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
