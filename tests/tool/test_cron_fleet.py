"""Cron across daemons on one Redis: jobs stored once, each run by exactly one daemon, a run
whose daemon died taken over under the job's missed policy, and nothing fired while Redis is
unavailable (on trio's MockClock; Redis is a real server)."""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

import trio
import trio.testing

from csp_web.config import Config, DaemonConfig
from csp_web.config.redis import RedisConfig
from csp_web.infra.redis_link import RedisLink, open_redis_link
from tests.redis.conftest import (  # noqa: F401  (fixtures)
    OpenLink,
    open_link,
    redis_config,
    redis_server,
)
from tests.redis_server import RedisServer
from tests.tool.cron_support import Rig, TrioWall, cron_config, open_rig, settle

MockClock = trio.testing.MockClock
KEY = "j@2026-01-10T00:05:00Z"


def daemon_config(config: Config, tmp_path: Path, name: str, **cron: object) -> Config:
    state = DaemonConfig(state_dir=str(tmp_path / name), grace_period_s=5.0)
    return cron_config(dataclasses.replace(config, daemon=state), **cron)


def claim_of(server: RedisServer, run: str) -> dict[str, str] | None:
    return server.json_at(f"csp-web:cron:run:{run}")  # type: ignore[no-any-return]


def plant_dead_claim(server: RedisServer, run: str) -> None:
    """``run`` claimed by a daemon that died mid-run: its lease stands, nobody renews it."""
    dead = json.dumps({"owner": "a-daemon-that-died", "state": "running"})
    with server.client() as client:
        client.set(f"csp-web:cron:run:{run}", dead, px=600_000)


def end_lease(server: RedisServer, run: str) -> None:
    """The dead daemon's lease on ``run`` runs out without "done"."""
    with server.client() as client:
        client.delete(f"csp-web:cron:run:{run}")


async def test_a_job_added_on_one_daemon_runs_once_per_occurrence_across_two(
    config: Config,
    tmp_path: Path,
    mock_clock: MockClock,
    open_link: OpenLink,  # noqa: F811
    redis_server: RedisServer,  # noqa: F811
) -> None:
    wall = TrioWall()
    async with (
        open_link() as one,
        open_link() as two,
        open_rig(daemon_config(config, tmp_path, "a"), wall, link=one) as a,
        open_rig(daemon_config(config, tmp_path, "b"), wall, link=two) as b,
    ):
        await a.add("j", "*/5 * * * *")
        await settle(lambda: "j" in {job.id for job in b.cron.jobs()})  # stored once, adopted
        for count in (1, 2, 3):
            await quiet(one, two)
            mock_clock.jump(300)
            await settle(functools.partial(ran, a, b, count))
        await quiet(one, two)
        runs = sorted(a.seen + b.seen)
        assert runs == [KEY, "j@2026-01-10T00:10:00Z", "j@2026-01-10T00:15:00Z"]
        assert all(claim_of(redis_server, run) is not None for run in runs)
        assert {claim_of(redis_server, run)["state"] for run in runs} == {"done"}  # type: ignore[index]


async def quiet(*links: RedisLink) -> None:
    """Until every task waits on trio's clock or an event, none on Redis: a MockClock jump
    must not pass a call's deadline while its reply is on the way."""
    while True:
        await trio.testing.wait_all_tasks_blocked()
        if not any(link.in_flight for link in links):
            return
        await settle(lambda: not any(link.in_flight for link in links))


def ran(a: Rig, b: Rig, count: int) -> bool:
    return len(a.seen) + len(b.seen) == count and not busy(a, b)


def busy(*rigs: Rig) -> bool:
    return any(rig.cron.is_running("j") for rig in rigs)


