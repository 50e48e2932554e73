"""The job file: atomic 0600 writes, strict reads, and jobs read back as they were written."""

from __future__ import annotations

import datetime
import json
import os
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from csp_web.config import Config, with_section
from csp_web.cron import (
    CronStore,
    CronStoreError,
    Job,
    Outcome,
    open_cron,
    parse_job_task,
    parse_schedule,
    store_path,
)
from csp_web.cron.config import CronConfig
from csp_web.cron.jobs import DONE_KEYS_KEPT, INTERRUPTED, RUNNING
from csp_web.cron.store import write_atomic
from specialists.tool.config import ToolConfig

AT = datetime.datetime(2026, 1, 10, 0, 0, tzinfo=datetime.UTC)


def _job(job_id: str = "j") -> Job:
    task = parse_job_task("TASK REQ:ping IN:SYS OUT:PONG\nNOTE x\n")
    job = Job(job_id, parse_schedule("0 3 * * *", "Europe/Paris"), task, "sweep", "run_once", AT)
    job.reschedule()
    return job


def test_a_write_replaces_the_file_whole_with_mode_0600_and_leaves_no_temp(
    tmp_path: Path,
) -> None:
    target = tmp_path / "state" / "cron.json"
    write_atomic(str(target), "one")
    write_atomic(str(target), "two")
    assert target.read_text() == "two"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert os.listdir(target.parent) == ["cron.json"]


def test_a_missing_file_is_no_jobs(tmp_path: Path) -> None:
    assert CronStore(str(tmp_path / "cron.json")).load() == []


@pytest.mark.parametrize(
    "text",
    ["{", "[]", '{"version": 2, "jobs": []}', '{"version": 1, "jobs": {}}', '{"version": 1}'],
)
def test_an_unreadable_file_is_an_error_not_an_empty_table(tmp_path: Path, text: str) -> None:
    path = tmp_path / "cron.json"
    path.write_text(text)
    with pytest.raises(CronStoreError, match=r"cron\.json"):
        CronStore(str(path)).load()


async def test_a_bad_job_in_the_file_stops_open_cron(config: Config, tmp_path: Path) -> None:
    document = _job().to_json()
    document["tz"] = "Mars/Olympus"
    Path(store_path(config)).write_text(json.dumps({"version": 1, "jobs": [document]}))
    with pytest.raises(CronStoreError, match="bad job 'j'"):
        async with open_cron(config):
            pass


async def test_a_job_id_twice_in_the_file_stops_open_cron(config: Config) -> None:
    jobs = [_job().to_json(), _job().to_json()]
    Path(store_path(config)).write_text(json.dumps({"version": 1, "jobs": jobs}))
    with pytest.raises(CronStoreError, match="twice"):
        async with open_cron(config):
            pass


async def test_a_saved_job_reads_back_equal(config: Config) -> None:
    job = _job()
    job.done.append("j@2026-01-10T02:00:00Z")
    job.record(Outcome("j@2026-01-10T02:00:00Z", "2026-01-10T02:00:00Z", "OK"), 10)
    job.enabled = False
    job.reschedule()
    await CronStore(store_path(config)).save(lambda: [job.to_json()])
    async with open_cron(config) as cron:
        (loaded,) = cron.jobs()
    assert loaded.to_json() == job.to_json()
    assert loaded.task == job.task
    assert loaded.next_at is None  # disabled


def test_a_run_that_was_in_flight_when_the_daemon_stopped_reads_back_interrupted() -> None:
    job = _job()
    job.record(Outcome("j@k", "2026-01-10T02:00:00Z", RUNNING), 10)
    loaded = Job.from_json(job.to_json(), 10)
    assert list(loaded.history) == [Outcome("j@k", "2026-01-10T02:00:00Z", "FAIL", INTERRUPTED)]


@pytest.mark.parametrize(("runs", "kept"), [(DONE_KEYS_KEPT, DONE_KEYS_KEPT), (65, 64)])
def test_done_keys_are_bounded_per_job(runs: int, kept: int) -> None:
    job = _job()
    job.done.extend(f"j@{n}" for n in range(runs))
    loaded = Job.from_json(job.to_json(), 10)
    assert len(loaded.done) == kept
    assert loaded.done[-1] == f"j@{runs - 1}"


@pytest.mark.parametrize(("runs", "kept"), [(3, 3), (4, 3)])
def test_history_keeps_the_latest_n_outcomes(runs: int, kept: int) -> None:
    job = _job()
    for n in range(runs):
        job.record(Outcome(f"j@{n}", "t", "OK"), 3)
    assert [o.key for o in job.history] == [f"j@{n}" for n in range(runs - kept, runs)]


def test_a_second_outcome_for_a_key_replaces_the_first() -> None:
    job = _job()
    job.record(Outcome("j@1", "t", RUNNING), 3)
    job.record(Outcome("j@1", "t", "OK"), 3)
    assert list(job.history) == [Outcome("j@1", "t", "OK")]


def test_store_path_defaults_under_the_state_dir(config: Config) -> None:
    assert store_path(config) == os.path.join(config.daemon.state_dir, "cron.json")
    moved = with_section(config, "tool", ToolConfig(cron=CronConfig(store_path="/x/jobs.json")))
    assert store_path(moved) == "/x/jobs.json"


async def test_a_bad_cron_file_fails_the_daemons_start_as_itself_before_the_outbox(
    config: Config, tmp_path: Path
) -> None:
    """Issue 7: composed as ``serve`` composes it (the app's SPECIALISTS, then the memory
    path), an unreadable cron.json stops the start as CronStoreError itself, not wrapped in
    a nursery's group, and before the outbox file is made."""
    from csp_web.app.catalog import SPECIALISTS
    from csp_web.app.memory_path import open_memory_path
    from csp_web.core.daemon.compose import open_daemon

    state = tmp_path / "state"
    state.mkdir()
    config = replace(config, daemon=replace(config.daemon, state_dir=str(state)))
    (state / "cron.json").write_text("{")
    with pytest.raises(CronStoreError, match=r"cron\.json"):
        async with open_daemon(config, SPECIALISTS, memory=open_memory_path(config)):
            raise AssertionError("the daemon must not start")
    assert not os.path.exists(config.outbox_path)
