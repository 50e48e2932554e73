"""Cron across a fleet (``redis.url``): jobs stored once, each run claimed by one daemon.

Jobs: ``SharedCronStore`` keeps the job table in one Redis hash (``p cron:jobs``, a field per
job, its JSON as in the file). A save writes only the jobs this daemon changed and deletes the
ones it removed, then publishes a ``cron`` event; the other daemons reload the table at their
next wake (a job running there keeps its local state until the run ends). History is
per job, last writer wins: each occurrence is run (and recorded) by one daemon.

Runs: before a daemon starts the run ``<job>@<time>`` it claims ``p cron:run:<key>`` with
``SET NX`` and a lease (``redis.cron_lease_s``), renewed while the run lasts and replaced by a
``done`` mark (kept 8 days) when it ends, so exactly one daemon runs each key (on a
sentinel's master a claim counts once the replicas hold it, ``sentinel.replica_acks``, so a
failover cannot lose it). A daemon that finds the key claimed by another watches it: if the
lease runs out without ``done`` (its daemon died mid-run), the next daemon to look claims it
and the job's missed policy decides (``run_once`` runs it again, ``skip`` records it as
missed). While Redis is unavailable, nothing fires: the scheduler pauses (cursors stay put)
and looks again every ``retry_s``; the occurrences due meanwhile are then on time or missed
as on a restart.

Manual runs (``ACTION run``) of one job never overlap across the fleet: the daemon running one
holds ``p cron:manual:<job>`` (``SET NX`` with the same lease, renewed while the run lasts,
deleted by its owner after); a manual run asked of another daemon meanwhile is ``busy``.

Import: a daemon's own ``cron.json`` is added to the table once, at its first start with
``redis.url`` (``import_jobs``: ``HSETNX`` per job in one script, so daemons importing at
once add each id once and an id already shared keeps the shared job); the file is then
renamed ``cron.json.imported`` (lifecycle.py).
"""

from __future__ import annotations

import datetime
import json
import logging
import math
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any

import trio

from csp_web.infra.redis_link import RedisLink, RedisUnavailable

from .store import VERSION

log = logging.getLogger(__name__)

DONE_TTL_S = 8 * 86400  # a finished run's mark outlives any catch-up of a week's schedule
WATCH_MAX = 1024  # runs claimed by peers that this daemon keeps an eye on

_SAVE_AND_TELL = """
local n = tonumber(ARGV[1])
for i = 2, 1 + 2 * n, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
for i = 2 + 2 * n, #ARGV - 2 do redis.call('HDEL', KEYS[1], ARGV[i]) end
redis.call('PUBLISH', ARGV[#ARGV - 1], ARGV[#ARGV])
return 1
"""

# A claim this daemon made in a call that timed out may have reached Redis all the same: its
# own "running" claim is its to take (the run did not start here).
_CLAIM = """
local claim = redis.call('GET', KEYS[1])
if claim then
  local held = cjson.decode(claim)
  if held['owner'] ~= ARGV[3] or held['state'] ~= 'running' then return 0 end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""

# Jobs from a daemon's own cron.json, added only where the shared table has no job of that id.
_IMPORT = """
local added = {}
for i = 1, #ARGV - 2, 2 do
  if redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1]) == 1 then table.insert(added, ARGV[i]) end
end
if #added > 0 then redis.call('PUBLISH', ARGV[#ARGV - 1], ARGV[#ARGV]) end
return added
"""

_RELEASE = """
local claim = redis.call('GET', KEYS[1])
if claim and cjson.decode(claim)['owner'] == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

_RENEW = """
local claim = redis.call('GET', KEYS[1])
if not claim then return 0 end
if cjson.decode(claim)['owner'] ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
"""


