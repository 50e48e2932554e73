"""The clients' one sans-IO matcher (csp_web/client/matcher.py): frames out with IDs, replies
in routed to their waiters, synchronous and without I/O, as h11's tests drive h11."""

from __future__ import annotations

import pytest

from csp_web.client.matcher import ClientClosed, Matched, ReplyMatcher
from protocol import Connection, ProtocolError, Reply, Status, Task, serialize


def _reply(task_id: str) -> Reply:
    return Reply(Status.OK, (("ID", task_id), ("DATA", f"for {task_id}")))


def _ping(task_id: str | None = None) -> Task:
    fields = (("ID", task_id),) if task_id is not None else ()
    return Task("ping", "SYS", "PONG", None, fields)


def _sent(data: bytes) -> list[Task]:
    codec = Connection()
    codec.receive_data(data)
    tasks = []
    while isinstance(event := codec.next_event(), Task):
        tasks.append(event)
    return tasks


def test_frames_get_the_next_automatic_id_unless_they_carry_one() -> None:
    matcher: ReplyMatcher[str] = ReplyMatcher(id_prefix="t-")
    ids, data = matcher.frames(
        [_ping(), _ping("mine"), {"REQ": "ping", "IN": "SYS", "OUT": "PONG"}]
    )
    assert ids == ["t-1", "mine", "t-2"]
    assert _sent(data) == [_ping("t-1"), _ping("mine"), _ping("t-2")]


def test_an_automatic_prefix_is_random_per_matcher() -> None:
    first: ReplyMatcher[str] = ReplyMatcher()
    second: ReplyMatcher[str] = ReplyMatcher()
    assert first.frames([_ping()])[0] != second.frames([_ping()])[0]


@pytest.mark.parametrize("chunk", [None, 1])
def test_replies_reach_their_waiters_with_their_place_whole_or_byte_by_byte(
    chunk: int | None,
) -> None:
    matcher: ReplyMatcher[str] = ReplyMatcher()
    matcher.expect(["a", "b"], ["batch", "batch"])
    matcher.expect(["c"], ["single"])
    data = serialize(_reply("b")) + serialize(_reply("stranger")) + serialize(_reply("c"))
    data += serialize(_reply("a"))
    pieces = [data] if chunk is None else [data[i : i + 1] for i in range(len(data))]
    matched: list[Matched[str]] = []
    for piece in pieces:
        got, peer_closed = matcher.receive_data(piece)
        matched += got
        assert not peer_closed
    assert matched == [
        Matched("batch", 1, _reply("b")),
        Matched("single", 0, _reply("c")),
        Matched("batch", 0, _reply("a")),
    ]
    assert matcher.close() == []  # each matched ID left the table; the stranger was dropped


def test_bytes_after_a_reply_stay_buffered_until_it_is_whole() -> None:
    matcher: ReplyMatcher[str] = ReplyMatcher()
    matcher.expect(["a", "b"], ["w", "w"])
    second = serialize(_reply("b"))
    assert matcher.receive_data(serialize(_reply("a")) + second[:5]) == (
        [Matched("w", 0, _reply("a"))],
        False,
    )
    assert matcher.receive_data(second[5:]) == ([Matched("w", 1, _reply("b"))], False)


def test_a_repeated_or_already_awaited_id_is_refused_and_nothing_is_registered() -> None:
    matcher: ReplyMatcher[str] = ReplyMatcher()
    with pytest.raises(ValueError, match="repeated"):
        matcher.expect(["a", "a"], ["w", "w"])
    matcher.expect(["b"], ["first"])
    with pytest.raises(ValueError, match="ID b is already awaiting a reply"):
        matcher.expect(["c", "b"], ["second", "second"])
    # neither refused batch left an entry behind: only "first" waits
    assert matcher.receive_data(serialize(_reply("a")) + serialize(_reply("c")))[0] == []
    assert matcher.close() == ["first"]


def test_forget_drops_only_the_ids_the_given_waiter_awaits() -> None:
    matcher: ReplyMatcher[str] = ReplyMatcher()
    matcher.expect(["a"], ["old"])
    matcher.forget(["a"], "someone else")
    matcher.forget(["a"], "old")
    matcher.expect(["a"], ["new"])  # the ID is free again once its waiter forgot it
    assert matcher.receive_data(serialize(_reply("a")))[0] == [Matched("new", 0, _reply("a"))]


def test_close_hands_back_each_waiting_waiter_once_and_refuses_later_calls() -> None:
    matcher: ReplyMatcher[str] = ReplyMatcher()
    matcher.expect(["a", "b"], ["batch", "batch"])
    matcher.expect(["c"], ["single"])
    assert matcher.close() == ["batch", "single"]
    assert matcher.closed
    with pytest.raises(ClientClosed):
        matcher.expect(["d"], ["late"])


def test_eof_says_the_peer_closed() -> None:
    matcher: ReplyMatcher[str] = ReplyMatcher()
    matcher.expect(["a"], ["w"])
    assert matcher.receive_data(serialize(_reply("a"))) == (
        [Matched("w", 0, _reply("a"))],
        False,
    )
    assert matcher.receive_data(b"") == ([], True)


def test_bytes_that_are_not_a_reply_raise_the_protocol_error() -> None:
    matcher: ReplyMatcher[str] = ReplyMatcher()
    with pytest.raises(ProtocolError):
        matcher.receive_data(b"NOT A FRAME\n\n")
