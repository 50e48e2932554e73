"""The daemon over its real Unix socket, with the reference Memory Specialist as its peer."""

from __future__ import annotations

import os

import pytest
import trio

from csp_web.client.trio_client import open_client
from protocol import Reply, Status, Task
from tests.conftest import Daemon, Sink, sink_records
from tests.harness import outbox_of


def _audits(sink: Sink) -> list[dict[str, object]]:
    return sink_records(sink.directory, "audit")


async def test_ping_over_socket_answers_pong_and_audits_to_memory(
    daemon: Daemon, sink: Sink
) -> None:
    """R-1, M-1: a reply echoes the ID; the op's audit write reaches the Memory Specialist."""
    async with open_client(daemon.socket_path) as client:
        reply = await client.call(Task("ping", "SYS", "PONG", None, (("ID", "p-1"),)))
    assert reply == Reply(Status.OK, (("ID", "p-1"), ("SCOPE", "[sys]"), ("DATA", "pong")))
    with trio.fail_after(10):  # the audit was pending before the reply (O-4); the sink
        await outbox_of(daemon.dispatcher).wait_drained()  # stores a write before its ACK
    (audit,) = [a for a in _audits(sink) if a.get("ids") == ["p-1"]]
    # O-4: an IN:SYS frame's audit is a summary (of one frame, with this test's config).
    assert {k: audit[k] for k in ("summary", "frames", "failed", "ops", "uid", "pid")} == {
        "summary": "sys",
        "frames": 1,
        "failed": 0,
        "ops": {"SYS/ping": 1},
        "uid": os.getuid(),
        "pid": os.getpid(),
    }


async def test_many_concurrent_calls_share_one_connection(daemon: Daemon) -> None:
    """C-2: replies find their callers by ID however they interleave."""
    async with open_client(daemon.socket_path) as client:
        results: list[Reply] = []

        async def one(n: int) -> None:
            results.append(await client.call(Task("ping", "SYS", "PONG", None, (("ID", f"x{n}"),))))

        async with trio.open_nursery() as nursery:
            for n in range(50):
                nursery.start_soon(one, n)
    assert sorted(r.id or "" for r in results) == sorted(f"x{n}" for n in range(50))
    assert all(r.status is Status.OK for r in results)


async def test_a_call_with_a_repeated_id_is_refused_without_leaking_pending_ids(
    daemon: Daemon,
) -> None:
    """The client checks IDs before registering any, so a refused call leaves nothing behind."""
    ping = Task("ping", "SYS", "PONG")
    async with open_client(daemon.socket_path) as client:
        with pytest.raises(ValueError, match="repeated"):
            await client.call_many(
                [
                    Task("ping", "SYS", "PONG", None, (("ID", "x"),)),
                    Task("ping", "SYS", "PONG", None, (("ID", "dup"),)),
                    Task("ping", "SYS", "PONG", None, (("ID", "dup"),)),
                ]
            )
        reply = await client.call(Task(ping.req, ping.domain, ping.out, None, (("ID", "x"),)))
    assert reply.id == "x"
    assert reply.status is Status.OK