class SharedCronStore:
    """The job table in Redis, with ``CronStore``'s interface (``load`` in a thread)."""

    def __init__(self, link: RedisLink) -> None:
        self._link = link
        self.path = link.key("cron", "jobs")  # named in errors, like the file's path
        self._saved: dict[str, str] = {}  # job id -> JSON as last loaded or saved here
        self._lock = trio.Lock()
        self._script = link.client.register_script(_SAVE_AND_TELL)
        self.changed_elsewhere = False
        self.on_change: Callable[[], None] = lambda: None  # the scheduler's wake-up
        link.on_event("cron", self._on_event)

    def load(self) -> list[dict[str, Any]]:
        """The stored jobs (blocking: a worker thread, bounded by the client's socket timeouts).
        While Redis is unavailable the daemon starts with none and adopts the table at the
        scheduler's first look once Redis answers (nothing fires before)."""
        from redis import RedisError

        try:
            stored: dict[bytes, bytes] = dict(self._link.client.hgetall(self.path))  # type: ignore[arg-type]
        except RedisError as exc:
            log.warning("cron jobs not loaded, redis unavailable (adopted later): %s", exc)
            self.changed_elsewhere = True
            return []
        jobs = {k.decode(): v.decode() for k, v in stored.items()}
        self._saved = jobs
        return [json.loads(text) for _, text in sorted(jobs.items())]

    async def load_async(self) -> list[dict[str, Any]]:
        """``load`` within the link's deadline; raises RedisUnavailable."""

        def read(client: Any) -> dict[bytes, bytes]:
            return dict(client.hgetall(self.path))

        stored = await self._link.call(read, "cron_load")
        self.changed_elsewhere = False
        self._saved = {k.decode(): v.decode() for k, v in stored.items()}
        return [json.loads(text) for _, text in sorted(self._saved.items())]

    async def save(self, snapshot: Callable[[], list[dict[str, object]]]) -> None:
        """Write the jobs of ``snapshot()`` that changed here; raises OSError when Redis is
        unavailable (the service then undoes the change, as for a failed file write)."""
        async with self._lock:
            jobs = {str(job["id"]): json.dumps(job, sort_keys=True) for job in snapshot()}
            changed = {k: v for k, v in jobs.items() if self._saved.get(k) != v}
            removed = [k for k in self._saved if k not in jobs]
            if not changed and not removed:
                return
            args: list[str | int] = [len(changed)]
            for job_id, text in changed.items():
                args += [job_id, text]
            args += [*removed, self._link.channel, self._link.event("cron", version=VERSION)]
            try:
                await self._link.call(
                    lambda r: self._script(keys=[self.path], args=args, client=r), "cron_save"
                )
            except RedisUnavailable as exc:
                raise OSError(str(exc)) from None
            self._saved = jobs

    async def import_jobs(self, documents: list[dict[str, Any]]) -> list[str]:
        """Add ``documents`` (a local cron.json's jobs) where the shared table has no job of
        that id, in one script, so daemons importing at once add each id once; returns the
        ids added (the others keep the shared job). Raises RedisUnavailable."""
        args: list[str] = []
        for job in documents:
            args += [str(job["id"]), json.dumps(job, sort_keys=True)]
        args += [self._link.channel, self._link.event("cron", version=VERSION)]
        script = self._link.client.register_script(_IMPORT)
        added = await self._link.call(
            lambda r: script(keys=[self.path], args=args, client=r), "cron_import"
        )
        return [raw.decode() if isinstance(raw, bytes) else str(raw) for raw in added]

    def _on_event(self, message: dict[str, Any]) -> None:
        if message.get("from") != self._link.daemon_id:
            self.changed_elsewhere = True
            self.on_change()


@dataclass(frozen=True)
class Watched:
    """A run another daemon claimed: taken over if its lease ends without ``done``."""

    job_id: str
    key: str
    at: datetime.datetime


