"""A full disk under the daemon's state dir (outbox, memory store, cache on one small tmpfs):
the daemon keeps answering, ops that must persist get ``FAIL storage_full:<which>``, ``stats``
shows it, and once space returns it recovers by itself with nothing acknowledged lost."""

from __future__ import annotations

import os
from dataclasses import replace

import trio

from csp_web.client.trio_client import Client, open_client
from csp_web.config import Config
from protocol import Reply, Status, Task
from tests.conftest import audit_ids, start_daemon, wait_until
from tests.harness import TEST_OPS
from tests.storage.conftest import Tmpfs

WAIT_S = 30.0


def _echo(task_id: str) -> Task:
    return Task("echo", "TEST", "ECHO", "hi", (("ID", task_id),))


def _error(reply: Reply) -> str | None:
    return reply.get("ERROR")


async def _many(client: Client, prefix: str, count: int) -> list[Reply]:
    replies: list[Reply] = []

    async def one(n: int) -> None:
        replies.append(await client.call(_echo(f"{prefix}-{n}")))

    async with trio.open_nursery() as nursery:
        for n in range(count):
            nursery.start_soon(one, n)
    return replies


def _config(tmpfs: Tmpfs, config: Config) -> Config:
    """The test's config with the embedded Memory Specialist and state on ``tmpfs``."""
    state = replace(config.daemon, state_dir=os.path.join(tmpfs.path, "state"))
    return replace(config, daemon=state, memory=replace(config.memory, socket_path=None))


async def test_a_full_disk_under_the_state_dir_refuses_with_storage_full_and_recovers(
    nursery: trio.Nursery, config: Config, tmpfs: Tmpfs, sock_dir: str
) -> None:
    """O-6, issue 21: 64 audited tasks at a time on a full disk are each answered (OK while
    the WAL's pages last, then storage_full:outbox), ping and stats keep working, and once
    the filler is deleted ops succeed again and every acknowledged op's audit reaches the
    memory store."""
    config = _config(tmpfs, config)
    daemon = await start_daemon(nursery, config, os.path.join(sock_dir, "d.sock"), TEST_OPS)
    acknowledged: set[str] = set()
    with trio.fail_after(WAIT_S):
        async with open_client(daemon.socket_path) as client:
            before = await client.call(_echo("before"))
            assert before.status is Status.OK
            acknowledged.add("before")
            tmpfs.fill()
            refused = 0
            for batch in range(100):  # the WAL's pages already on disk may take a few commits
                replies = await _many(client, f"full{batch}", 64)
                assert len(replies) == 64  # every task answered
                for reply in replies:
                    assert (reply.status, _error(reply)) in (
                        (Status.OK, None),
                        (Status.FAIL, "storage_full:outbox"),
                    )
                    if reply.status is Status.OK:
                        acknowledged.add(reply.id or "")
                refused += sum(reply.status is Status.FAIL for reply in replies)
                if refused:
                    break
            assert refused
            ping = await client.call(Task("ping", "SYS", "PONG", None, (("ID", "p"),)))
            assert ping.status is Status.OK
            stats = await client.call(Task("stats", "SYS", "STATS", None, (("ID", "s"),)))
            assert ("STORAGE", "full:outbox") in stats.fields or (
                "STORAGE",
                "full:memory,outbox",
            ) in stats.fields
            tmpfs.free()
            after = await _many(client, "after", 64)
            assert {(r.status, _error(r)) for r in after} == {(Status.OK, None)}
            acknowledged |= {r.id or "" for r in after}
            # The memory store hears that space returned at its next commit, once delivery's
            # back-off lets the outbox try again: every acknowledged record kept says so.
            await wait_until(lambda: acknowledged <= audit_ids(config.memory_dir), timeout_s=WAIT_S)
            stats = await client.call(Task("stats", "SYS", "STATS", None, (("ID", "s2"),)))
            assert ("STORAGE", "full:none") in stats.fields
