"""Single-flight work: one download (or render) per URL at a time, the other callers follow it.

    page = await lead(flights, key, download, shareable=...)   # no flight for key: run it
    page = await follow(flight, deadline, late)                # one in flight: its outcome

``loading.py`` shares downloads this way, ``rendering.py`` renders, each in a table of its own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio

from csp_web.core.api.errors import OpError


@dataclass
class Flight:
    """One download in progress; followers wait on ``done`` and read its outcome (``page``
    is a ``pages.Page``: typed there, where pages are made)."""

    done: trio.Event = field(default_factory=trio.Event)
    followers: int = 0  # tasks waiting on ``done`` now
    page: object | None = None
    error: OpError | None = None


Flights = dict[str, Flight]  # normalised URL -> its download in progress


async def lead(
    flights: Flights,
    key: str,
    run: Callable[[], Awaitable[object]],
    *,
    shareable: Callable[[OpError], bool],
) -> object:
    """``run()``'s outcome, announced to whoever follows ``key`` meanwhile: its page, or its
    OpError when ``shareable`` (not one of the leader's own budget, which followers, with
    budgets of their own, do not inherit)."""
    flight = flights[key] = Flight()
    try:
        page = await run()
        flight.page = page
        return page
    except OpError as exc:
        if shareable(exc):
            flight.error = exc
        raise
    finally:
        if flights.get(key) is flight:
            del flights[key]
        flight.done.set()


async def follow(flight: Flight, deadline: float, late: OpError) -> object | None:
    """The leader's page, its error re-raised, or None when the leader ended without an
    outcome for everyone (cancelled, or stopped by its own budget); ``late`` is raised
    when ``deadline`` (trio time) comes first."""
    flight.followers += 1
    try:
        with trio.move_on_at(deadline):
            await flight.done.wait()
            if flight.error is not None:
                error = flight.error  # a fresh exception: one object raised in two tasks is shared
                raise OpError(error.code, error.detail, fields=error.fields)
            return flight.page
    finally:
        flight.followers -= 1
    raise late
