"""SharedFlights on its own: who leads, and leading alone while Redis cannot coordinate."""

from __future__ import annotations

import trio

from csp_web.infra.redis_flight import SharedFlights
from tests.redis.conftest import OpenLink, wait_live
from tests.redis_server import RedisServer


async def test_with_redis_stopped_every_daemon_downloads_for_itself(
    open_link: OpenLink, redis_server: RedisServer
) -> None:
    async with open_link() as link:
        flights = SharedFlights(link)
        redis_server.stop()
        await wait_live(link, False)
        calls: list[str] = []

        async def lead() -> str:
            calls.append("lead")
            return "page"

        async def reuse() -> str | None:
            return None

        with trio.fail_after(5):
            result = await flights.run(
                "https://example.com/", deadline=trio.current_time() + 5, lead=lead,
                reuse=reuse, shareable=lambda exc: True,
            )  # fmt: skip
        assert (result, calls) == ("page", ["lead"])
        assert link.fallbacks["flight_local"] == 1
        assert (flights.led, flights.followed) == (0, 0)


async def test_a_claim_is_released_when_the_leader_finishes(
    open_link: OpenLink, redis_server: RedisServer
) -> None:
    async with open_link() as one, open_link() as two:
        first, second = SharedFlights(one), SharedFlights(two)

        async def lead() -> str:
            return "page"

        async def reuse() -> str | None:
            return None

        for flights in (first, second, first):
            await flights.run(
                "k", deadline=trio.current_time() + 5, lead=lead, reuse=reuse,
                shareable=lambda exc: True,
            )  # fmt: skip
        assert (first.led, second.led, first.followed + second.followed) == (2, 1, 0)
