"""Opening the cron service over its job file, and the daemon's background task that serves it.

async with open_cron(config) as cron:
    ...   # the daemon runs serve_cron(port) (or cron.serve(port)) as a background task
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import trio

from csp_web.config import Config
from csp_web.infra.redis_link import RedisLink, RedisUnavailable

from .claims import RunClaims, SharedCronStore
from .config import cron_section
from .jobs import Job
from .runs import WallClock, system_now
from .service import CronService
from .store import CronStore, CronStoreError

log = logging.getLogger(__name__)

IMPORTED_SUFFIX = ".imported"  # a job file taken into the fleet's table (never read again)


def store_path(config: Config) -> str:
    return cron_section(config).store_path or os.path.join(config.daemon.state_dir, "cron.json")


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
    keep = cron_section(config).history
    if isinstance(store, SharedCronStore):
        await import_local_jobs(store, store_path(config), keep)
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
    yield CronService(cron_section(config), store, jobs, now_wall=now_wall, claims=claims)


async def import_local_jobs(store: SharedCronStore, path: str, keep: int) -> None:
    """Add the jobs of this daemon's own job file at ``path`` to the fleet's table once, then
    rename the file ``<path>.imported`` so no later start imports it again. A job whose id
    the table already has keeps the table's version (logged; the renamed file still holds
    the local one). While Redis is unavailable the file is left for the next start. Raises
    CronStoreError for a file that is not a job file (as without Redis)."""
    documents = await trio.to_thread.run_sync(CronStore(path).load)
    if not documents:
        return
    jobs = []
    for document in documents:
        try:
            jobs.append(Job.from_json(document, keep).to_json())
        except (KeyError, TypeError, ValueError) as exc:
            raise CronStoreError(f"{path}: bad job {document.get('id')!r}: {exc}") from exc
    try:
        added = await store.import_jobs(jobs)
    except RedisUnavailable as exc:
        log.warning("cron: %s not imported, redis unavailable (next start): %s", path, exc)
        return
    for job in jobs:
        if job["id"] not in added:
            log.warning("cron: job %s of %s not imported: the fleet has one", job["id"], path)
    await trio.to_thread.run_sync(os.replace, path, path + IMPORTED_SUFFIX)
    log.info("cron: %d jobs of %s imported, file renamed %s", len(added), path, IMPORTED_SUFFIX)


def serve_cron(service: CronService) -> Callable[..., Awaitable[None]]:
    """The daemon's background task for ``service``: its scheduler, served until cancelled."""
    return service.serve
