"""A whole daemon with ``redis.url``: REQ:stats shows the link's state and fallbacks, a
stopped Redis turns web ops into cache misses (never hung replies), and it recovers."""

from __future__ import annotations

import dataclasses
import json
import os

import trio

from csp_web.config import Config
from csp_web.config_redis import RedisConfig
from csp_web.context import Peer
from protocol import Reply, Status, Task
from tests.conftest import Sink, start_daemon
from tests.redis.conftest import wait_live
from tests.redis_server import RedisServer


def redis_line(reply: Reply) -> dict[str, object]:
    (line,) = reply.get_all("REDIS")
    return dict(json.loads(line))


async def test_stats_show_redis_down_while_it_is_stopped_and_up_once_it_answers(
    nursery: trio.Nursery,
    config: Config,
    sink: Sink,
    sock_dir: str,
    redis_server: RedisServer,
    redis_config: RedisConfig,
) -> None:
    config = dataclasses.replace(config, redis=redis_config)
    daemon = await start_daemon(
        nursery, config, os.path.join(sock_dir, "csp.sock"), specialists=True
    )
    link = daemon.dispatcher.services.extras["web"].redis
    await wait_live(link)
    stats = Task("stats", "SYS", "STATS", None, ())
    with trio.fail_after(10):
        up = await daemon.dispatcher.run(stats, Peer("t"))
    assert up.status is Status.OK
    assert redis_line(up)["state"] == "up"
    redis_server.stop()
    await wait_live(link, False)
    cache = daemon.dispatcher.services.extras["web"].cache
    with trio.fail_after(10):
        assert await cache.get("fetch", "https://example.com/") is None
        down = await daemon.dispatcher.run(stats, Peer("t"))
    line = redis_line(down)
    assert (line["state"], line["events"]) == ("down", "lost")
    assert line["fallbacks"] == {"cache_miss": 1}
    assert "error" in line
    redis_server.start()
    await wait_live(link)
    await cache.set("fetch", "https://example.com/", {"v": 1}, ttl_s=60)
    with trio.fail_after(10):
        again = await daemon.dispatcher.run(stats, Peer("t"))
    assert redis_line(again)["state"] == "up"
    daemon.scope.cancel()
