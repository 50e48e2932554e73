"""BUDGET_IDs on the fleet's Redis (SPEC D-3): two daemons on one Redis draw from one budget,
check-and-charge is atomic across them, and an unreachable Redis fails closed."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from csp_web.app.memory_path import open_memory_path
from csp_web.client.trio_client import open_client
from csp_web.config import BudgetsConfig, Config
from csp_web.config.redis import RedisConfig
from csp_web.core.api.errors import FieldError, OpError
from csp_web.core.daemon.compose import open_daemon
from csp_web.core.daemon.lifecycle import serve
from csp_web.infra.redis_budget import RedisLedger
from csp_web.infra.redis_link import open_redis_link
from protocol import ErrorCode, Reply, Status, Task
from tests.conftest import Sink
from tests.harness import given
from tests.redis.conftest import OpenLink, past_down_window
from tests.redis_server import RedisServer
from tests.test_budgets import OPS, charge, race_for_the_last_bytes

WAIT_S = 20.0


async def test_concurrent_charges_from_two_daemons_never_pass_the_limit(
    open_link: OpenLink,
) -> None:
    async with open_link() as one, open_link() as two:
        ledgers = [RedisLedger(one, BudgetsConfig()), RedisLedger(two, BudgetsConfig())]
        assert await ledgers[0].open("fleet", 1000, {"fetches": 10}) == {"fetches": 10}
        granted: list[int] = []

        async def take(ledger: RedisLedger) -> None:
            left = await ledger.charge("fleet", "fetches", 1, strict=True)
            if left is not None:
                granted.append(left)

        with trio.fail_after(WAIT_S):
            async with trio.open_nursery() as nursery:
                for n in range(30):
                    nursery.start_soon(take, ledgers[n % 2])
        assert sorted(granted) == list(range(10))
        assert await ledgers[1].open("fleet", 1000, None) == {"fetches": 0}


async def test_a_redis_budget_id_is_its_makers_and_must_be_made_with_a_budget(
    open_link: OpenLink,
) -> None:
    async with open_link() as link:
        ledger = RedisLedger(link, BudgetsConfig())
        with pytest.raises(FieldError, match="BUDGET_ID r not held"):
            await ledger.open("r", 1000, None)
        await ledger.open("r", None, {"bytes": 5, "wall_ms": 9})
        with pytest.raises(OpError) as denied:
            await ledger.open("r", 1000, {"bytes": 1})
        assert denied.value.code is ErrorCode.PERMISSION_DENIED
        assert await ledger.open("r", None, {"bytes": 1}) == {"bytes": 5, "wall_ms": 9}
        assert await ledger.charge("r", "bytes", 6, strict=True) is None
        assert await ledger.charge("r", "bytes", 6, strict=False) == 0  # never below 0
        assert await ledger.charge("r", "searches", 1, strict=True) is None  # not limited


async def test_a_redis_reserve_takes_what_is_left_when_less_and_a_refund_gives_it_back(
    open_link: OpenLink,
) -> None:
    async with open_link() as link:
        ledger = RedisLedger(link, BudgetsConfig())
        await ledger.open("t", 1000, {"bytes": 10, "llm_tokens": 2**50})
        assert await ledger.take_up_to("t", "bytes", 4) == (4, 6)
        assert await ledger.take_up_to("t", "bytes", 10) == (6, 0)
        assert await ledger.take_up_to("t", "bytes", 1) == (0, 0)
        assert await ledger.charge("t", "bytes", -6, strict=False) == 6
        assert await ledger.take_up_to("t", "llm_tokens", 2**50) == (2**50, 0)
        assert await ledger.take_up_to("t", "searches", 1) is None  # not limited
        assert await ledger.take_up_to("gone", "bytes", 1) is None


async def test_a_redis_budget_id_expires_after_its_idle_ttl(
    open_link: OpenLink, redis_server: RedisServer
) -> None:
    async with open_link() as link:
        ledger = RedisLedger(link, BudgetsConfig(idle_ttl_s=60.0))
        await ledger.open("t", 1, {"fetches": 1})
        ttl = await link.call(lambda r: r.ttl(link.key("budget", "{t}")), "test")
        assert 0 < ttl <= 60


async def test_an_unreachable_redis_refuses_the_budgeted_task(
    open_link: OpenLink, redis_server: RedisServer
) -> None:
    async with open_link() as link:
        ledger = RedisLedger(link, BudgetsConfig())
        await ledger.open("down", 1, {"fetches": 3})
        redis_server.stop()
        await past_down_window(link)
        with pytest.raises(OpError) as refused:
            await ledger.charge("down", "fetches", 1, strict=True)
        assert refused.value.wire_text == "not_available:budget ledger unreachable"


@asynccontextmanager
async def fleet_daemon(config: Config, socket_path: str) -> AsyncIterator[None]:
    """One daemon over OPS whose BUDGET_IDs live on ``config.redis``."""
    async with (
        open_redis_link(config.redis) as link,
        trio.open_nursery() as nursery,
    ):
        assert link is not None
        ledger = RedisLedger(link, config.budgets)
        memory = open_memory_path(config)
        async with open_daemon(config, (given(None, OPS),), memory=memory, ledger=ledger) as daemon:

            async def run(*, task_status: trio.TaskStatus[object]) -> None:
                await serve(daemon, stdio=None, socket_path=socket_path, task_status=task_status)

            await nursery.start(run)
            yield
            nursery.cancel_scope.cancel()


async def test_two_daemons_on_one_redis_share_a_budget_id(
    config: Config, sink: Sink, sock_dir: str, redis_config: RedisConfig, tmp_path: os.PathLike[str]
) -> None:
    paths = [os.path.join(sock_dir, name) for name in ("one.sock", "two.sock")]
    configs = [
        dataclasses.replace(
            config,
            redis=redis_config,
            daemon=dataclasses.replace(config.daemon, state_dir=os.path.join(str(tmp_path), name)),
        )
        for name in ("one", "two")
    ]
    replies: list[Reply] = []
    async with fleet_daemon(configs[0], paths[0]), fleet_daemon(configs[1], paths[1]):
        first: Task = charge(("BUDGET_ID", "agent"), ("BUDGET", "fetches:2"))
        for path, task in zip(
            paths * 2, [first, *[charge(("BUDGET_ID", "agent"))] * 2], strict=False
        ):
            async with open_client(path) as client:
                replies.append(await client.call(task, timeout_s=WAIT_S))
    assert [(r.status, r.get("BUDGET_LEFT")) for r in replies] == [
        (Status.OK, "fetches:1"),
        (Status.OK, "fetches:0"),
        (Status.PARTIAL, "fetches:0"),
    ]
    assert replies[2].get("ERROR") == "budget_exhausted:fetches"


async def test_on_redis_a_reserve_finding_nothing_cancels_only_the_work_holding_no_reserve(
    open_link: OpenLink,
) -> None:
    """The race of tests/test_budgets.py, the other task on another daemon's link."""
    async with open_link() as one, open_link() as two:
        mine, theirs = RedisLedger(one, BudgetsConfig()), RedisLedger(two, BudgetsConfig())
        ended = await race_for_the_last_bytes(mine, theirs)
    assert ended == {
        "late": "budget_exhausted:bytes",
        "idle": "budget_exhausted:bytes",
        "paid": "kept",
        "left": "bytes:0",
    }
