"""Cron across daemons on one Redis, the parts a daemon's own actions bring: a manual run of
a job never overlaps one at another daemon, and a daemon's old cron.json joins the shared
table once (Redis is a real server; the clock is trio's MockClock)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import trio
import trio.testing

from csp_web.config import Config
from csp_web.config.redis import RedisConfig
from csp_web.core.api.context import OpContext
from csp_web.core.api.fields import Params
from csp_web.core.api.ops import Op
from csp_web.core.api.replies import Result
from csp_web.infra.redis_link import open_redis_link
from protocol import Reply, Status
from tests.redis.conftest import (  # noqa: F401  (fixtures)
    OpenLink,
    open_link,
    redis_config,
    redis_server,
)
from tests.redis_server import RedisServer
from tests.tool.cron_support import TrioWall, code, open_rig, settle
from tests.tool.test_cron_fleet import daemon_config, quiet

MockClock = trio.testing.MockClock
HOLD = "TASK REQ:hold IN:TEST OUT:HELD\n"


def hold_op(started: trio.Event, release: trio.Event) -> Op[Any]:
    """``hold``: a task that runs until the test releases it."""

    async def hold(params: Params, ctx: OpContext, _: Any) -> Result:
        started.set()
        await release.wait()
        return Result("held", ("test",))

    return Op("hold", "TEST", "HELD", "tool", hold, ())


def shared_jobs(server: RedisServer) -> dict[str, dict[str, Any]]:
    with server.client() as client:
        stored = client.hgetall("csp-web:cron:jobs")
    return {k.decode(): json.loads(v) for k, v in stored.items()}  # type: ignore[union-attr]


async def test_a_manual_run_on_one_daemon_makes_the_same_jobs_manual_run_busy_on_another(
    config: Config,
    tmp_path: Path,
    mock_clock: MockClock,
    open_link: OpenLink,  # noqa: F811
    redis_server: RedisServer,  # noqa: F811
) -> None:
    started, release = trio.Event(), trio.Event()
    wall = TrioWall()
    ops = [hold_op(started, release)]
    async with (
        open_link() as one,
        open_link() as two,
        open_rig(daemon_config(config, tmp_path, "a"), wall, ops, link=one) as a,
        open_rig(daemon_config(config, tmp_path, "b"), wall, ops, link=two) as b,
        trio.open_nursery() as nursery,
    ):
        await a.add("j", "0 3 * * *", HOLD)
        await settle(lambda: "j" in {job.id for job in b.cron.jobs()})
        first: list[Reply] = []

        async def run_on_a() -> None:
            first.append(await a.call(("ACTION", "run"), ("JOB_ID", "j")))

        nursery.start_soon(run_on_a)
        with trio.fail_after(10):
            await started.wait()
        second: list[Reply] = []

        async def run_on_b() -> None:
            second.append(await b.call(("ACTION", "run"), ("JOB_ID", "j")))

        nursery.start_soon(run_on_b)
        await settle(lambda: bool(second))  # before the slot, b ran it too (held here)
        refused = second[0]
        assert code(refused) == "busy"
        assert refused.get("ERROR") == "busy:job j is being run by hand on another daemon"
        release.set()
        await settle(lambda: bool(first))
        assert first[0].get("RUN_STATUS") == "OK"
        await quiet(one, two)
        again = await b.call(("ACTION", "run"), ("JOB_ID", "j"))  # the slot was given back
        assert again.status is Status.OK, again
        assert again.get("RUN_STATUS") == "OK"


async def test_a_local_cron_json_is_imported_once_and_renamed_and_a_shared_id_keeps_its_job(
    config: Config,
    tmp_path: Path,
    mock_clock: MockClock,
    open_link: OpenLink,  # noqa: F811
    redis_server: RedisServer,  # noqa: F811
) -> None:
    wall = TrioWall()
    a_config, b_config = daemon_config(config, tmp_path, "a"), daemon_config(config, tmp_path, "b")
    async with open_rig(a_config, wall) as a_alone:  # before redis.url: its own cron.json
        await a_alone.add("j", "0 3 * * *")
        await a_alone.add("k", "0 4 * * *")
    async with open_rig(b_config, wall) as b_alone:
        await b_alone.add("j", "0 5 * * *")  # the same id, another job
        await b_alone.add("m", "0 6 * * *")
    a_file, b_file = tmp_path / "a" / "cron.json", tmp_path / "b" / "cron.json"
    async with open_link() as link, open_rig(a_config, wall, link=link) as a:
        assert [job.id for job in a.cron.jobs()] == ["j", "k"]
    assert not a_file.exists()
    assert (tmp_path / "a" / "cron.json.imported").exists()
    async with open_link() as link, open_rig(b_config, wall, link=link) as b:
        assert [job.id for job in b.cron.jobs()] == ["j", "k", "m"]
        assert b.cron.job("j").schedule.expr == "0 3 * * *"  # the fleet's j
    assert not b_file.exists()
    async with open_link() as link, open_rig(a_config, wall, link=link) as a_again:
        await a_again.call(("ACTION", "remove"), ("JOB_ID", "k"))
    async with open_link() as link, open_rig(a_config, wall, link=link) as a_third:
        assert [job.id for job in a_third.cron.jobs()] == ["j", "m"]  # k not imported again
    assert sorted(shared_jobs(redis_server)) == ["j", "m"]


async def test_two_daemons_importing_the_same_job_id_at_once_store_it_once(
    config: Config,
    tmp_path: Path,
    mock_clock: MockClock,
    open_link: OpenLink,  # noqa: F811
    redis_server: RedisServer,  # noqa: F811
) -> None:
    wall = TrioWall()
    configs = [daemon_config(config, tmp_path, name) for name in "ab"]
    for each, schedule in zip(configs, ("0 3 * * *", "0 5 * * *"), strict=True):
        async with open_rig(each, wall) as alone:
            await alone.add("j", schedule)
    seen: list[list[str]] = []

    async def start(each: Config) -> None:
        async with open_link() as link, open_rig(each, wall, link=link) as rig:
            seen.append([job.id for job in rig.cron.jobs()])

    async with trio.open_nursery() as nursery:
        for each in configs:
            nursery.start_soon(start, each)
    assert seen == [["j"], ["j"]]
    stored = shared_jobs(redis_server)
    assert list(stored) == ["j"]
    assert stored["j"]["schedule"] in ("0 3 * * *", "0 5 * * *")


async def test_a_cron_json_is_left_for_the_next_start_while_redis_is_stopped(
    config: Config,
    tmp_path: Path,
    mock_clock: MockClock,
    open_link: OpenLink,  # noqa: F811
    redis_server: RedisServer,  # noqa: F811
    redis_config: RedisConfig,  # noqa: F811
) -> None:
    wall = TrioWall()
    a_config = daemon_config(config, tmp_path, "a")
    async with open_rig(a_config, wall) as alone:
        await alone.add("j", "0 3 * * *")
    late = dataclasses.replace(redis_config, call_timeout_s=0.2, connect_timeout_s=0.2)
    redis_server.pause()
    try:
        async with open_redis_link(late) as link, open_rig(a_config, wall, link=link) as rig:
            assert rig.cron.jobs() == []
    finally:
        redis_server.resume()
    assert (tmp_path / "a" / "cron.json").exists()  # not renamed: nothing was imported
    async with open_link() as link, open_rig(a_config, wall, link=link) as again:
        assert [job.id for job in again.cron.jobs()] == ["j"]
    assert not (tmp_path / "a" / "cron.json").exists()
