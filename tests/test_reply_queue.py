"""The reply queue between a connection's producers and its writer (SPEC C-2, L-7)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from csp_web.core.wire.reply_queue import WRITE_BYTES, ReplyOrder, ReplyQueue


async def test_replies_queued_while_the_writer_waits_go_out_as_one_write_dated_by_the_first(
    autojump_clock: trio.testing.MockClock,
) -> None:
    queue = ReplyQueue(max_chunks=8)
    taken: list[tuple[float, list[bytes]] | None] = []

    async def writer() -> None:
        taken.append(await queue.take())

    with trio.fail_after(1):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer)
            await trio.testing.wait_all_tasks_blocked()
            first = trio.current_time()
            queue.put(b"OK 1\n\n")
            autojump_clock.jump(2.0)
            queue.put(b"OK 2\n\n")
            queue.put(b"OK 3\n\n")
    assert taken == [(first, [b"OK 1\n\nOK 2\n\nOK 3\n\n"])]
    assert len(queue) == 0


async def test_a_reply_queued_after_a_take_starts_a_new_batch_with_its_own_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    queue = ReplyQueue(max_chunks=8)
    queue.put(b"a")
    with trio.fail_after(1):
        assert await queue.take() == (trio.current_time(), [b"a"])
        autojump_clock.jump(5.0)
        queue.put(b"b")
        assert await queue.take() == (trio.current_time(), [b"b"])
        queue.close()
        assert await queue.take() is None


async def test_a_producer_waits_for_room_at_max_chunks_and_goes_on_after_a_take(
    autojump_clock: trio.testing.MockClock,
) -> None:
    queue = ReplyQueue(max_chunks=2)
    queued_at = trio.current_time()
    queue.put(b"a")
    with trio.fail_after(1):
        await queue.wait_room()  # N-1 queued: room
        queue.put(b"b")  # N queued: no room until the writer takes them
        waited = trio.Event()

        async def producer() -> None:
            await queue.wait_room()
            waited.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(producer)
            await trio.testing.wait_all_tasks_blocked()
            assert not waited.is_set()
            assert await queue.take() == (queued_at, [b"ab"])
    assert waited.is_set()


async def test_queued_replies_are_joined_up_to_the_write_cap_and_a_larger_one_goes_alone() -> None:
    """Replies fill one send up to WRITE_BYTES (N joins, N+1 starts the next send); a reply
    past the cap is sent as it is, in its place, between the runs around it."""
    queue = ReplyQueue(max_chunks=8)
    half = b"a" * (WRITE_BYTES // 2)
    large = b"L" * (WRITE_BYTES + 1)
    for chunk in (half, half, b"b", large, b"c", b"d"):
        queue.put(chunk)
    with trio.fail_after(1):
        taken = await queue.take()
    assert taken is not None
    writes = taken[1]
    assert writes == [half + half, b"b", large, b"cd"]
    assert all(len(w) <= WRITE_BYTES for w in writes if w is not large)
    assert writes[2] is large  # not copied


def test_replies_of_frames_without_id_are_released_in_request_order() -> None:
    order = ReplyOrder()
    first, second = order.reserve(None), order.reserve(None)
    assert order.reserve("x") is None
    assert order.complete(second, b"2") == b""
    assert order.complete(None, b"x") == b"x"
    assert order.complete(first, b"1") == b"12"


class _Yields(trio.abc.Instrument):
    """Counts the times one task is scheduled again (each wait it made)."""

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.yields = 0

    def task_scheduled(self, task: trio.lowlevel.Task) -> None:
        self.yields += task is self.task


@pytest.mark.parametrize(("more_coming", "yields"), [(False, 0), (True, 1)])
async def test_the_writer_waits_one_round_for_more_replies_only_while_more_are_coming(
    more_coming: bool, yields: int
) -> None:
    """A pipelining connection (a frame waiting for its start) lets the writer wait one
    scheduler round so the coming replies join its write; otherwise it writes at once."""
    queue = ReplyQueue(max_chunks=8)
    asked: list[bool] = []

    def linger() -> bool:
        asked.append(more_coming)
        return more_coming

    queue.put(b"a")
    counter = _Yields(trio.lowlevel.current_task())
    trio.lowlevel.add_instrument(counter)
    try:
        with trio.fail_after(1):
            taken = await queue.take(linger=linger)
    finally:
        trio.lowlevel.remove_instrument(counter)
    assert taken is not None
    assert taken[1] == [b"a"]
    assert asked == [more_coming]
    assert counter.yields == yields


async def test_a_lingering_take_keeps_waiting_when_its_chunks_were_taken_at_once_meanwhile(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The reader may send queued replies itself (``take_now``) while the writer lingers a
    round; the writer's take then waits for the next reply instead of writing b""."""
    queue = ReplyQueue(max_chunks=8)
    taken: list[tuple[float, list[bytes]] | None] = []

    async def writer() -> None:
        taken.append(await queue.take(linger=lambda: True))

    with trio.fail_after(1):
        async with trio.open_nursery() as nursery:
            queue.put(b"a")
            nursery.start_soon(writer)
            await trio.lowlevel.checkpoint()  # the writer runs and lingers one round
            assert queue.take_now() == (trio.current_time(), [b"a"])
            await trio.testing.wait_all_tasks_blocked()
            assert taken == []
            queue.put(b"b")
    assert taken == [(trio.current_time(), [b"b"])]
