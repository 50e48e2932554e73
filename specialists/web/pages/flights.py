"""Single-flight downloads: one download per URL at a time, the other callers follow it."""

from __future__ import annotations

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
