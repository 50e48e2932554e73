"""The cron op's fields and replies: validation at N and N+1, codes, the seed's reply lines."""

from __future__ import annotations

import json
import os
import stat
from dataclasses import replace
from pathlib import Path

import pytest
import trio.testing

from csp_web.app.memory_path import outbox_path
from csp_web.config import Config, SocketConfig
from csp_web.core.api.context import Peer
from csp_web.cron import store_path
from csp_web.cron.jobs import parse_job_task
from csp_web.memory.outbox import open_outbox
from protocol import Connection, Field, Reply, Status, Task
from specialists.tool.ops_cron import OPS
from specialists.tool.services import ToolServices
from tests.harness import build_dispatcher
from tests.tool.cron_support import TICK, TrioWall, at, code, cron_config, open_rig

MockClock = trio.testing.MockClock
ADD = ("ACTION", "add")


def _add(job_id: str = "j", schedule: str = "*/5 * * * *", task: str = TICK) -> list[Field]:
    return [ADD, ("JOB_ID", job_id), ("SCHEDULE", schedule), ("TASK", task)]


async def _call(config: Config, *fields: Field) -> Reply:
    async with open_rig(cron_config(config), TrioWall()) as rig:
        return await rig.call(*fields)


async def test_add_replies_as_the_seed_and_persists_the_job_0600(
    config: Config, mock_clock: MockClock
) -> None:
    config = cron_config(config)
    async with open_rig(config, TrioWall()) as rig:
        reply = await rig.call(*_add("memory-daily-sweep", "0 3 * * *"))
    assert reply == Reply(
        Status.OK,
        (
            ("SCOPE", "[cron]"),
            ("DATA", "jobs:1,active:1,disabled:0"),
            ("JOB_ADDED", "memory-daily-sweep"),
            ("NEXT_RUN", "2026-01-10T03:00:00Z"),
        ),
    )
    path = store_path(config)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with open(path, encoding="utf-8") as file:
        (stored,) = json.load(file)["jobs"]
    assert stored["id"] == "memory-daily-sweep"
    assert stored["task"] == TICK + "\n"


async def test_an_action_may_come_inline(config: Config, mock_clock: MockClock) -> None:
    async with open_rig(cron_config(config), TrioWall()) as rig:
        reply = await rig.call(inline="list")
    assert reply == Reply(Status.OK, (("SCOPE", "[cron]"), ("DATA", "jobs:0,active:0,disabled:0")))


async def test_a_duplicate_job_id_is_cron_error(config: Config, mock_clock: MockClock) -> None:
    async with open_rig(cron_config(config), TrioWall()) as rig:
        await rig.call(*_add())
        again = await rig.call(*_add())
    assert code(again) == "cron_error"
    assert again.get("SCOPE") == "[cron]"


@pytest.mark.parametrize(("jobs", "ok"), [(2, True), (3, False)])
async def test_max_jobs_holds_at_n_and_n_plus_1(
    config: Config, mock_clock: MockClock, jobs: int, ok: bool
) -> None:
    async with open_rig(cron_config(config, max_jobs=2), TrioWall()) as rig:
        replies = [await rig.call(*_add(f"j{n}")) for n in range(jobs)]
    assert [r.status for r in replies[:2]] == [Status.OK, Status.OK]
    assert (replies[-1].status is Status.OK) is ok
    if not ok:
        assert code(replies[-1]) == "cron_error"


@pytest.mark.parametrize("action", ["remove", "enable", "disable", "run", "list"])
async def test_an_unknown_job_is_unknown_job(
    config: Config, mock_clock: MockClock, action: str
) -> None:
    reply = await _call(config, ("ACTION", action), ("JOB_ID", "nosuch"))
    assert code(reply) == "unknown_job"


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ([("ACTION", "remove")], "missing_field"),
        ([("ACTION", "run")], "missing_field"),
        ([ADD, ("SCHEDULE", "* * * * *"), ("TASK", TICK)], "missing_field"),
        ([ADD, ("JOB_ID", "j"), ("TASK", TICK)], "missing_field"),
        ([("ACTION", "pause")], "invalid_field"),
        ([("ACTION", "list"), ("SCHEDULE", "* * * * *")], "invalid_field"),
        ([("ACTION", "disable"), ("JOB_ID", "j"), ("MISSED", "skip")], "invalid_field"),
        ([*_add(), ("MISSED", "always")], "invalid_field"),
        ([*_add(), ("TZ", "Mars/Olympus")], "invalid_field"),
        (_add(schedule="0 0 3 * * *"), "invalid_field"),
        (_add(schedule="0 0 31 2 *"), "invalid_field"),
        (_add(task="TASK REQ:tick IN:TEST OUT:TICKED\nID mine\n"), "invalid_field"),
        (_add(task="TASK REQ:tick IN:TEST OUT:TICKED\n\n" + TICK), "invalid_field"),
        (_add(task="STATUS OK\n"), "invalid_field"),
        (_add(task="TASK REQ:nosuch IN:TEST OUT:X\n"), "invalid_field"),
        (_add(task="TASK REQ:tick IN:TEST OUT:TICKED\nCOLOR red\n"), "invalid_field"),
        (_add(task="TASK REQ:cron IN:TOOL OUT:CRON_RESULT\nACTION list\n"), "invalid_field"),
        ([*_add(), ("JOB_ID", "k")], "duplicate_field"),
        ([*_add(), ("COLOR", "red")], "unknown_field"),
    ],
)
async def test_bad_fields_get_their_codes(
    config: Config, mock_clock: MockClock, fields: list[Field], error: str
) -> None:
    assert code(await _call(config, *fields)) == error


