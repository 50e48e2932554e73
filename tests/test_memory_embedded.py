"""The embedded Memory Specialist: the daemon's default when no memory.socket_path is set."""

from __future__ import annotations

import os
import re
from dataclasses import replace

import pytest
import trio

from csp_web.client.trio_client import open_client
from csp_web.config import Config, MemoryConfig
from protocol import Status, Task
from tests.conftest import audit_ids, start_daemon, with_memory
from tests.harness import outbox_of

EXPONENT = re.compile(r"[0-9][eE][+-]?[0-9]")  # 2.4192e+06, 1e-05


def _ping(task_id: str) -> Task:
    return Task("ping", "SYS", "PONG", None, (("ID", task_id),))


def _embedded(config: Config, max_bytes: int = MemoryConfig().retention_max_bytes) -> Config:
    """``config`` with no Memory Specialist socket, so the daemon embeds one."""
    bare = with_memory(config, None)
    return replace(bare, memory=replace(bare.memory, retention_max_bytes=max_bytes))


def _memory_line(stats_fields: tuple[tuple[str, str], ...]) -> dict[str, str]:
    (line,) = [value for key, value in stats_fields if key == "MEMORY"]
    kind, _, rest = line.partition(",")
    assert kind == "embedded", line
    return dict(item.partition(":")[::2] for item in rest.split(","))


async def test_without_a_memory_socket_writes_are_delivered_to_the_embedded_store(
    nursery: trio.Nursery, config: Config, sock_dir: str
) -> None:
    """M-6: with the shipped default (no memory.socket_path) the outbox drains into the
    embedded Memory Specialist under the state dir; before, every write waited forever
    until outbox_full refused all ops."""
    embedded = _embedded(config)
    daemon = await start_daemon(nursery, embedded, os.path.join(sock_dir, "csp.sock"))
    outbox = outbox_of(daemon.dispatcher)
    sent = [f"e-{n}" for n in range(20)]
    async with open_client(daemon.socket_path) as client:
        replies = await client.call_many([_ping(i) for i in sent], timeout_s=10)
        with trio.fail_after(10):  # each ping's audit is pending before its reply (O-4)
            await outbox.wait_drained()
        assert outbox.delivery.delivered >= len(sent)
        stats = await client.call(Task("stats", "SYS", "STATS"), timeout_s=10)
    assert {r.status for r in replies} == {Status.OK}
    assert set(sent) <= audit_ids(embedded.memory_dir)
    figures = _memory_line(stats.fields)
    assert int(figures["count"]) >= len(sent)
    assert figures["max_bytes"] == str(MemoryConfig().retention_max_bytes)


async def test_the_embedded_store_stays_within_retention_max_bytes(
    nursery: trio.Nursery, config: Config, sock_dir: str
) -> None:
    """M-6: however many writes arrive, the embedded store keeps at most
    retention_max_bytes of DATA (the oldest go first) while every write is acknowledged."""
    limit = 4096
    embedded = _embedded(config, limit)
    daemon = await start_daemon(nursery, embedded, os.path.join(sock_dir, "csp.sock"))
    outbox = outbox_of(daemon.dispatcher)
    sent = [f"r-{n}" for n in range(200)]
    async with open_client(daemon.socket_path) as client:
        await client.call_many([_ping(i) for i in sent], timeout_s=10)
        with trio.fail_after(10):  # each ping's audit is pending before its reply (O-4)
            await outbox.wait_drained()
        assert outbox.delivery.delivered >= len(sent)
        stats = await client.call(Task("stats", "SYS", "STATS"), timeout_s=10)
    figures = _memory_line(stats.fields)
    assert 0 < int(figures["bytes"]) <= limit
    assert int(figures["count"]) < len(sent)
    assert outbox.delivery.rejected == 0
    kept = audit_ids(embedded.memory_dir)
    assert sent[-1] in kept
    assert sent[0] not in kept


@pytest.mark.parametrize(
    ("max_age_s", "shown"),
    [(100 * 365 * 86400.0, "3153600000"), (28 * 86400.0, "2419200"), (0.00001, "0.00001")],
)
async def test_stats_write_the_memory_figures_without_an_exponent(
    nursery: trio.Nursery, config: Config, sock_dir: str, max_age_s: float, shown: str
) -> None:
    """REQ:stats' MEMORY line spells a large and a tiny retention age in plain digits (the
    default, 28 days, was ``max_age_s:2.4192e+06``), as every number of the reply."""
    bare = _embedded(config)
    embedded = replace(bare, memory=replace(bare.memory, retention_max_age_s=max_age_s))
    daemon = await start_daemon(nursery, embedded, os.path.join(sock_dir, "csp.sock"))
    async with open_client(daemon.socket_path) as client:
        await client.call(_ping("p-1"), timeout_s=10)
        stats = await client.call(Task("stats", "SYS", "STATS"), timeout_s=10)
    assert _memory_line(stats.fields)["max_age_s"] == shown
    figures = [stats.get("DATA") or "", *stats.get_all("MEMORY"), *stats.get_all("OP")]
    assert [line for line in figures if EXPONENT.search(line)] == []
