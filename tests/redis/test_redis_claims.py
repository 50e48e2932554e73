"""Run claims on their own: one daemon per run key, and the watch list of peers' runs is
bounded (the oldest is forgotten past WATCH_MAX)."""

from __future__ import annotations

import datetime
import json

import redis

from csp_web.cron.claims import WATCH_MAX, RunClaims
from tests.redis.conftest import OpenLink
from tests.redis_server import RedisServer

AT = datetime.datetime(2026, 1, 10, tzinfo=datetime.UTC)


async def test_one_daemon_wins_a_run_key_and_the_other_watches_it(open_link: OpenLink) -> None:
    async with open_link() as one, open_link() as two:
        first, second = RunClaims(one), RunClaims(two)
        assert await first.claim("j", "j@t", AT)
        assert not await second.claim("j", "j@t", AT)
        assert await first.claim("j", "j@t", AT)  # its own running claim (a retried call)
        assert [w.key for w in second._watched.values()] == ["j@t"]


async def test_the_watch_list_keeps_watch_max_runs_and_forgets_the_oldest(
    open_link: OpenLink, redis_server: RedisServer
) -> None:
    held = json.dumps({"owner": "a-peer", "state": "running"})
    client = redis.Redis(unix_socket_path=redis_server.socket)
    pipe = client.pipeline(transaction=False)
    for n in range(WATCH_MAX + 1):
        pipe.set(f"csp-web:cron:run:j@{n}", held, px=600_000)
    pipe.execute()
    client.close()
    async with open_link() as link:
        claims = RunClaims(link)
        for n in range(WATCH_MAX):
            assert not await claims.claim("j", f"j@{n}", AT)
        assert len(claims._watched) == WATCH_MAX
        assert not await claims.claim("j", f"j@{WATCH_MAX}", AT)  # N+1
        assert len(claims._watched) == WATCH_MAX
        assert "j@0" not in claims._watched
        assert f"j@{WATCH_MAX}" in claims._watched
