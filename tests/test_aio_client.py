"""The asyncio client against a real daemon on its Unix socket (the daemon runs on trio; the
client runs in an asyncio loop in a worker thread, as an asyncio application would)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest
import trio

from csp_web.client.aio_client import ClientClosed, open_asyncio_client
from csp_web.config import Config
from protocol import Reply, Status, Task
from tests.conftest import Sink, start_daemon
from tests.harness import TEST_OPS

T = TypeVar("T")


async def _in_asyncio(main: Callable[[], Awaitable[T]]) -> T:
    """Run ``main`` in a fresh asyncio loop on a worker thread and return its result."""

    def run() -> T:
        async def wrapped() -> T:
            return await main()

        return asyncio.run(wrapped())

    with trio.fail_after(30):
        return await trio.to_thread.run_sync(run)


def _ping(task_id: str) -> Task:
    return Task("ping", "SYS", "PONG", None, (("ID", task_id),))


@pytest.fixture
async def socket_path(nursery: trio.Nursery, config: Config, sink: Sink, sock_dir: str) -> str:
    daemon = await start_daemon(nursery, config, os.path.join(sock_dir, "csp.sock"), TEST_OPS)
    return daemon.socket_path


async def test_a_call_returns_the_daemons_reply_with_its_id(socket_path: str) -> None:
    async def main() -> Reply:
        async with open_asyncio_client(socket_path) as client:
            return await client.call(_ping("a-1"))

    reply = await _in_asyncio(main)
    assert reply == Reply(Status.OK, (("ID", "a-1"), ("SCOPE", "[sys]"), ("DATA", "pong")))


async def test_replies_reach_their_callers_whatever_order_they_arrive_in(socket_path: str) -> None:
    """C-2: a slow task sent first does not hold up a fast one sent after it."""

    async def main() -> list[str]:
        async with open_asyncio_client(socket_path) as client:
            order: list[str] = []

            async def one(task: dict[str, str]) -> None:
                reply = await client.call(task)
                order.append(reply.get("DATA") or "")

            slow = {"REQ": "sleep", "IN": "TEST", "OUT": "SLEPT", "MS": "300"}
            fast = {"REQ": "echo", "IN": "TEST", "OUT": "ECHO", "TEXT": "hi"}
            first = asyncio.create_task(one(slow))
            # One pass of the loop runs the slow call up to its wait for the reply: its frame
            # is written first (the write is synchronous; no timer involved).
            await asyncio.sleep(0)
            assert order == []
            await one(fast)
            await first
            return order

    assert await _in_asyncio(main) == ["echo", "slept:300"]


async def test_call_many_pipelines_frames_and_keeps_their_order(socket_path: str) -> None:
    async def main() -> list[Reply]:
        async with open_asyncio_client(socket_path, id_prefix="m-") as client:
            return await client.call_many([{"REQ": "ping", "IN": "SYS", "OUT": "PONG"}] * 50)

    replies = await _in_asyncio(main)
    assert [reply.id for reply in replies] == [f"m-{n}" for n in range(1, 51)]
    assert {reply.status for reply in replies} == {Status.OK}


async def test_automatic_ids_carry_a_random_prefix_per_client(socket_path: str) -> None:
    async def main() -> list[str]:
        ids = []
        for _ in range(2):
            async with open_asyncio_client(socket_path) as client:
                ids.append((await client.call({"REQ": "ping", "IN": "SYS", "OUT": "PONG"})).id)
        return [task_id or "" for task_id in ids]

    first, second = await _in_asyncio(main)
    assert first.endswith("-1")
    assert second.endswith("-1")
    assert first != second


async def test_an_id_already_awaiting_a_reply_is_refused(socket_path: str) -> None:
    async def main() -> str:
        async with open_asyncio_client(socket_path) as client:
            slow = asyncio.create_task(
                client.call(Task("sleep", "TEST", "SLEPT", None, (("ID", "d"), ("MS", "200"))))
            )
            await asyncio.sleep(0)  # one loop pass: the slow call registers "d" and sends it
            try:
                await client.call(_ping("d"))
            except ValueError as exc:
                await slow
                return str(exc)
            return "accepted"

    assert "already awaiting" in await _in_asyncio(main)


async def test_a_reply_not_in_time_raises_timeout_and_frees_its_id(socket_path: str) -> None:
    async def main() -> Reply:
        async with open_asyncio_client(socket_path) as client:
            slow = Task("sleep", "TEST", "SLEPT", None, (("ID", "t"), ("MS", "2000")))
            with pytest.raises(TimeoutError):
                await client.call(slow, timeout_s=0.1)
            return await client.call(_ping("t"))  # the ID may be used again

    assert (await _in_asyncio(main)).status is Status.OK


async def test_a_connection_that_closes_fails_every_waiting_call(
    tmp_path: os.PathLike[str],
) -> None:
    """A peer that reads one frame and hangs up: the caller gets ClientClosed, not a hang."""
    path = os.path.join(str(tmp_path), "closer.sock")

    async def main() -> str:
        async def close_after_reading(
            reader: asyncio.StreamReader, writer: asyncio.StreamWriter
        ) -> None:
            await reader.readuntil(b"\n\n")
            writer.close()

        server = await asyncio.start_unix_server(close_after_reading, path)
        async with server, open_asyncio_client(path) as client:
            try:
                await client.call_many([_ping("x"), _ping("y")], timeout_s=10)
            except ClientClosed as exc:
                return str(exc)
            return "replied"

    assert "closed" in await _in_asyncio(main)


async def test_nothing_listening_raises_oserror(tmp_path: os.PathLike[str]) -> None:
    async def main() -> str:
        try:
            async with open_asyncio_client(os.path.join(str(tmp_path), "none.sock")):
                return "connected"
        except OSError as exc:
            return type(exc).__name__

    assert await _in_asyncio(main) == "FileNotFoundError"
