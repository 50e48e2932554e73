"""The fleet on Redis Sentinel (``redis.sentinel``): a master, a replica and a sentinel
started by a fixture; the daemons reach the master the sentinel names and follow a failover.

The one-server tests that need only a link run here again against the sentinel's master:
imported below, pytest collects them in this module, where ``redis_config`` names the
sentinel. They cover the cache (hits, invalidation, events), run claims, rate limits and
quotas.
"""

from __future__ import annotations

import functools
import json
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import trio

from csp_web.config import Config
from csp_web.config.redis import RedisConfig, SentinelConfig
from csp_web.cron.claims import RunClaims
from csp_web.infra.redis_link import RedisLink, RedisUnavailable, make_client, open_redis_link
from tests.redis.conftest import OpenLink
from tests.redis.test_redis_cache import (  # noqa: F401  (collected here, on the sentinel)
    test_a_page_cached_by_one_daemon_is_a_one_round_trip_hit_on_another,
    test_a_peers_new_value_replaces_the_memory_copy_once_its_event_arrives,
    test_a_write_begun_before_a_peers_invalidation_is_not_stored,
    test_an_invalidation_by_one_daemon_is_never_answered_from_anothers_memory,
)
from tests.redis.test_redis_claims import (  # noqa: F401  (collected here, on the sentinel)
    AT,
    test_one_daemon_wins_a_run_key_and_the_other_watches_it,
)
from tests.redis.test_redis_daemon import (  # noqa: F401  (collected here, on the sentinel)
    test_a_scrape_shows_redis_up_how_it_is_reached_and_no_failures,
)
from tests.redis.test_redis_ratelimit import (  # noqa: F401  (collected here, on the sentinel)
    test_a_burst_of_n_holds_across_two_daemons_and_the_next_call_is_refused,
    test_a_monthly_quota_of_n_holds_across_daemons,
    test_a_retry_after_seen_by_one_daemon_pauses_every_daemon,
    test_a_wait_within_the_deadline_reserves_the_next_slot,
)
from tests.redis_cluster import free_ports
from tests.redis_sentinel import MASTER, SentinelGroup
from tests.tool.cron_support import TrioWall, open_rig, settle
from tests.tool.test_cron_fleet import KEY, busy, daemon_config, past_window, quiet, ran

pytestmark = pytest.mark.slow  # the sentinel learns its replica in about five seconds


@pytest.fixture(scope="module")
def group() -> Iterator[SentinelGroup]:
    directory = tempfile.mkdtemp(prefix="csp-redis-sentinel-", dir="/tmp")
    group = SentinelGroup(directory)
    try:
        group.start()
        yield group
    finally:
        group.stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def redis_server(group: SentinelGroup) -> SentinelGroup:
    """The group, its master emptied, where a fixture of the imported tests asks for the one
    server (they use it only to exist)."""
    group.flush()
    return group


def sentinel_config(*sentinels: str, master: str = MASTER, **redis: object) -> RedisConfig:
    sentinel = SentinelConfig(master=master, sentinels=sentinels)
    return RedisConfig(sentinel=sentinel, call_timeout_s=0.5, retry_s=1e-3, **redis)  # type: ignore[arg-type]


@pytest.fixture
def redis_config(redis_server: SentinelGroup) -> RedisConfig:
    return sentinel_config(redis_server.sentinel_address)


async def test_the_link_writes_to_the_master_the_sentinel_names(
    open_link: OpenLink, redis_server: SentinelGroup
) -> None:
    async with open_link() as link:
        await link.call(lambda r: r.set(link.key("where"), "master"), "probe")
        line = json.loads(link.stats_line())
    with redis.Redis(port=redis_server.master_port()) as master:
        assert master.get("csp-web:where") == b"master"
    assert (line["state"], line["mode"]) == ("up", "sentinel")


async def test_the_sentinels_master_is_asked_its_eviction_policy(
    open_link: OpenLink, redis_server: SentinelGroup
) -> None:
    """The check at start reads the master the sentinel names (claims live there)."""
    with redis.Redis(port=redis_server.master_port()) as master:
        master.config_set("maxmemory-policy", "allkeys-lru")
    try:
        async with open_link() as link:
            with trio.fail_after(10):
                while link.eviction_policy is None:
                    await trio.sleep(0.01)
            line = json.loads(link.stats_line())
    finally:
        with redis.Redis(port=redis_server.master_port()) as master:
            master.config_set("maxmemory-policy", "noeviction")
    assert link.eviction_policy == "allkeys-lru"
    assert line["eviction"] == "allkeys-lru"


