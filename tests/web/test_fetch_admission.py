"""The web pool's defaults under load (SPEC C-3, issue 26): 64 concurrent fetch clients wait
for their turn rather than fail, and running + queued is the limit, at N and N+1."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import trio
import trio.testing

from csp_web.config import Config, DaemonConfig, SlotLimits, with_section
from csp_web.core.wire.connection import Shutdown
from csp_web.net import GuardConfig
from protocol import Reply, Status
from specialists.web.config import FetchConfig, RateConfig, WebConfig
from specialists.web.pages.ops_fetch import OPS
from tests.harness import ClientEnd, Harness
from tests.net._origin import Origin
from tests.net._origin import Reply as OriginReply
from tests.web.conftest import DispatcherFactory

WAIT_S = 30.0  # 128 real fetches on a loaded 2-core host
PAGE = b"<html><head><title>Held</title></head><body><p>held</p></body></html>"
WEB_POOL = SlotLimits(max_running=32, max_queued=96)  # config.yaml's defaults


@pytest.fixture
def web_config(origin: Origin, tmp_path: Path) -> Config:
    """Embedded defaults, loopback opened for the origin, the fetch rate limit out of the way
    (its 20 a minute is not what is tested), HTML as served."""
    guard = GuardConfig(allowed_ports=(origin.port,), allow_private=("127.0.0.1",))
    fetch = replace(FetchConfig(), rate=RateConfig(per_minute=1_000_000, burst=100_000))
    web = replace(WebConfig(), guard=guard, fetch=replace(fetch, render="never"))
    config = Config(daemon=DaemonConfig(state_dir=str(tmp_path / "state")))
    return with_section(config, "web", web)


def _held_urls(origin: Origin, count: int, release: trio.Event) -> list[str]:
    """``count`` distinct pages (no two share a load) that answer once ``release`` is set."""
    reply = OriginReply(200, [("content-type", "text/html")], PAGE, hold=release)
    urls = []
    for n in range(count):
        origin.routes[f"/held/{n}"] = lambda _seen: reply
        urls.append(origin.url("origin.test", f"/held/{n}"))
    return urls


def _fetch(url: str, n: int) -> bytes:
    return f"TASK REQ:fetch {url} IN:WEB OUT:CONTENT\nID f{n}\nNO_CACHE true\n\n".encode()


async def _wait_pool(harness: Harness, holders: int) -> None:
    pool = harness.dispatcher.slots("web")
    while pool.running + pool.queued < holders:
        await trio.testing.wait_all_tasks_blocked(cushion=0.01)


async def _answers(peers: list[ClientEnd], each: int) -> list[Reply]:
    return [reply for peer in peers for reply in await peer.replies(each)]


@pytest.mark.slow
async def test_64_concurrent_fetch_clients_wait_for_the_default_web_pool_and_all_answer_ok(
    make_dispatcher: DispatcherFactory, origin: Origin, nursery: trio.Nursery
) -> None:
    """64 connections, one slow fetch each: 32 run, 32 wait in the queue, none is busy."""
    release = trio.Event()
    dispatcher = make_dispatcher(OPS)
    assert dispatcher.services.config.tasks.specialists.web == WEB_POOL
    harness = Harness(dispatcher, nursery, Shutdown())
    peers = [harness.connect() for _ in range(64)]
    with trio.fail_after(WAIT_S):
        for n, (peer, url) in enumerate(zip(peers, _held_urls(origin, 64, release), strict=True)):
            await peer.send(_fetch(url, n))
        await _wait_pool(harness, 64)
        pool = dispatcher.slots("web")
        assert (pool.running, pool.queued) == (32, 32)
        release.set()
        replies = await _answers(peers, 1)
    assert [(r.id, r.status, r.get("ERROR")) for r in replies] == [
        (f"f{n}", Status.OK, None) for n in range(64)
    ]


@pytest.mark.slow
@pytest.mark.parametrize("extra", [0, 1])
async def test_the_default_web_pool_takes_running_plus_queued_fetches_and_refuses_the_next(
    make_dispatcher: DispatcherFactory, origin: Origin, nursery: trio.Nursery, extra: int
) -> None:
    """C-3 at N and N+1: 32 + 96 fetches at once all answer OK; one more is busy at once,
    while the others still wait (L-10's running frames raised so the pool is the limit)."""
    release = trio.Event()
    dispatcher = make_dispatcher(OPS)
    harness = Harness(dispatcher, nursery, Shutdown())
    roomy = replace(
        dispatcher.services.config.connection, max_in_flight=256, max_running_frames=256
    )
    peer = harness.connect(connection=roomy)
    count = WEB_POOL.max_running + WEB_POOL.max_queued + extra
    urls = _held_urls(origin, count, release)
    with trio.fail_after(WAIT_S):
        await peer.send(b"".join(_fetch(url, n) for n, url in enumerate(urls[:-1])))
        await _wait_pool(harness, count - 1)
        await peer.send(_fetch(urls[-1], count - 1))
        if extra:
            refused = await peer.reply()
            assert refused == Reply(
                Status.FAIL,
                (
                    ("ID", f"f{count - 1}"),
                    ("SCOPE", "[]"),
                    ("DATA", "none"),
                    ("ERROR", "busy:web: 32 running, 96 queued"),
                ),
            )
        release.set()
        replies = await peer.replies(count - extra)
    assert sorted(r.id or "" for r in replies if r.status is Status.OK) == sorted(
        f"f{n}" for n in range(count - extra)
    )
