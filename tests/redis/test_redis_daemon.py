"""A whole daemon with ``redis.url``: REQ:stats shows the link's state and fallbacks, a
stopped Redis turns web ops into cache misses (never hung replies), and it recovers."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import AsyncIterator

import trio

from csp_web.config import Config
from csp_web.config.redis import RedisConfig
from csp_web.core.api.context import Peer
from csp_web.infra.redis_link import open_redis_link
from protocol import Reply, Status, Task
from specialists.web import make_web
from specialists.web.config import WebConfig
from specialists.web.services import WebServices
from tests.conftest import Daemon, Sink, start_daemon
from tests.redis.conftest import wait_live
from tests.redis_server import RedisServer


async def _web_in_daemon(
    nursery: trio.Nursery, config: Config, sock_dir: str, opened: list[WebServices]
) -> tuple[Daemon, WebServices]:
    """The daemon as the composition root builds it for redis.url (web sharing the link),
    and the web specialist's services as opened."""
    async with contextlib.AsyncExitStack() as stack:
        link = await stack.enter_async_context(open_redis_link(config.redis))
        base = make_web(link=link)

        @contextlib.asynccontextmanager
        async def capture(section: WebConfig, whole: Config) -> AsyncIterator[WebServices]:
            async with base.open_services(section, whole) as services:
                opened.append(services)
                yield services

        web = dataclasses.replace(base, open_services=capture)
        daemon = await start_daemon(
            nursery, config, os.path.join(sock_dir, "csp.sock"), specialists=(web,)
        )
        nursery.start_soon(_hold, stack.pop_all(), daemon.scope)
    return daemon, opened[0]


async def _hold(stack: contextlib.AsyncExitStack, scope: trio.CancelScope) -> None:
    """Keep the link open as long as the daemon runs (the test's nursery ends both)."""
    async with stack:
        await trio.sleep_forever()


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
    opened: list[WebServices] = []
    daemon, web = await _web_in_daemon(nursery, config, sock_dir, opened)
    link, cache = web.redis, web.cache
    assert link is not None
    await wait_live(link)
    stats = Task("stats", "SYS", "STATS", None, ())
    with trio.fail_after(10):
        up = await daemon.dispatcher.run(stats, Peer("t"))
    assert up.status is Status.OK
    assert redis_line(up)["state"] == "up"
    redis_server.stop()
    await wait_live(link, False)
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


async def test_a_scrape_shows_redis_up_how_it_is_reached_and_no_failures(
    config: Config, sink: Sink, sock_dir: str, redis_config: RedisConfig
) -> None:
    """The daemon as ``csp-web serve`` runs it on this module's Redis (one server here; the
    cluster's and the sentinel's modules run it again), scraped and parsed."""
    from tests.test_metrics import samples, scrape, serving, value, with_metrics

    mode = "sentinel" if redis_config.sentinel else "cluster" if redis_config.cluster else "single"
    config = with_metrics(dataclasses.replace(config, redis=redis_config), "127.0.0.1:0")
    with trio.fail_after(60):
        async with serving(config, os.path.join(sock_dir, "csp.sock")) as where:
            assert where is not None
            found = samples((await scrape(where)).text)
            while value(found, "csp_web_redis_up") != 1:  # 0 until the link has connected
                await trio.sleep(0.05)
                found = samples((await scrape(where)).text)
    assert value(found, "csp_web_redis_up") == 1
    assert value(found, "csp_web_redis_mode", mode=mode) == 1
    assert value(found, "csp_web_redis_failures_total") == 0