async def test_a_claim_no_replica_acknowledged_is_not_won_until_one_holds_it(
    open_link: OpenLink, redis_server: SentinelGroup
) -> None:
    """Replication is asynchronous: a claim only the master holds would be lost by a
    failover, and a second daemon could run the same key. It counts once a replica holds
    it (WAIT); before that the claim fails (cron pauses) and the same daemon takes its own
    claim at the next try, the link staying up throughout."""
    async with open_link() as link:
        claims = RunClaims(link)
        redis_server.pause("replica")
        try:
            with trio.fail_after(10), pytest.raises(RedisUnavailable, match="not replicated"):
                await claims.claim("j", "j@t", AT)
        finally:
            redis_server.resume("replica")
        assert link.up
        assert link.fallbacks["unreplicated"] == 1
        with trio.fail_after(10):
            while True:  # the replica catches up on its link to the master
                try:
                    assert await claims.claim("j", "j@t", AT)
                    break
                except RedisUnavailable:
                    await trio.sleep(0.05)


async def test_without_replica_acks_a_claim_counts_on_the_master_alone(
    open_link: OpenLink, redis_server: SentinelGroup, redis_config: RedisConfig
) -> None:
    """``replica_acks: 0``: no WAIT (a failover may lose the last claims)."""
    assert redis_config.sentinel is not None
    sentinel = SentinelConfig(
        master=MASTER, sentinels=redis_config.sentinel.sentinels, replica_acks=0
    )
    async with open_link(sentinel=sentinel) as link:
        redis_server.pause("replica")
        try:
            with trio.fail_after(10):
                assert await RunClaims(link).claim("j", "j@t", AT)
        finally:
            redis_server.resume("replica")
    assert link.fallbacks["unreplicated"] == 0


async def claim_until(
    claims: RunClaims, winners: dict[str, list[int]], index: int, done: trio.Event
) -> None:
    """Claim the run keys ``j@0``, ``j@1``... in turn until ``AFTER`` keys past ``done``; a
    claim that could not be made is tried again, as the cron's next look does."""
    n, left = 0, AFTER
    while left:
        key = f"j@{n}"
        try:
            if await claims.claim("j", key, AT):
                winners[key].append(index)
        except RedisUnavailable:
            await trio.sleep(0.01)
            continue
        n += 1
        left -= done.is_set()


AFTER = 20  # keys each daemon claims once the failover is over


async def test_claims_made_through_a_failover_are_each_won_by_one_daemon_on_the_new_master(
    open_link: OpenLink, redis_server: SentinelGroup
) -> None:
    """Two daemons claim the same run keys while the sentinel promotes the replica: every
    key is won once, the links follow the new master, and the claims after the failover are
    held there."""
    winners: dict[str, list[int]] = defaultdict(list)
    done = trio.Event()
    async with open_link() as one, open_link() as two:
        with trio.fail_after(150):  # as the cron test's bound below: the sentinel's pace
            async with trio.open_nursery() as nursery:
                for index, link in enumerate((one, two)):
                    nursery.start_soon(claim_until, RunClaims(link), winners, index, done)
                await trio.sleep(0.05)  # claims under way
                new_port = await trio.to_thread.run_sync(redis_server.failover)
                done.set()
        assert (one.up, two.up) == (True, True)
    assert {key: len(won) for key, won in winners.items()} == dict.fromkeys(winners, 1)
    last = sorted(winners, key=lambda key: int(key[2:]))[-AFTER:]
    with redis.Redis(port=new_port) as master:
        held = [json.loads(master.get(f"csp-web:cron:run:{key}") or "null") for key in last]
    assert all(claim is not None and claim["state"] == "running" for claim in held)


REJOIN_S = 30.0  # how long the cron test leaves the sentinel to rejoin the old master


