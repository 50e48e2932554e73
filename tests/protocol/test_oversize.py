"""``oversize`` says what the parser refuses for size, no more and no less: each limit at N
and N+1 (SPEC L-1 to L-3), the detail the same as the parser's ``frame_too_large``."""

from __future__ import annotations

import pytest

from protocol import Connection, ErrorCode, Field, Limits, ProtocolError, Task, oversize, serialize

SMALL = Limits(max_line_bytes=32, max_frame_bytes=96, max_fields=4)


def task(*fields: Field) -> Task:
    return Task("x", "A", "B", None, fields)


def refusal(frame: Task, limits: Limits) -> str | None:
    """The parser's ``frame_too_large`` detail for the bytes of ``frame``; None if it parses."""
    codec = Connection(limits)
    codec.receive_data(serialize(frame))
    try:
        event = codec.next_event()
    except ProtocolError as exc:
        error = exc
    else:
        assert event == frame
        return None
    assert error.code is ErrorCode.FRAME_TOO_LARGE
    return error.detail


def line_of(size: int) -> Field:
    """A DATA field whose line is ``size`` bytes."""
    return ("DATA", "x" * (size - len("DATA ")))


FRAMES = {
    "line at N": task(line_of(32)),
    "line at N+1": task(line_of(33)),
    # the header "TASK REQ:x IN:A OUT:B" and its newline are 22 bytes: 22 + 25 + 25 + 24 = 96
    "frame at N": task(line_of(24), line_of(24), line_of(23)),
    "frame at N+1": task(line_of(24), line_of(24), line_of(24)),
    "fields at N": task(*[("K", "v")] * 4),
    "fields at N+1": task(*[("K", "v")] * 5),
    "quoted value": task(("DATA", "\n" * 13)),  # 13 two-byte escapes and quotes: 33 bytes
}


@pytest.mark.parametrize("name", FRAMES)
def test_oversize_agrees_with_the_parser(name: str) -> None:
    frame = FRAMES[name]
    over = oversize(frame, SMALL)
    assert (over.detail if over else None) == refusal(frame, SMALL)
    assert (over is None) == name.endswith(" at N")


def test_oversize_names_the_field_whose_line_is_too_long() -> None:
    over = oversize(task(("ID", "1"), line_of(33)), SMALL)
    assert over is not None
    assert (over.key, over.size, over.detail) == ("DATA", 33, "line over 32 bytes")