@pytest.mark.parametrize(
    ("job_id", "ok"),
    [
        ("a" * 64, True),
        ("a" * 65, False),
        ("0.memory_daily-sweep", True),
        ("Memory", False),
        ("-memory", False),
        ("memory sweep", False),
        ("", False),
    ],
)
async def test_job_id_grammar_and_length_hold_at_n_and_n_plus_1(
    config: Config, mock_clock: MockClock, job_id: str, ok: bool
) -> None:
    reply = await _call(config, *_add(job_id))
    assert (reply.status is Status.OK) is ok, reply
    if not ok:
        assert code(reply) == "invalid_field"


@pytest.mark.parametrize(("length", "ok"), [(128, True), (129, False)])
async def test_schedule_length_holds_at_n_and_n_plus_1(
    config: Config, mock_clock: MockClock, length: int, ok: bool
) -> None:
    rest = " 3 * * *"
    schedule = "0" * (length - len(rest)) + rest  # minute 0, zero-padded to the length
    reply = await _call(config, *_add(schedule=schedule))
    assert (reply.status is Status.OK) is ok, reply


@pytest.mark.parametrize(("length", "ok"), [(500, True), (501, False)])
async def test_description_length_holds_at_n_and_n_plus_1(
    config: Config, mock_clock: MockClock, length: int, ok: bool
) -> None:
    reply = await _call(config, *_add(), ("TASK_DESCRIPTION", "d" * length))
    assert (reply.status is Status.OK) is ok, reply


@pytest.mark.parametrize(("length", "ok"), [(16 * 1024, True), (16 * 1024 + 1, False)])
async def test_task_length_holds_at_n_and_n_plus_1(
    config: Config, mock_clock: MockClock, length: int, ok: bool
) -> None:
    head = TICK + "NOTE "
    task = head + "n" * (length - len(head))
    reply = await _call(config, *_add(task=task))
    assert (reply.status is Status.OK) is ok, reply


@pytest.mark.parametrize(("tz", "ok"), [("Europe/Paris", True), ("X" * 65, False)])
async def test_tz_must_be_a_known_zone_within_64_chars(
    config: Config, mock_clock: MockClock, tz: str, ok: bool
) -> None:
    reply = await _call(config, *_add(), ("TZ", tz))
    assert (reply.status is Status.OK) is ok, reply


async def test_the_seed_frame_with_a_quoted_task_is_accepted(
    config: Config, mock_clock: MockClock
) -> None:
    """The TASK value travels JSON-quoted on one line (SPEC V-2) and is decoded first."""
    async with open_rig(cron_config(config), TrioWall()) as rig:
        frame = (
            b"TASK REQ:cron IN:TOOL OUT:CRON_RESULT\nACTION add\nJOB_ID memory-daily-sweep\n"
            b'SCHEDULE "0 3 * * *"\nTASK_DESCRIPTION "Memory maintenance"\n'
            b'TASK "TASK REQ:tick IN:TEST OUT:TICKED\\nNOTE swept\\n"\n\n'
        )
        codec = Connection()
        codec.receive_data(frame)
        task = codec.next_event()
        assert isinstance(task, Task)
        reply = await rig.dispatcher.run(task, Peer("test"))
        assert reply.get("JOB_ADDED") == "memory-daily-sweep"
        job_task = rig.cron.job("memory-daily-sweep").task
        assert job_task is not None
        assert job_task.fields == (("NOTE", "swept"),)


PING = "TASK REQ:ping IN:SYS OUT:PONG\n"
MAX_TIMEOUT_MS = Config().tasks.max_timeout_ms


