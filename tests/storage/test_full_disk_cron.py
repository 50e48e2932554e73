"""The cron job file (state) on a full disk: a change is refused with storage_full:state and
undone, and made once space returns."""

from __future__ import annotations

import os

import trio.testing

from csp_web.config import Config
from tests.storage.conftest import Tmpfs
from tests.tool.cron_support import TICK, TrioWall, cron_config, open_rig


async def test_adding_a_cron_job_on_a_full_disk_is_storage_full_and_adds_nothing(
    config: Config, mock_clock: trio.testing.MockClock, tmpfs: Tmpfs
) -> None:
    """O-6: the job file cannot be replaced: the job is not added (nor run later)."""
    store = os.path.join(tmpfs.path, "cron.json")
    config = cron_config(config, store_path=store)
    add = [("ACTION", "add"), ("JOB_ID", "j"), ("SCHEDULE", "*/5 * * * *"), ("TASK", TICK)]
    async with open_rig(config, TrioWall()) as rig:
        tmpfs.fill()
        refused = await rig.call(*add)
        listed = await rig.call(("ACTION", "list"))
        tmpfs.free()
        added = await rig.call(*add)
    assert refused.get("ERROR") == "storage_full:state"
    assert listed.get("DATA") == "jobs:0,active:0,disabled:0"
    assert added.get("JOB_ADDED") == "j"
    assert [name for name in os.listdir(tmpfs.path) if name.endswith(".tmp")] == []
