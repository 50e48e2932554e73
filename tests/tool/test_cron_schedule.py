"""Cron schedules, run keys and job tasks: synchronous, no I/O."""

from __future__ import annotations

import datetime

import pytest

from csp_web.cron import (
    JobTaskError,
    ScheduleError,
    iso,
    parse_job_task,
    parse_schedule,
    run_key,
)
from protocol import Task

UTC = datetime.UTC


def _utc(year: int, month: int, day: int, hour: int, minute: int) -> datetime.datetime:
    return datetime.datetime(year, month, day, hour, minute, tzinfo=UTC)


def test_three_am_in_paris_fires_at_two_utc_in_winter_and_one_in_summer() -> None:
    schedule = parse_schedule("0 3 * * *", "Europe/Paris")
    assert schedule.next_after(_utc(2026, 1, 10, 0, 0)) == _utc(2026, 1, 10, 2, 0)
    assert schedule.next_after(_utc(2026, 7, 10, 0, 0)) == _utc(2026, 7, 10, 1, 0)


def test_without_tz_a_schedule_is_utc() -> None:
    schedule = parse_schedule("0 3 * * *", None)
    assert schedule.tz == "UTC"
    assert schedule.next_after(_utc(2026, 1, 10, 0, 0)) == _utc(2026, 1, 10, 3, 0)


def test_next_after_is_strictly_after_and_latest_is_at_or_before() -> None:
    schedule = parse_schedule("*/5 * * * *", None)
    at = _utc(2026, 1, 10, 0, 5)
    assert schedule.next_after(at) == _utc(2026, 1, 10, 0, 10)
    assert schedule.latest_at_or_before(at) == at
    assert schedule.latest_at_or_before(at - datetime.timedelta(microseconds=1)) == _utc(
        2026, 1, 10, 0, 0
    )


def test_a_wall_time_in_the_spring_gap_fires_once_at_the_first_valid_minute() -> None:
    schedule = parse_schedule("30 2 * * *", "Europe/Paris")  # 2026-03-29 02:30 does not exist
    fired = schedule.next_after(_utc(2026, 3, 28, 12, 0))
    assert fired == _utc(2026, 3, 29, 1, 0)  # 03:00 CEST
    assert schedule.next_after(fired) == _utc(2026, 3, 30, 0, 30)


def test_spaces_between_fields_are_normalised() -> None:
    assert parse_schedule("0  3 *\t* *", None).expr == "0 3 * * *"


@pytest.mark.parametrize(
    "expr",
    [
        "0 3 * *",  # four fields
        "0 0 3 * * *",  # croniter's seconds field
        "@daily",
        "61 3 * * *",
        "*/0 * * * *",
        "H 3 * * *",  # hashed, needs a hash id
        "0 3 * * * ; rm",
        "0 0 31 2 *",  # never fires
        "",
    ],
)
def test_a_schedule_cron_would_not_read_the_same_is_refused(expr: str) -> None:
    with pytest.raises(ScheduleError):
        parse_schedule(expr, None)


@pytest.mark.parametrize("tz", ["Mars/Olympus", "../../etc/passwd", "Europe/../UTC", " UTC", ""])
def test_an_unknown_or_path_like_tz_is_refused(tz: str) -> None:
    with pytest.raises(ScheduleError):
        parse_schedule("0 3 * * *", tz)


def test_run_keys_are_job_at_utc_time_and_manual_keys_carry_a_fraction() -> None:
    at = _utc(2026, 1, 10, 2, 0)
    assert run_key("memory-daily-sweep", at) == "memory-daily-sweep@2026-01-10T02:00:00Z"
    assert run_key("j", at, precise=True) == "j@2026-01-10T02:00:00.000000Z"
    assert iso(at.astimezone(datetime.timezone(datetime.timedelta(hours=1)))) == (
        "2026-01-10T02:00:00Z"
    )


def test_a_job_task_is_one_task_frame() -> None:
    text = "TASK REQ:write IN:MEMORY OUT:ACK\nFROM sys\nTYPE document\nPATH notes/sweep.md\n"
    task = parse_job_task(text + "DATA swept\n")
    assert task == Task(
        "write",
        "MEMORY",
        "ACK",
        None,
        (("FROM", "sys"), ("TYPE", "document"), ("PATH", "notes/sweep.md"), ("DATA", "swept")),
    )
    assert parse_job_task("TASK REQ:ping IN:SYS OUT:PONG\n\n\n") == Task("ping", "SYS", "PONG")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "STATUS OK\nDATA x\n",
        "TASK REQ:ping IN:SYS OUT:PONG\n\nTASK REQ:ping IN:SYS OUT:PONG\n",
        "TASK REQ:ping IN:SYS\n",
        "TASK REQ:ping IN:SYS OUT:PONG\nbad key\n",
        "TASK REQ:ping IN:SYS OUT:PONG\nDATA \x01\n",
        "TASK REQ:ping IN:SYS OUT:PONG\nDATA \ud800\n",
        "TASK REQ:ping IN:SYS OUT:PONG\nID mine\n",
        "TASK REQ:cron IN:TOOL OUT:CRON_RESULT\nACTION list\n",
    ],
)
def test_a_task_value_that_is_not_one_runnable_task_frame_is_refused(text: str) -> None:
    with pytest.raises(JobTaskError):
        parse_job_task(text)
