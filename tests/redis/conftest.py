"""Fixtures for the shared-state tests: a real redis-server per test, links to it."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest
import trio

from csp_web.config.redis import RedisConfig
from csp_web.infra.redis_link import RedisLink, open_redis_link
from tests.redis_server import RedisServer

OpenLink = Callable[..., AbstractAsyncContextManager[RedisLink]]


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    directory = tempfile.mkdtemp(prefix="csp-redis-", dir="/tmp")
    server = RedisServer(directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def redis_config(redis_server: RedisServer) -> RedisConfig:
    # retry_s tiny: a test restarts the server and expects the next call to try again.
    # call_timeout_s 2 s: at 0.5 s, calls meant to reach Redis timed out under CI load (load
    # 15: counts went local, failures were counted); a test of a silent Redis sets its own.
    return RedisConfig(url=redis_server.url, call_timeout_s=2.0, retry_s=1e-3)


async def wait_live(link: RedisLink, live: bool = True) -> None:
    """Until the link's event subscription is ``live`` (or not), bounded."""
    with trio.fail_after(10):
        while link.events_live != live:
            await link.events_changed.wait()


async def past_down_window(link: RedisLink) -> None:
    """Until the link tries Redis again (``redis.retry_s`` after its last failure)."""
    await trio.sleep(link.seconds_to_retry())


@pytest.fixture
def open_link(redis_config: RedisConfig) -> OpenLink:
    """``async with open_link(**overrides) as link``: one daemon's link, events live."""

    @asynccontextmanager
    async def opened(**overrides: object) -> AsyncIterator[RedisLink]:
        config = dataclasses.replace(redis_config, **overrides)  # type: ignore[arg-type]
        async with open_redis_link(config) as link, trio.open_nursery() as nursery:
            assert link is not None
            nursery.start_soon(link.serve_events)
            await wait_live(link)
            yield link
            nursery.cancel_scope.cancel()

    return opened