async def test_cron_through_a_failover_pauses_then_runs_each_occurrence_once_on_the_new_master(
    config: Config,
    tmp_path: Path,
    mock_clock: trio.testing.MockClock,
    open_link: OpenLink,
    redis_server: SentinelGroup,
) -> None:
    """Two daemons' cron on the sentinel's master; the sentinel promotes the replica between
    two occurrences. The next claims meet broken connections or a master no replica follows
    yet: cron pauses (counted, no crash), looks again every retry_s, and once a replica
    holds its claim the occurrence runs once, on the new master."""
    wall = TrioWall()
    async with (
        open_link() as one,
        open_link() as two,
        open_rig(daemon_config(config, tmp_path, "a"), wall, link=one) as a,
        open_rig(daemon_config(config, tmp_path, "b"), wall, link=two) as b,
    ):
        await a.add("j", "*/5 * * * *")
        await settle(lambda: "j" in {job.id for job in b.cron.jobs()})
        await quiet(one, two)
        mock_clock.jump(300)
        await settle(functools.partial(ran, a, b, 1))
        await quiet(one, two)
        new_port = await trio.to_thread.run_sync(redis_server.failover)
        with redis.Redis(port=new_port) as master:
            followed = master.info("replication")["connected_slaves"]
        mock_clock.jump(300)  # 00:10:30: due, on the new master
        # The sentinel turns the old master into a replica when it next looks at it (10-20 s;
        # longer when a loaded host puts the sentinel in TILT mode, 30 s without acting each
        # time): past REJOIN_S the test does it, as an operator would.
        started, rejoined = time.monotonic(), False
        while not ran(a, b, 2):
            waited = time.monotonic() - started
            assert waited < 120, "cron did not resume"
            if waited > REJOIN_S and not rejoined:
                await trio.to_thread.run_sync(redis_server.rejoin)
                rejoined = True
            await quiet(one, two)
            await past_window(one)
            await past_window(two)
            mock_clock.jump(one.config.retry_s)  # the paused schedulers' next look
            await trio.to_thread.run_sync(time.sleep, 0.05)  # real time: the sentinel's turn
        await quiet(one, two)
        assert not busy(a, b)
        assert (one.up, two.up) == (True, True)
        fallbacks = one.fallbacks + two.fallbacks
    assert sorted(a.seen + b.seen) == [KEY, "j@2026-01-10T00:10:00Z"]
    if followed == 0:  # no replica could acknowledge the first claims: they paused cron
        assert fallbacks["cron_paused"] >= 1
        assert fallbacks["unreplicated"] >= 1
    with redis.Redis(port=new_port) as master:
        claim = json.loads(master.get("csp-web:cron:run:j@2026-01-10T00:10:00Z") or "null")
    assert claim["state"] == "done"


async def test_a_daemon_whose_sentinel_is_down_starts_and_falls_back() -> None:
    """No sentinel answers: a fallback like a stopped server, not a daemon that cannot
    start; nothing connects until the first call, which ends within its deadline."""
    (port,) = free_ports(1)
    async with open_redis_link(sentinel_config(f"127.0.0.1:{port}")) as link:
        assert link is not None
        await _falls_back(link)
        assert "MasterNotFoundError" in link.last_error


async def _falls_back(link: RedisLink) -> None:
    with trio.fail_after(10), pytest.raises(RedisUnavailable):
        await link.call(lambda r: r.get(link.key("x")), "probe")
    assert not link.up
    assert "probe" in link.last_error


def bulk(text: str) -> bytes:
    data = text.encode()
    return b"$%d\r\n%s\r\n" % (len(data), data)


def masters_reply(**state: str | None) -> bytes:
    """SENTINEL MASTERS' reply (RESP3: redis-py speaks it) naming one master with
    ``state`` (a field of None: left out)."""
    fields = {"name": MASTER, "flags": "master", "num-other-sentinels": "0", **state}
    present = {key: value for key, value in fields.items() if value is not None}
    pairs = b"".join(bulk(key) + bulk(value) for key, value in present.items())
    return b"*1\r\n%%%d\r\n" % len(present) + pairs


HELLO_REPLY = b"%1\r\n$5\r\nproto\r\n:3\r\n"


async def serve_fake_sentinel(nursery: trio.Nursery, reply: bytes) -> int:
    """A sentinel in ``nursery`` that answers HELLO, SENTINEL MASTERS with ``reply`` and
    anything else +OK; returns its port."""

    async def one(stream: trio.SocketStream) -> None:
        buffer = b""
        with trio.move_on_after(20):
            while chunk := await stream.receive_some(65536):
                buffer += chunk
                while (end := _command_end(buffer)) is not None:
                    command, buffer = buffer[:end], buffer[end:]
                    await stream.send_all(_answer(command.upper(), reply))

    found = await nursery.start(trio.serve_tcp, one, 0)
    return int(found[0].socket.getsockname()[1])


def _answer(command: bytes, masters: bytes) -> bytes:
    if b"HELLO" in command:
        return HELLO_REPLY
    return masters if b"SENTINEL" in command and b"MASTERS" in command else b"+OK\r\n"


