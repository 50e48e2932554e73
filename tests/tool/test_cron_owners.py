"""Cron jobs are kept per uid: another uid's job is not there for a caller (security review:
uid 65534 listed, ran, disabled and removed root's jobs)."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

from csp_web.config import Config, SocketConfig
from csp_web.core.api.context import Peer
from protocol import Field, Reply, Status, Task
from tests.tool.cron_support import TICK, Rig, at, code, cron_config, open_rig

A = os.geteuid()
B = A + 1


def _config(config: Config) -> Config:
    return replace(cron_config(config), socket=SocketConfig(allowed_uids=(A, B)))


async def _as(rig: Rig, uid: int | None, *fields: Field) -> Reply:
    task = Task("cron", "TOOL", "CRON_RESULT", None, fields)
    peer = Peer("t") if uid is None else Peer("t", uid, 1)
    return await rig.dispatcher.run(task, peer)


def _add(job_id: str, schedule: str = "0 3 * * *") -> tuple[Field, ...]:
    return (("ACTION", "add"), ("JOB_ID", job_id), ("SCHEDULE", schedule), ("TASK", TICK))


def _jobs(reply: Reply) -> list[str]:
    return [json.loads(value)["id"] for name, value in reply.fields if name == "JOB"]


@pytest.mark.parametrize("action", ["run", "enable", "disable", "remove", "list"])
async def test_another_uids_job_is_unknown_to_every_per_job_action(
    config: Config, action: str
) -> None:
    async with open_rig(_config(config), lambda: at(1, 0)) as rig:
        assert (await _as(rig, A, *_add("rootjob"))).status is Status.OK
        refused = await _as(rig, B, ("ACTION", action), ("JOB_ID", "rootjob"))
        assert code(refused) == "unknown_job"
        # A's job is untouched, and A still sees and runs it.
        listed = await _as(rig, A, ("ACTION", "list"))
        assert _jobs(listed) == ["rootjob"]
        assert listed.get("DATA") == "jobs:1,active:1,disabled:0"
        ran = await _as(rig, A, ("ACTION", "run"), ("JOB_ID", "rootjob"))
        assert ran.get("RUN_STATUS") == "OK"


async def test_a_list_shows_and_counts_only_the_callers_jobs(config: Config) -> None:
    async with open_rig(_config(config), lambda: at(1, 0)) as rig:
        assert (await _as(rig, A, *_add("rootjob"))).status is Status.OK
        assert (await _as(rig, A, *_add("rootjob2"))).status is Status.OK
        await _as(rig, A, ("ACTION", "disable"), ("JOB_ID", "rootjob2"))
        added = await _as(rig, B, *_add("mine"))
        assert added.get("DATA") == "jobs:1,active:1,disabled:0"
        theirs = await _as(rig, B, ("ACTION", "list"))
        stdin = await _as(rig, None, ("ACTION", "list"))
        ours = await _as(rig, A, ("ACTION", "list"))
    assert _jobs(theirs) == ["mine"]
    assert theirs.get("DATA") == "jobs:1,active:1,disabled:0"
    assert _jobs(stdin) == []  # a peer without a uid: only the jobs added without one
    assert stdin.get("DATA") == "jobs:0,active:0,disabled:0"
    assert _jobs(ours) == ["rootjob", "rootjob2"]
    assert ours.get("DATA") == "jobs:2,active:1,disabled:1"


async def test_an_add_of_an_id_another_uid_holds_is_refused_as_a_duplicate(
    config: Config,
) -> None:
    async with open_rig(_config(config), lambda: at(1, 0)) as rig:
        assert (await _as(rig, A, *_add("x"))).status is Status.OK
        own = await _as(rig, A, *_add("x"))
        foreign = await _as(rig, B, *_add("x"))
        kept = await _as(rig, A, ("ACTION", "list"), ("JOB_ID", "x"))
    assert code(foreign) == code(own) == "cron_error"
    assert foreign.get("ERROR") == own.get("ERROR")  # says nothing of whose it is
    assert json.loads(kept.get("JOB") or "{}")["owner_uid"] == A


async def test_a_job_stored_without_an_owner_is_the_daemons_own_uids_to_see_and_change(
    config: Config,
) -> None:
    """Jobs stored before they had owners (or by a peer without a uid) run as no uid: the
    daemon's own uid (the stdin peer's) manages them, never another uid (review)."""
    assert os.getuid() == A  # the daemon's uid, as the stdin peer has it
    async with open_rig(_config(config), lambda: at(1, 0)) as rig:
        assert (await _as(rig, None, *_add("old"))).status is Status.OK
        theirs = await _as(rig, B, ("ACTION", "list"))
        ours = await _as(rig, A, ("ACTION", "list"))
        refused = await _as(rig, B, ("ACTION", "remove"), ("JOB_ID", "old"))
        removed = await _as(rig, A, ("ACTION", "remove"), ("JOB_ID", "old"))
    assert (_jobs(theirs), _jobs(ours)) == ([], ["old"])
    assert code(refused) == "unknown_job"
    assert removed.status is Status.OK, removed