async def test_nothing_fires_while_redis_is_stopped_and_firing_resumes_when_it_answers(
    config: Config,
    tmp_path: Path,
    mock_clock: MockClock,
    open_link: OpenLink,  # noqa: F811
    redis_server: RedisServer,  # noqa: F811
) -> None:
    async with (
        open_link(call_timeout_s=0.2) as link,
        open_rig(daemon_config(config, tmp_path, "a"), TrioWall(), link=link) as rig,
    ):
        await rig.add("j", "*/5 * * * *")
        await quiet(link)
        redis_server.pause()
        try:
            mock_clock.jump(300)  # 00:05:30: due, but its claim cannot be made
            await settle(lambda: not link.up)
            await trio.testing.wait_all_tasks_blocked()
            assert rig.seen == []
            assert rig.cron.job("j").next_at is not None
            assert rig.cron.job("j").next_at.isoformat() == "2026-01-10T00:05:00+00:00"  # type: ignore[union-attr]
        finally:
            redis_server.resume()
        await past_window(link)
        await quiet(link)
        mock_clock.jump(link.config.retry_s)  # the paused scheduler's next look
        await settle(lambda: rig.seen == [KEY] and not rig.cron.is_running("j"))
        assert link.up
        assert link.fallbacks["cron_paused"] == 1  # REQ:stats' REDIS line, the metrics


async def past_window(link: RedisLink) -> None:
    with trio.fail_after(5):  # real time: the down window is on the monotonic clock
        while link.seconds_to_retry() > 0:
            await trio.to_thread.run_sync(lambda: None)


async def test_a_run_whose_daemon_died_is_taken_over_when_its_lease_ends(
    config: Config,
    tmp_path: Path,
    mock_clock: MockClock,
    open_link: OpenLink,  # noqa: F811
    redis_server: RedisServer,  # noqa: F811
) -> None:
    run_once = daemon_config(config, tmp_path, "b", default_missed="run_once")
    async with open_link() as link, open_rig(run_once, TrioWall(), link=link) as rig:
        await rig.add("j", "*/5 * * * *")
        plant_dead_claim(redis_server, KEY)  # claimed, mid-run, elsewhere
        await quiet(link)
        mock_clock.jump(300)
        await settle(lambda: KEY in {w.key for w in rig.cron._claims._watched.values()})  # type: ignore[union-attr]
        assert rig.seen == []
        end_lease(redis_server, KEY)
        await quiet(link)
        mock_clock.jump(60)  # the scheduler's next look
        await settle(lambda: rig.seen == [KEY] and not rig.cron.is_running("j"))
        await quiet(link)
        assert claim_of(redis_server, KEY)["state"] == "done"  # type: ignore[index]


async def test_a_skip_job_records_a_dead_daemons_run_as_missed_instead(
    config: Config,
    tmp_path: Path,
    mock_clock: MockClock,
    open_link: OpenLink,  # noqa: F811
    redis_server: RedisServer,  # noqa: F811
) -> None:
    async with (
        open_link() as link,
        open_rig(daemon_config(config, tmp_path, "b"), TrioWall(), link=link) as rig,
    ):
        await rig.add("j", "*/5 * * * *")
        plant_dead_claim(redis_server, KEY)
        await quiet(link)
        mock_clock.jump(300)
        await settle(lambda: bool(rig.cron._claims._watched))  # type: ignore[union-attr]
        end_lease(redis_server, KEY)
        await quiet(link)
        mock_clock.jump(60)
        await settle(lambda: bool(rig.history("j")))
        assert rig.seen == []
        assert rig.history("j") == [(KEY, "FAIL")]
        await settle(lambda: (claim_of(redis_server, KEY) or {}).get("state") == "done")


async def test_a_daemon_started_while_redis_is_down_adopts_the_jobs_when_it_returns(
    config: Config,
    tmp_path: Path,
    mock_clock: MockClock,
    open_link: OpenLink,  # noqa: F811
    redis_server: RedisServer,  # noqa: F811
    redis_config: RedisConfig,  # noqa: F811
) -> None:
    first = daemon_config(config, tmp_path, "a")
    async with open_link() as link, open_rig(first, TrioWall(), link=link) as a:
        await a.add("j", "*/5 * * * *")
    redis_server.pause()
    late_config = dataclasses.replace(
        redis_config, call_timeout_s=0.2, connect_timeout_s=0.2, retry_s=1e-3
    )
    try:
        async with (
            open_redis_link(late_config) as late,
            open_rig(daemon_config(config, tmp_path, "b"), TrioWall(), link=late) as b,
        ):
            assert late is not None
            assert b.cron.jobs() == []  # started all the same, with nothing to fire
            redis_server.resume()
            await past_window(late)
            await quiet(late)
            mock_clock.jump(60)  # the scheduler's next look
            await settle(lambda: [job.id for job in b.cron.jobs()] == ["j"])
    finally:
        redis_server.resume()
