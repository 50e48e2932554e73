"""``Client.call_batch``: a batch of serialised frames sent in one write, one waiter for all
of its replies (issue 8.8: one Event per write cost the outbox's delivery a scheduler pass
each)."""

from __future__ import annotations

import pytest
import trio

from csp_web.client.trio_client import Client, ClientClosed, open_stream_client
from protocol import NEED_DATA, Connection, Reply, Status, Task, serialize


def _ping(task_id: str) -> Task:
    return Task("ping", "SYS", "PONG", None, (("ID", task_id),))


def _pong(task_id: str) -> Reply:
    return Reply(Status.OK, (("ID", task_id), ("DATA", "pong")))


async def _read_tasks(stream: trio.SocketStream, count: int) -> list[Task]:
    codec = Connection()
    tasks: list[Task] = []
    while len(tasks) < count:
        event = codec.next_event()
        if isinstance(event, Task):
            tasks.append(event)
            continue
        assert event is NEED_DATA
        codec.receive_data(await stream.receive_some(65536))
    return tasks


async def _peer(answer: int, reverse: bool, stream: trio.SocketStream, sent: list[Task]) -> None:
    """Read three tasks, then answer ``answer`` of them one write each (last first when
    ``reverse``), then close."""
    async with stream:
        tasks = await _read_tasks(stream, 3)
        sent.extend(tasks)
        order = list(reversed(tasks)) if reverse else tasks
        for task in order[:answer]:
            await stream.send_all(serialize(_pong(task.id or "")))
            await trio.lowlevel.checkpoint()


async def _batch(client: Client, ids: list[str]) -> list[Reply]:
    data = b"".join(serialize(_ping(task_id)) for task_id in ids)
    return await client.call_batch(ids, data, timeout_s=10)


async def test_a_batchs_replies_are_returned_in_the_order_sent_however_they_arrive() -> None:
    """C-1: replies are matched by ID; the batch returns once the last one is in."""
    ours, theirs = trio.socket.socketpair()
    sent: list[Task] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_peer, 3, True, trio.SocketStream(theirs), sent)
        async with open_stream_client(trio.SocketStream(ours)) as client:
            replies = await _batch(client, ["b-1", "b-2", "b-3"])
    assert [task.id for task in sent] == ["b-1", "b-2", "b-3"]
    assert replies == [_pong("b-1"), _pong("b-2"), _pong("b-3")]


async def test_a_batch_cut_short_by_the_peer_raises_client_closed() -> None:
    """The connection ends after two of three replies: the batch raises ClientClosed, and
    the client takes no new call on the closed connection."""
    ours, theirs = trio.socket.socketpair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_peer, 2, False, trio.SocketStream(theirs), [])
        async with open_stream_client(trio.SocketStream(ours)) as client:
            with trio.fail_after(10), pytest.raises(ClientClosed):
                await _batch(client, ["c-1", "c-2", "c-3"])
            with pytest.raises(ClientClosed):
                await _batch(client, ["c-4"])


async def test_a_batch_with_a_repeated_id_is_refused_before_anything_is_sent() -> None:
    """An ID twice in one batch, or one already awaited, is a ValueError: two replies with
    one ID could not be told apart."""
    ours, theirs = trio.socket.socketpair()
    async with trio.SocketStream(theirs), open_stream_client(trio.SocketStream(ours)) as client:
        with pytest.raises(ValueError, match="repeated"):
            await _batch(client, ["d-1", "d-1"])
        waiting = await client.start_call(_ping("d-2"))
        with pytest.raises(ValueError, match="repeated"):
            await _batch(client, ["d-2"])
        assert waiting.id == "d-2"


class _Wakeups(trio.abc.Instrument):
    """Counts how often ``task`` is scheduled to run."""

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.count = 0

    def task_scheduled(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.count += 1


async def _answer_one_by_one(stream: trio.SocketStream, count: int) -> None:
    async with stream:
        for task in await _read_tasks(stream, count):
            await stream.send_all(serialize(_pong(task.id or "")))
            await trio.lowlevel.checkpoint()  # each reply its own write, read on its own


async def test_a_batch_waits_on_one_waiter_not_one_per_reply() -> None:
    """Issue 8.8: 100 replies arriving one write at a time wake the batch's caller a few
    times (its send, its one waiter), not once per reply."""
    ids = [f"e-{n}" for n in range(100)]
    ours, theirs = trio.socket.socketpair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_answer_one_by_one, trio.SocketStream(theirs), len(ids))
        async with open_stream_client(trio.SocketStream(ours)) as client:
            wakeups = _Wakeups(trio.lowlevel.current_task())
            trio.lowlevel.add_instrument(wakeups)
            try:
                replies = await _batch(client, ids)
            finally:
                trio.lowlevel.remove_instrument(wakeups)
    assert replies == [_pong(task_id) for task_id in ids]
    assert wakeups.count <= 5, wakeups.count
