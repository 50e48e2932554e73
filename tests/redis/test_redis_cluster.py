"""The fleet on a Redis Cluster (``redis.cluster: true``): three masters formed by a fixture,
the daemons' keys spread over their slots, every multi-key script within one slot.

The one-server tests that need only a link run here again against the cluster: imported
below, pytest collects them in this module, where ``redis_config`` names the cluster. They
cover the cache (hits, invalidation, events), run claims, rate limits and quotas; the node
fleet's tests cover the node links' multi-key scripts.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator

import pytest
import trio
from redis.crc import key_slot

from csp_web.config.redis import RedisConfig
from csp_web.infra.ratelimit import LimitCounts, Rate
from csp_web.infra.redis_cache import RedisCache
from csp_web.infra.redis_link import RedisUnavailable, open_redis_link
from csp_web.infra.redis_ratelimit import SharedBucket
from specialists.node.fleet import link_key
from tests.node.test_node_fleet import (  # noqa: F401  (collected here, on the cluster)
    test_a_forwarded_task_whose_node_does_not_answer_ends_at_its_deadline,
    test_forwarded_tasks_run_up_to_max_forwarded_tasks_and_the_next_is_busy,
    two_daemons,
)
from tests.redis.conftest import OpenLink
from tests.redis.test_redis_cache import (  # noqa: F401  (collected here, on the cluster)
    test_a_page_cached_by_one_daemon_is_a_one_round_trip_hit_on_another,
    test_a_peers_new_value_replaces_the_memory_copy_once_its_event_arrives,
    test_a_write_begun_before_a_peers_invalidation_is_not_stored,
    test_an_invalidation_by_one_daemon_is_never_answered_from_anothers_memory,
)
from tests.redis.test_redis_claims import (  # noqa: F401  (collected here, on the cluster)
    test_one_daemon_wins_a_run_key_and_the_other_watches_it,
)
from tests.redis.test_redis_daemon import (  # noqa: F401  (collected here, on the cluster)
    test_a_scrape_shows_redis_up_how_it_is_reached_and_no_failures,
)
from tests.redis.test_redis_ratelimit import (  # noqa: F401  (collected here, on the cluster)
    test_a_burst_of_n_holds_across_two_daemons_and_the_next_call_is_refused,
    test_a_monthly_quota_of_n_holds_across_daemons,
    test_a_retry_after_seen_by_one_daemon_pauses_every_daemon,
    test_a_wait_within_the_deadline_reserves_the_next_slot,
)
from tests.redis_cluster import RedisCluster3, free_ports

pytestmark = pytest.mark.slow  # forming a cluster takes a few seconds (once per module)


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisCluster3]:
    directory = tempfile.mkdtemp(prefix="csp-redis-cluster-", dir="/tmp")
    cluster = RedisCluster3(directory)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def redis_server(cluster: RedisCluster3) -> RedisCluster3:
    """The cluster, emptied, where a fixture of the imported tests asks for the one server
    (they use it only to exist)."""
    cluster.flush()
    return cluster


@pytest.fixture
def redis_config(redis_server: RedisCluster3) -> RedisConfig:
    return RedisConfig(url=redis_server.url, cluster=True, call_timeout_s=0.5, retry_s=1e-3)


def test_the_cluster_spreads_the_fleets_keys_over_its_three_masters(
    redis_server: RedisCluster3,
) -> None:
    """Not a single-slot deployment in disguise: each master owns part of the slot space."""
    import redis

    for port in redis_server.ports:
        with redis.Redis(port=port, decode_responses=True) as client:
            nodes = client.execute_command("CLUSTER", "NODES")
        (myself,) = [line.split() for line in nodes.splitlines() if "myself" in line]
        assert "master" in myself[2]
        assert myself[8:]  # slot ranges of its own


async def test_every_multi_key_script_touches_keys_of_one_slot(open_link: OpenLink) -> None:
    """A Lua script may only touch keys of one slot in a cluster: the cache's value, tag set
    and generation (per namespace), a bucket's TAT and pause, and every node's link entry
    (one tag for all of them) share their slot; different namespaces and buckets spread."""
    async with open_link() as link:
        cache = RedisCache(link, memory_bytes=1024)
        bucket_slots = set()
        for name in ("brave", "fetch:example.org"):
            bucket = SharedBucket(link, name, Rate(60.0, 1), 0.5, LimitCounts())
            (slot,) = {key_slot(key.encode()) for key in bucket._keys}
            bucket_slots.add(slot)
        namespace_slots = set()
        for namespace in ("fetch", "api:weather"):
            (slot,) = {key_slot(key.encode()) for key in cache._keys(f"{namespace}:0f0f")}
            namespace_slots.add(slot)
        keys = [link_key(link, name) for name in ("lab1", "gpu-7", "z")]
    assert len(bucket_slots) == 2
    assert len(namespace_slots) == 2
    assert len({key_slot(key.encode()) for key in keys}) == 1


async def test_a_daemon_pointed_at_a_cluster_that_is_down_starts_and_falls_back() -> None:
    """The cluster client learns the slot map on its first call, in a worker thread: a
    cluster that is not there at start is a fallback like a stopped server, not a daemon
    that cannot start."""
    (port,) = free_ports(1)
    config = RedisConfig(url=f"redis://127.0.0.1:{port}", cluster=True, retry_s=1e-3)
    async with open_redis_link(config) as link:
        assert link is not None
        with trio.fail_after(10), pytest.raises(RedisUnavailable):
            await link.call(lambda r: r.get(link.key("x")), "probe")
        assert not link.up
        assert "probe" in link.last_error


async def test_every_master_of_the_cluster_is_asked_its_eviction_policy(
    open_link: OpenLink, redis_server: RedisCluster3
) -> None:
    """One master that may evict is enough to warn: the check asks every primary."""
    import redis

    with redis.Redis(port=redis_server.ports[2]) as client:
        client.config_set("maxmemory-policy", "allkeys-lru")
    try:
        async with open_link() as link:
            with trio.fail_after(10):
                while link.eviction_policy is None:
                    await trio.sleep(0.01)
    finally:
        with redis.Redis(port=redis_server.ports[2]) as client:
            client.config_set("maxmemory-policy", "noeviction")
    assert link.eviction_policy == "allkeys-lru"
