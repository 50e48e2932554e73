"""Opening the cron service over its job file, and the daemon's background task that serves it.

async with open_cron(config) as cron:
    ...   # the daemon runs serve_cron(port) (or cron.serve(port)) as a background task
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import trio

from csp_web.config import Config
from csp_web.infra.redis_link import RedisLink

from .claims import RunClaims, SharedCronStore
from .jobs import Job
from .runs import WallClock, system_now
from .service import CronService
from .store import CronStore, CronStoreError


def store_path(config: Config) -> str:
    return config.tool.cron.store_path or os.path.join(config.daemon.state_dir, "cron.json")


@asynccontextmanager
async def open_cron(
    config: Config, *, now_wall: WallClock = system_now, link: RedisLink | None = None
) -> AsyncIterator[CronService]:
    """The cron service over the job file; raises CronStoreError for an unreadable file.

    ``now_wall`` is the wall clock (tests pass one driven by trio's MockClock). The caller
    runs ``serve_cron`` for the scheduler; nothing here needs closing beyond it.
    """
    # With a link the fleet shares one job table and claims each run (cron/claims.py).
    store = CronStore(store_path(config)) if link is None else SharedCronStore(link)
    keep = config.tool.cron.history
    documents = await trio.to_thread.run_sync(store.load)
    jobs: list[Job] = []
    for document in documents:
        try:
            jobs.append(Job.from_json(document, keep))
        except (KeyError, TypeError, ValueError) as exc:
            raise CronStoreError(f"{store.path}: bad job {document.get('id')!r}: {exc}") from exc
    if len({job.id for job in jobs}) != len(jobs):
        raise CronStoreError(f"{store.path}: a job id appears twice")
    claims = None if link is None else RunClaims(link)
    yield CronService(config.tool.cron, store, jobs, now_wall=now_wall, claims=claims)


def serve_cron(service: CronService) -> Callable[..., Awaitable[None]]:
    """The daemon's background task for ``service``: its scheduler, served until cancelled."""
    return service.serve