@pytest.mark.parametrize(
    ("task", "error"),
    [
        (PING + "TIMEOUT_MS 0", "invalid_field:TIMEOUT_MS below 1"),
        (TICK + "TIMEOUT_MS 0", "invalid_field:TIMEOUT_MS below 1"),
        (PING + "TIMEOUT_MS abc", "invalid_field:TIMEOUT_MS must be an integer"),
        (PING + "TIMEOUT_MS 5\nTIMEOUT_MS 6", "duplicate_field:TIMEOUT_MS"),
        (
            PING + f"TIMEOUT_MS {MAX_TIMEOUT_MS + 1}",
            f"invalid_field:TIMEOUT_MS above {MAX_TIMEOUT_MS}",
        ),
        (PING + f"TIMEOUT_MS {MAX_TIMEOUT_MS}", None),
        (TICK + "TIMEOUT_MS 1", None),
    ],
)
async def test_a_task_is_checked_at_add_as_each_run_checks_it(
    config: Config, mock_clock: MockClock, task: str, error: str | None
) -> None:
    """A TIMEOUT_MS every run would refuse is refused at add, with the run's own error
    (review: it was accepted, then each run failed); one a run accepts is added and runs."""
    config = cron_config(config)
    assert config.tasks.max_timeout_ms == MAX_TIMEOUT_MS
    async with open_rig(config, TrioWall()) as rig:
        added = await rig.call(*_add(task=task))
        if error is not None:
            assert added == Reply(
                Status.FAIL,
                (("SCOPE", "[cron]"), ("DATA", "none"), ("ERROR", f"invalid_field:TASK: {error}")),
            )
            direct = await rig.dispatcher.run(parse_job_task(task), Peer("test"))
            assert direct.get("ERROR") == error  # the very check a run makes
            return
        assert added.get("JOB_ADDED") == "j", added
        ran = await rig.call(("ACTION", "run"), ("JOB_ID", "j"))
        assert ran.get("RUN_STATUS") == "OK", ran


async def test_without_the_cron_service_the_op_is_not_available(config: Config) -> None:
    config = replace(config, memory=replace(config.memory, socket_path=None))
    async with open_outbox(config.outbox_path, config.outbox, config.memory) as outbox:
        dispatcher = build_dispatcher(
            config, outbox_path(config, outbox), OPS, ToolServices(None, None, None)
        )
        reply = await dispatcher.run(
            Task("cron", "TOOL", "CRON_RESULT", None, (("ACTION", "list"),)), Peer("t")
        )
    assert code(reply) == "not_available"


async def test_a_job_file_that_cannot_be_written_refuses_the_add_and_keeps_no_job(
    config: Config, mock_clock: MockClock, tmp_path: Path
) -> None:
    blocker = tmp_path / "jobs"
    config = cron_config(config, store_path=str(blocker / "cron.json"))
    async with open_rig(config, TrioWall()) as rig:
        blocker.write_text("")  # the job file's directory is now a file
        refused = await rig.call(*_add())
        listed = await rig.call(("ACTION", "list"))
    assert code(refused) == "cron_error"
    assert listed.get("DATA") == "jobs:0,active:0,disabled:0"


async def test_a_job_runs_under_its_authors_uid_until_that_uid_is_revoked(
    config: Config, tmp_path: Path
) -> None:
    """Cron is no way around access control: runs carry the author's uid in their audit, and
    a job whose author may no longer connect is refused, not run (security review)."""
    me = os.geteuid()
    add = Task(
        "cron",
        "TOOL",
        "CRON_RESULT",
        None,
        (
            ("ACTION", "add"),
            ("JOB_ID", "owned"),
            ("SCHEDULE", "0 3 * * *"),
            ("TASK", "TASK REQ:tick IN:TEST OUT:TICKED\n"),
        ),
    )
    run = Task("cron", "TOOL", "CRON_RESULT", None, (("ACTION", "run"), ("JOB_ID", "owned")))
    async with open_rig(cron_config(config), lambda: at(1, 0)) as rig:
        assert (await rig.dispatcher.run(add, Peer("t", me, 1))).status is Status.OK
        ran = await rig.dispatcher.run(run, Peer("t", me, 1))
        assert ran.get("RUN_STATUS") == "OK"
        audits = [json.loads(w.data) for w in rig.writes("audit")]
        assert any(a["op"] == "tick" and a["uid"] == me for a in audits)
    revoked = replace(cron_config(config), socket=SocketConfig(allowed_uids=(me + 1,)))
    async with open_rig(revoked, lambda: at(1, 0)) as rig:
        # Another uid cannot run it (jobs are per uid); the scheduler's run is refused.
        assert code(await rig.dispatcher.run(run, Peer("t", me + 1, 1))) == "unknown_job"
        handle = await rig.cron.run_now("owned", owner_uid=me)
        assert handle.result is not None
        assert handle.result.status is Status.FAIL
        assert (handle.result.error or "").startswith("permission_denied:")