def _command_end(buffer: bytes) -> int | None:
    """Where the first RESP array of bulk strings in ``buffer`` ends, None if incomplete."""
    if not buffer.startswith(b"*") or b"\r\n" not in buffer:
        return None
    head = buffer.partition(b"\r\n")[0]
    position = len(head) + 2
    for _ in range(int(head[1:])):
        line_end = buffer.find(b"\r\n", position)
        if line_end < 0:
            return None
        size = int(buffer[position + 1 : line_end])
        position = line_end + 2 + size + 2
        if position > len(buffer):
            return None
    return position


NOT_FOUND = "MasterNotFoundError"  # refused before any connection is tried


@pytest.mark.parametrize(
    ("state", "error"),
    [
        ({"ip": "127.0.0.1", "port": "not-a-port"}, NOT_FOUND),
        ({"ip": "127.0.0.1", "port": "99999"}, NOT_FOUND),
        ({"ip": "127.0.0.1", "port": "0"}, NOT_FOUND),
        ({"ip": "", "port": "6379"}, NOT_FOUND),  # "": this host's port 6379, never asked
        ({"ip": None, "port": "6379"}, NOT_FOUND),
        ({"ip": "127.0.0.1", "port": "6379", "flags": None}, NOT_FOUND),
        ({"ip": "127.0.0.1", "port": "6379", "num-other-sentinels": "many"}, NOT_FOUND),
        ({"ip": "127.0.0.1", "port": "6379", "name": "another-master"}, NOT_FOUND),
        ({"ip": "127.0.0.1", "port": "6379", "flags": "master,s_down"}, NOT_FOUND),
        ({"ip": "no such host.invalid", "port": "6379"}, "ConnectionError"),
    ],
)
async def test_a_sentinel_naming_no_usable_master_is_a_fallback_not_a_crash(
    state: dict[str, str | None], error: str
) -> None:
    """A reply redis-py cannot read (a port that is no number or out of range, fields
    missing, another master's name, a master marked down) is a failed call before any
    connection is tried: the link falls back and names the cause, the daemon goes on; a name
    that does not resolve fails at its connection."""
    async with trio.open_nursery() as nursery:
        port = await serve_fake_sentinel(nursery, masters_reply(**state))
        async with open_redis_link(sentinel_config(f"127.0.0.1:{port}")) as link:
            assert link is not None
            await _falls_back(link)
            assert f"probe: {error}: " in link.last_error
        nursery.cancel_scope.cancel()


async def test_a_master_the_sentinel_names_gets_only_redis_commands_within_the_deadline() -> None:
    """The sentinels choose where the master is (they are trusted, docs/scaling.md): a
    master named at an address that never answers gets the link's Redis commands only, and
    the call ends at its deadline as for a stopped server."""
    received: list[bytes] = []

    async def silent(stream: trio.SocketStream) -> None:
        with trio.move_on_after(20):
            while chunk := await stream.receive_some(65536):
                received.append(chunk)

    async with trio.open_nursery() as nursery:
        odd = await nursery.start(trio.serve_tcp, silent, 0)
        odd_port = odd[0].socket.getsockname()[1]
        reply = masters_reply(ip="127.0.0.1", port=str(odd_port))
        port = await serve_fake_sentinel(nursery, reply)
        async with open_redis_link(sentinel_config(f"127.0.0.1:{port}")) as link:
            assert link is not None
            await _falls_back(link)
            assert "no reply within" in link.last_error
        nursery.cancel_scope.cancel()
    assert received
    assert all(chunk.startswith(b"*") for chunk in received)  # RESP commands, nothing else


def test_with_tls_the_sentinels_and_the_master_are_reached_over_tls(tmp_path: Path) -> None:
    """``tls: true``: both the sentinels' clients and the master's pool use TLS with the
    redis.tls_* files (nothing connects until a call)."""
    sentinel = SentinelConfig(master=MASTER, sentinels=("127.0.0.1:1",), tls=True)
    ca = str(tmp_path / "ca.pem")
    client = make_client(RedisConfig(sentinel=sentinel, tls_ca_file=ca))
    try:
        pool = client.connection_pool
        (asked,) = pool.sentinel_manager.sentinels  # type: ignore[attr-defined]
        for kwargs in (pool.connection_kwargs, asked.connection_pool.connection_kwargs):
            assert kwargs["ssl_ca_certs"] == ca
        assert "SSL" in pool.connection_class.__name__
        assert "SSL" in asked.connection_pool.connection_class.__name__
    finally:
        client.close()
