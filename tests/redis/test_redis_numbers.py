"""Numbers Redis replies go through the strict wire parser: a counter another client
overwrote with text is a fallback, like a Redis that is down, never an exception."""

from __future__ import annotations

import pytest
import redis

from csp_web.infra.redis_cache import RedisCache
from csp_web.infra.redis_link import RedisUnavailable
from tests.redis.conftest import OpenLink
from tests.redis_server import RedisServer


@pytest.mark.parametrize("garbage", ["²", "١", " 1", "1_0", "x", "9" * 19])
async def test_a_cache_generation_that_is_not_a_number_is_a_miss_and_a_skipped_write(
    open_link: OpenLink, redis_server: RedisServer, garbage: str
) -> None:
    client = redis.Redis(unix_socket_path=redis_server.socket)
    client.set("csp-web:web:g:{search}", garbage.encode())
    client.close()
    async with open_link() as link:
        cache = RedisCache(link, memory_bytes=1 << 20)
        assert await cache.get("search", {"q": "trio"}) is None
        await cache.set("search", {"q": "trio"}, {"hits": []}, ttl_s=60)
        assert link.fallbacks["cache_miss"] == 1
        assert link.fallbacks["cache_skip"] == 1
        assert link.available()  # a bad value is not an outage


async def test_integer_replies_take_ints_and_ascii_digits_only(open_link: OpenLink) -> None:
    async with open_link() as link:
        assert [link.integer(v, "t") for v in (7, b"12", "-2", b"0")] == [7, 12, -2, 0]
        for bad in (b"\xc2\xb2", "²", b"", None, True, 1.5, b"+1"):
            with pytest.raises(RedisUnavailable, match="t: not an integer reply"):
                link.integer(bad, "t")
