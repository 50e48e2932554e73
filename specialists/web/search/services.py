"""What the search product uses of the web specialist's services: the pages' (search loads
result pages ahead, prefetch.py) and its own state, the backends' circuits, the monthly quota
file and the prefetcher."""

from __future__ import annotations

import os
from typing import Protocol

import trio

from ..pages.services import PagesServices
from .breaker import Breaker
from .prefetch import Prefetcher


class SearchServices(PagesServices, Protocol):
    """The search op and its backend chain read only these."""

    state_dir: str  # the monthly quota file's folder
    breakers: dict[str, Breaker]  # the backends' circuits, by name
    quota_lock: trio.Lock  # the monthly quota file: one writer
    prefetch: Prefetcher  # search's background page loads


def quota_path(services: SearchServices) -> str:
    """The monthly quota file of the search backends."""
    return os.path.join(services.state_dir, "quotas.json")
