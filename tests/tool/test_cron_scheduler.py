"""The scheduler on trio's MockClock: occurrences run once each, across restarts and downtime."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest
import trio
import trio.testing

from csp_web.config import Config
from csp_web.core.api.context import OpContext
from csp_web.core.api.fields import Params
from csp_web.core.api.ops import Op
from csp_web.core.api.replies import Result
from csp_web.cron.jobs import INTERRUPTED
from protocol import Reply, Status
from tests.tool.cron_support import (
    FAIL_TICK,
    TICK,
    Rig,
    TrioWall,
    code,
    cron_config,
    job_lines,
    open_rig,
    settle,
)

MockClock = trio.testing.MockClock


def _key(hhmm: str) -> str:
    return f"j@2026-01-10T{hhmm}:00Z"


async def _ran(rig: Rig, count: int, job_id: str = "j") -> None:
    await settle(lambda: len(rig.seen) == count and not rig.cron.is_running(job_id))


def hang_op(started: list[str]) -> Op[Any]:
    async def hang(params: Params, ctx: OpContext, _: Any) -> Result:
        started.append(ctx.task_id)
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    return Op("hang", "TEST", "HUNG", "tool", hang)


# The longest deadline a task may have, so no jump below cuts the hang short.
HANG = "TASK REQ:hang IN:TEST OUT:HUNG\nTIMEOUT_MS 600000\n"


async def test_a_five_minute_job_runs_each_occurrence_once_under_its_own_key(
    config: Config, mock_clock: MockClock
) -> None:
    async with open_rig(cron_config(config), TrioWall()) as rig:
        added = await rig.add("j", "*/5 * * * *")
        assert added.get("NEXT_RUN") == "2026-01-10T00:05:00Z"
        for count in (1, 2, 3):
            mock_clock.jump(300)
            await _ran(rig, count)
        assert rig.seen == [_key("00:05"), _key("00:10"), _key("00:15")]
        assert rig.history("j") == [(key, "OK") for key in rig.seen]
        (job,) = job_lines(await rig.call(("ACTION", "list")))
        assert job["next_run"] == "2026-01-10T00:20:00Z"


async def test_a_restart_does_not_rerun_an_occurrence_already_run(
    config: Config, mock_clock: MockClock
) -> None:
    config = cron_config(config, default_missed="run_once")
    wall = TrioWall()
    async with open_rig(config, wall) as rig:
        await rig.add("j", "*/5 * * * *")
        mock_clock.jump(300)
        await _ran(rig, 1)
    async with open_rig(config, wall) as rig:  # a new service over the same file, same minute
        await trio.testing.wait_all_tasks_blocked()
        assert rig.seen == []
        assert rig.history("j") == [(_key("00:05"), "OK")]
        mock_clock.jump(300)
        await _ran(rig, 1)
        assert rig.seen == [_key("00:10")]


async def test_a_run_cut_off_by_a_stop_is_not_run_again_and_reads_back_interrupted(
    config: Config, mock_clock: MockClock
) -> None:
    config = cron_config(config, default_missed="run_once")
    wall, started = TrioWall(), list[str]()
    async with open_rig(config, wall, [hang_op(started)]) as rig:
        await rig.add("j", "*/5 * * * *", HANG)
        mock_clock.jump(300)
        await settle(lambda: started == [_key("00:05")])
    async with open_rig(config, wall, [hang_op(started)]) as rig:
        await trio.testing.wait_all_tasks_blocked()
        assert started == [_key("00:05")]
        (outcome,) = rig.cron.job("j").history
        assert (outcome.key, outcome.status, outcome.error) == (_key("00:05"), "FAIL", INTERRUPTED)


@pytest.mark.parametrize(("missed", "caught_up"), [("skip", []), ("run_once", [_key("01:05")])])
async def test_after_an_hour_down_skip_runs_none_and_run_once_runs_the_latest_once(
    config: Config, mock_clock: MockClock, missed: str, caught_up: list[str]
) -> None:
    config = cron_config(config)
    wall = TrioWall()
    async with open_rig(config, wall) as rig:
        await rig.add("j", "*/5 * * * *", TICK, ("MISSED", missed))
        mock_clock.jump(270)  # 00:05:00, on the dot
        await _ran(rig, 1)
    mock_clock.jump(3600 + 150)  # down until 01:07:30: the 12 runs 00:10 ... 01:05 are missed
    async with open_rig(config, wall) as rig:
        await _ran(rig, len(caught_up))
        assert rig.seen == caught_up
        (job,) = job_lines(await rig.call(("ACTION", "list")))
        assert job["next_run"] == "2026-01-10T01:10:00Z"
        assert job["missed"] == missed
        mock_clock.jump(150)
        await _ran(rig, len(caught_up) + 1)
        assert rig.seen[-1] == _key("01:10")


async def test_missed_defaults_to_the_configured_policy(
    config: Config, mock_clock: MockClock
) -> None:
    async with open_rig(cron_config(config, default_missed="run_once"), TrioWall()) as rig:
        await rig.add("j", "*/5 * * * *")
        (job,) = job_lines(await rig.call(("ACTION", "list")))
        assert job["missed"] == "run_once"


async def test_a_host_asleep_for_an_hour_counts_as_missed_while_running(
    config: Config, mock_clock: MockClock
) -> None:
    async with open_rig(cron_config(config), TrioWall()) as rig:
        await rig.add("a", "*/5 * * * *", TICK, ("MISSED", "skip"))
        await rig.add("b", "*/5 * * * *", TICK, ("MISSED", "run_once"))
        mock_clock.jump(3600 + 150)  # one wake-up, 01:00:30 ... the last run is 150 s late
        await settle(lambda: len(rig.seen) == 1 and not rig.cron.is_running("b"))
        assert rig.seen == ["b@2026-01-10T01:00:00Z"]


async def test_disable_stops_runs_and_enable_resumes_without_catching_up(
    config: Config, mock_clock: MockClock
) -> None:
    async with open_rig(cron_config(config), TrioWall()) as rig:
        await rig.add("j", "*/5 * * * *")
        disabled = await rig.call(("ACTION", "disable"), ("JOB_ID", "j"))
        assert disabled == Reply(
            Status.OK,
            (
                ("SCOPE", "[cron]"),
                ("DATA", "jobs:1,active:0,disabled:1"),
                ("JOB_DISABLED", "j"),
            ),
        )
        mock_clock.jump(600)  # 00:10:30: 00:05 and 00:10 pass while disabled
        await trio.testing.wait_all_tasks_blocked()
        assert rig.seen == []
        assert job_lines(await rig.call(("ACTION", "list")))[0]["next_run"] is None
        enabled = await rig.call(("ACTION", "enable"), ("JOB_ID", "j"))
        assert enabled == Reply(
            Status.OK,
            (
                ("SCOPE", "[cron]"),
                ("DATA", "jobs:1,active:1,disabled:0"),
                ("JOB_ENABLED", "j"),
                ("NEXT_RUN", "2026-01-10T00:15:00Z"),
            ),
        )
        mock_clock.jump(300)
        await _ran(rig, 1)
        assert rig.seen == [_key("00:15")]


async def test_run_executes_the_job_now_and_replies_with_its_outcome(
    config: Config, mock_clock: MockClock
) -> None:
    async with open_rig(cron_config(config), TrioWall()) as rig:
        await rig.add("j", "0 3 * * *")
        await rig.add("f", "0 3 * * *", FAIL_TICK)
        ok = await rig.call(("ACTION", "run"), ("JOB_ID", "j"))
        again = await rig.call(("JOB_ID", "j"), inline="run")
        failed = await rig.call(("ACTION", "run"), ("JOB_ID", "f"))
    assert ok == Reply(
        Status.OK,
        (
            ("SCOPE", "[cron]"),
            ("DATA", "jobs:2,active:2,disabled:0"),
            ("JOB_RUN", "j"),
            ("RUN_KEY", "j@2026-01-10T00:00:30.000000Z"),
            ("RUN_STATUS", "OK"),
        ),
    )
    assert again.get("RUN_KEY") == "j@2026-01-10T00:00:30.000001Z"  # same instant, own key
    assert failed.status is Status.OK
    assert failed.get("RUN_STATUS") == "FAIL"
    assert failed.get("RUN_ERROR") == "command_failed:told to fail"
    assert rig.seen == [ok.get("RUN_KEY"), again.get("RUN_KEY"), failed.get("RUN_KEY")]


async def test_list_shows_each_jobs_last_outcomes(config: Config, mock_clock: MockClock) -> None:
    async with open_rig(cron_config(config), TrioWall()) as rig:
        await rig.add("j", "*/5 * * * *", FAIL_TICK, ("TASK_DESCRIPTION", "Memory maintenance"))
        mock_clock.jump(300)
        await _ran(rig, 1)
        listed = await rig.call(("ACTION", "list"))
    assert listed.get("DATA") == "jobs:1,active:1,disabled:0"
    assert job_lines(listed) == [
        {
            "id": "j",
            "schedule": "*/5 * * * *",
            "tz": "UTC",
            "enabled": True,
            "description": "Memory maintenance",
            "task": "REQ:tick IN:TEST OUT:TICKED",
            "next_run": "2026-01-10T00:10:00Z",
            "missed": "skip",
            "owner_uid": None,
            "history": [
                {
                    "key": _key("00:05"),
                    "at": "2026-01-10T00:05:00Z",
                    "status": "FAIL",
                    "error": "command_failed:told to fail",
                }
            ],
            "running": False,
        }
    ]


@pytest.mark.parametrize(("runs", "shown"), [(2, 2), (3, 2)])
async def test_list_shows_at_most_history_outcomes_per_job(
    config: Config, mock_clock: MockClock, runs: int, shown: int
) -> None:
    async with open_rig(cron_config(config, history=2), TrioWall()) as rig:
        await rig.add("j", "0 3 * * *")
        for _ in range(runs):
            await rig.call(("ACTION", "run"), ("JOB_ID", "j"))
        (job,) = job_lines(await rig.call(("ACTION", "list")))
    assert [h["key"] for h in job["history"]] == rig.seen[-shown:]


async def test_each_run_sends_a_cron_run_record_to_the_outbox(
    config: Config, mock_clock: MockClock
) -> None:
    async with open_rig(cron_config(config), TrioWall()) as rig:
        await rig.add("j", "*/5 * * * *")
        mock_clock.jump(300)
        await _ran(rig, 1)
        await rig.call(("ACTION", "run"), ("JOB_ID", "j"))
        writes = rig.writes("cron_run")
    assert [w.source for w in writes] == ["tool", "tool"]
    assert all(w.path.startswith("cron-runs/") and w.path.endswith(".json") for w in writes)
    records = [json.loads(w.data) for w in writes]
    assert [r["key"] for r in records] == rig.seen
    assert records[0]["job"] == "j"
    assert records[0]["status"] == "OK"
    assert records[0]["at"] == "2026-01-10T00:05:00Z"
    assert records[0]["task"] == "REQ:tick IN:TEST OUT:TICKED"


async def test_a_job_at_three_in_paris_fires_at_two_utc_in_winter(
    config: Config, mock_clock: MockClock
) -> None:
    async with open_rig(cron_config(config), TrioWall()) as rig:
        added = await rig.add("j", "0 3 * * *", TICK, ("TZ", "Europe/Paris"))
        assert added.get("NEXT_RUN") == "2026-01-10T02:00:00Z"
        mock_clock.jump(2 * 3600 - 31)  # 01:59:59
        await trio.testing.wait_all_tasks_blocked()
        assert rig.seen == []
        mock_clock.jump(1)
        await _ran(rig, 1)
        assert rig.seen == [_key("02:00")]


async def test_a_job_never_overlaps_itself(config: Config, mock_clock: MockClock) -> None:
    started: list[str] = []
    async with open_rig(cron_config(config), TrioWall(), [hang_op(started)]) as rig:
        await rig.add("j", "*/5 * * * *", HANG)
        mock_clock.jump(300)
        await settle(lambda: len(started) == 1)
        mock_clock.jump(300)
        await settle(lambda: len(rig.history("j")) == 2)
        assert rig.history("j") == [(_key("00:05"), "RUNNING"), (_key("00:10"), "FAIL")]
        assert code(await rig.call(("ACTION", "run"), ("JOB_ID", "j"))) == "cron_error"
        assert started == [_key("00:05")]


async def test_removing_a_job_stops_its_runs(config: Config, mock_clock: MockClock) -> None:
    async with open_rig(cron_config(config), TrioWall()) as rig:
        await rig.add("j", "*/5 * * * *")
        removed = await rig.call(("ACTION", "remove"), ("JOB_ID", "j"))
        assert removed == Reply(
            Status.OK,
            (("SCOPE", "[cron]"), ("DATA", "jobs:0,active:0,disabled:0"), ("JOB_REMOVED", "j")),
        )
        mock_clock.jump(600)
        await trio.testing.wait_all_tasks_blocked()
        assert rig.seen == []


async def test_a_wall_clock_stepped_back_does_not_rerun_an_occurrence(
    config: Config, mock_clock: MockClock
) -> None:
    wall = TrioWall()
    async with open_rig(cron_config(config), wall) as rig:
        await rig.add("j", "*/5 * * * *")
        mock_clock.jump(300)
        await _ran(rig, 1)
        wall.base -= datetime.timedelta(minutes=10)  # NTP steps the clock back to 23:55:30
        mock_clock.jump(300)  # the wall passes 00:05 a second time
        await trio.testing.wait_all_tasks_blocked()
        assert rig.seen == [_key("00:05")]
        mock_clock.jump(600)
        await _ran(rig, 2)
        assert rig.seen == [_key("00:05"), _key("00:10")]


async def test_a_disabled_job_can_still_be_run_by_hand(
    config: Config, mock_clock: MockClock
) -> None:
    async with open_rig(cron_config(config), TrioWall()) as rig:
        await rig.add("j", "*/5 * * * *")
        await rig.call(("ACTION", "disable"), ("JOB_ID", "j"))
        again = await rig.call(("ACTION", "disable"), ("JOB_ID", "j"))
        assert again.get("DATA") == "jobs:1,active:0,disabled:1"
        ran = await rig.call(("ACTION", "run"), ("JOB_ID", "j"))
        assert ran.get("RUN_STATUS") == "OK"
        assert len(rig.seen) == 1
