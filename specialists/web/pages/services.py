"""What the pages product uses of the web specialist's services (``WebServices`` has it all):
the guarded client, the response cache, the rate buckets, the flights of downloads in the
daemon and across the fleet, the peers' board that fetch announces snapshots on, and the
worker processes CPU-heavy work runs in."""

from __future__ import annotations

from typing import Protocol

from csp_web.core.api.ports import Port, Renderer
from csp_web.infra.redis_cache import ResponseCache
from csp_web.infra.redis_flight import SharedFlights
from csp_web.infra.redis_ratelimit import BucketSource
from csp_web.infra.workers import WorkerPool
from csp_web.net import GuardedClient
from specialists.web.config import WebConfig

from ..docs.board import Board
from .flights import Flights


class PagesServices(Protocol):
    """Loading, fileKeys and the fetch, api and summarize ops read only these."""

    config: WebConfig
    client: GuardedClient
    cache: ResponseCache
    limits: BucketSource
    flights: Flights  # downloads in progress, by URL
    render_flights: Flights  # renders in progress, by URL (rendering.py)
    fleet_flights: SharedFlights | None  # downloads in flight across the fleet (redis.url)
    board: Board  # fetch puts each snapshot it reads on the peer's board
    renderer: Port[Renderer]  # the browser's, while it is open
    pool: WorkerPool  # the worker processes extraction and summaries run in (web.workers)