class RunClaims:
    """Claims on run keys, one daemon per key; see the module docstring."""

    def __init__(self, link: RedisLink) -> None:
        self._link = link
        self.lease_s = link.config.cron_lease_s
        self.retry_s = link.config.retry_s
        self._watched: dict[str, Watched] = {}
        self._renew = link.client.register_script(_RENEW)
        self._claim = link.client.register_script(_CLAIM)
        self._release = link.client.register_script(_RELEASE)
        self.claimed = 0
        self.lost = 0
        self.taken_over = 0

    def available(self) -> bool:
        return self._link.available()

    def paused(self) -> None:
        """Count the scheduler's pause (claims unavailable) as the fallback ``cron_paused``."""
        self._link.fallback("cron_paused")

    def _key(self, run: str) -> str:
        return self._link.key("cron", "run", run)

    def _value(self, state: str) -> str:
        return json.dumps({"owner": self._link.daemon_id, "state": state})

    async def claim(self, job_id: str, run: str, at: datetime.datetime) -> bool:
        """True when this daemon is to run ``run``; False when another has it (it is then
        watched). Raises RedisUnavailable: nobody may run it now."""
        key = self._key(run)
        args: list[str | int] = [self._value("running"), self._lease_ms(), self._link.daemon_id]
        won = await self._link.call(
            lambda r: self._claim(keys=[key], args=args, client=r), "claim", replicated=True
        )
        if won:
            self.claimed += 1
            return True
        self.lost += 1
        self._watched[run] = Watched(job_id, run, at)
        while len(self._watched) > WATCH_MAX:
            del self._watched[next(iter(self._watched))]
        return False

    async def orphans(self) -> list[Watched]:
        """The watched runs whose claim ran out without ``done`` (their daemon died), now
        claimed by this daemon. Raises RedisUnavailable."""
        if not self._watched:
            return []
        runs = list(self._watched.values())
        value, lease_ms = self._value("running"), self._lease_ms()

        def look(client: Any) -> list[Any]:
            pipe = client.pipeline(transaction=False)
            for run in runs:
                pipe.set(self._key(run.key), value, nx=True, px=lease_ms)
                pipe.get(self._key(run.key))
            return list(pipe.execute())

        answers = await self._link.call(look, "claim_orphans", replicated=True)
        orphans = []
        for run, won, current in zip(runs, answers[::2], answers[1::2], strict=True):
            if won:
                orphans.append(run)
            if won or current is None or json.loads(current).get("state") == "done":
                self._watched.pop(run.key, None)  # ours now, or finished by its daemon
        self.taken_over += len(orphans)
        return orphans

    @asynccontextmanager
    async def hold(self, run: str) -> AsyncIterator[None]:
        """Renew the claim on ``run`` while the body runs; mark it ``done`` after."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._keep, run)
            try:
                yield
            finally:
                nursery.cancel_scope.cancel()
        key, value = self._key(run), self._value("done")
        with trio.CancelScope(shield=True), suppress(RedisUnavailable):
            await self._link.call(lambda r: r.set(key, value, ex=DONE_TTL_S), "claim_done")

    async def claim_manual(self, job_id: str) -> bool:
        """Claim ``job_id``'s manual run slot (``p cron:manual:<job>``) for this daemon, with
        the run lease; False while another daemon's manual run of it holds it. Raises
        RedisUnavailable."""
        key, value, lease_ms = self._manual_key(job_id), self._value("running"), self._lease_ms()
        won = await self._link.call(
            lambda r: r.set(key, value, nx=True, px=lease_ms), "claim_manual", replicated=True
        )
        return bool(won)

    async def release_manual(self, job_id: str) -> None:
        """Give the slot back (only when this daemon holds it); its lease ends it otherwise."""
        key, owner = self._manual_key(job_id), self._link.daemon_id
        with trio.CancelScope(shield=True), suppress(RedisUnavailable):
            await self._link.call(
                lambda r: self._release(keys=[key], args=[owner], client=r), "release_manual"
            )

    @asynccontextmanager
    async def hold_manual(self, job_id: str) -> AsyncIterator[None]:
        """Renew the claimed manual slot of ``job_id`` while the body runs; release it after."""
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._keep_key, self._manual_key(job_id), job_id)
                try:
                    yield
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            await self.release_manual(job_id)

    def _manual_key(self, job_id: str) -> str:
        return self._link.key("cron", "manual", job_id)

    async def _keep(self, run: str) -> None:
        await self._keep_key(self._key(run), run)

    async def _keep_key(self, key: str, run: str) -> None:
        value = self._value("running")
        owner = self._link.daemon_id
        args: list[str | int] = [owner, value, self._lease_ms()]
        while True:
            await trio.sleep(self.lease_s / 3)
            try:
                kept = await self._link.call(
                    lambda r: self._renew(keys=[key], args=args, client=r), "claim_renew"
                )
            except RedisUnavailable:
                continue  # the lease may lapse: a peer may take over, as if we had died
            if not kept:
                log.warning("cron run %s: claim lost while running", run)
                return

    def _lease_ms(self) -> int:
        return max(1, math.ceil(self.lease_s * 1000))

    def stats(self) -> str:
        return f"claimed:{self.claimed},lost:{self.lost},taken_over:{self.taken_over}"
