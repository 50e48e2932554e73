"""A cron job added under a budget draws every run from it (SPEC D-3): the job's task names
the budget's BUDGET_ID, kept in the ledger, so runs after a restart draw from it too."""

from __future__ import annotations

import dataclasses
import json
import os

import trio.testing

from csp_web.config import BudgetsConfig, Config
from csp_web.core.api.context import Peer
from csp_web.core.dispatch.ledger import LocalLedger
from csp_web.cron import store_path
from protocol import Status
from tests.test_budgets import CHARGE
from tests.tool.cron_support import TrioWall, cron_config, open_rig

CHARGE_TASK = "TASK REQ:charge IN:TEST OUT:CHARGED\nDIMENSION fetches\nN 1"


async def test_a_job_added_under_a_budget_runs_until_the_budget_is_spent(
    config: Config, mock_clock: trio.testing.MockClock
) -> None:
    config = cron_config(config)
    async with open_rig(config, TrioWall(), [CHARGE]) as rig:
        ledger = LocalLedger(config.daemon.state_dir, config.budgets)
        rig.dispatcher.ledger = ledger
        added = await rig.add("paid", "0 3 * * *", CHARGE_TASK, ("BUDGET", "fetches:2"))
        runs = [await rig.call(("ACTION", "run"), ("JOB_ID", "paid")) for _ in range(3)]
        ledger.close()
    assert added.get("BUDGET_LEFT") == "fetches:2"
    with open(store_path(config), encoding="utf-8") as file:
        (stored,) = json.load(file)["jobs"]
    (line,) = [line for line in stored["task"].splitlines() if line.startswith("BUDGET_ID ")]
    assert line.startswith("BUDGET_ID task.")
    assert [run.get("RUN_STATUS") for run in runs] == ["OK", "OK", "PARTIAL"]
    assert runs[2].get("RUN_ERROR") == "budget_exhausted:fetches"
    assert all(run.status is Status.OK for run in runs)  # the cron op ran the job each time


async def test_a_job_naming_its_own_budget_keeps_it(
    config: Config, mock_clock: trio.testing.MockClock
) -> None:
    config = cron_config(config)
    own = f"{CHARGE_TASK}\nBUDGET fetches:9"
    async with open_rig(config, TrioWall(), [CHARGE]) as rig:
        ledger = LocalLedger(config.daemon.state_dir, config.budgets)
        rig.dispatcher.ledger = ledger
        await rig.add("own", "0 3 * * *", own, ("BUDGET", "fetches:2"))
        ledger.close()
    with open(store_path(config), encoding="utf-8") as file:
        (stored,) = json.load(file)["jobs"]
    assert "BUDGET_ID" not in stored["task"]


async def test_a_job_added_under_its_uids_default_gets_the_default_at_each_run(
    config: Config, mock_clock: trio.testing.MockClock
) -> None:
    """A per-uid default is each task's own: the job does not turn it into one budget for
    its whole life, so each run gets the default afresh."""
    config = cron_config(config)
    uid = str(os.getuid())
    config = dataclasses.replace(config, budgets=BudgetsConfig(per_uid={uid: "fetches:1"}))
    async with open_rig(config, TrioWall(), [CHARGE]) as rig:
        ledger = LocalLedger(config.daemon.state_dir, config.budgets)
        rig.dispatcher.ledger = ledger
        rig.peer = Peer("test", int(uid), 1)
        added = await rig.add("daily", "0 3 * * *", CHARGE_TASK)
        runs = [await rig.call(("ACTION", "run"), ("JOB_ID", "daily")) for _ in range(3)]
        ledger.close()
    assert added.get("BUDGET_LEFT") == "fetches:1"
    with open(store_path(config), encoding="utf-8") as file:
        (stored,) = json.load(file)["jobs"]
    assert "BUDGET" not in stored["task"]
    assert [run.get("RUN_STATUS") for run in runs] == ["OK", "OK", "OK"]
