"""Bytes per line, bytes per frame and fields per frame, each at N and N+1 (SPEC L-1 to L-3)."""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable

import pytest

from protocol import NEED_DATA, Connection, ErrorCode, Limits, ProtocolError, Reply, Status, Task

from .helpers import Failed, byte_by_byte, close, feed, run, whole

SMALL = Limits(max_line_bytes=32, max_frame_bytes=64, max_fields=4)
GOOD = b"STATUS OK\nDATA next\n\n"
GOOD_FRAME = Reply(Status.OK, (("DATA", "next"),))
TOO_LARGE = Failed(ErrorCode.FRAME_TOO_LARGE)


def field_line(size: int, key: str = "DATA") -> bytes:
    """A ``KEY xxx`` line of exactly ``size`` bytes, without its newline."""
    line = f"{key} ".encode() + b"x" * (size - len(key) - 1)
    assert len(line) == size
    return line


def one_field_frame(size: int) -> tuple[bytes, Reply]:
    """``STATUS OK`` plus one DATA line of ``size`` bytes, and the frame it stands for."""
    line = field_line(size)
    return b"STATUS OK\n" + line + b"\n\n", Reply(Status.OK, (("DATA", line[5:].decode()),))


Chunker = Callable[[bytes], list[bytes]]
chunkings = pytest.mark.parametrize(
    "chunk", [pytest.param(whole, id="whole"), pytest.param(byte_by_byte, id="bytewise")]
)


def test_default_limits_are_the_spec_values() -> None:
    """L-1, L-2, L-3: 256 KiB per line, 1 MiB per frame, 128 fields."""
    assert Limits() == Limits(max_line_bytes=256 * 1024, max_frame_bytes=1024**2, max_fields=128)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_line_bytes": 0},
        {"max_frame_bytes": 0, "max_line_bytes": 0},
        {"max_fields": 0},
        {"max_fields": -1},
        {"max_line_bytes": 65, "max_frame_bytes": 64},
    ],
    ids=repr,
)
def test_limits_must_be_positive_and_a_line_must_fit_a_frame(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match=r"."):
        Limits(**kwargs)


def test_line_limit_may_equal_frame_limit() -> None:
    assert Limits(max_line_bytes=8, max_frame_bytes=8, max_fields=1).max_line_bytes == 8


# L-1: bytes per line.


@chunkings
def test_line_of_exactly_max_line_bytes_is_accepted(chunk: Chunker) -> None:
    """L-1: N bytes on a line is within the limit."""
    wire, frame = one_field_frame(SMALL.max_line_bytes)
    assert run(chunk(wire), limits=SMALL) == [frame]


@chunkings
def test_line_one_byte_over_max_line_bytes_is_frame_too_large(chunk: Chunker) -> None:
    """L-1, R-6: N+1 bytes is frame_too_large; the frame after it parses."""
    wire, _ = one_field_frame(SMALL.max_line_bytes + 1)
    assert run(chunk(wire + GOOD), limits=SMALL) == [TOO_LARGE, GOOD_FRAME]


@chunkings
def test_header_line_one_byte_over_max_line_bytes_is_frame_too_large(chunk: Chunker) -> None:
    """L-1, R-6: the header line counts as a line; its frame's fields are discarded."""
    header = b"TASK REQ:search " + b"q" * 10 + b" IN:WEB OUT:URL_REFS"
    fits = Limits(max_line_bytes=len(header), max_frame_bytes=64, max_fields=4)
    short = Limits(max_line_bytes=len(header) - 1, max_frame_bytes=64, max_fields=4)
    wire = header + b"\nID t-1\n\n" + GOOD
    task = Task("search", "WEB", "URL_REFS", "q" * 10, (("ID", "t-1"),))
    assert run(chunk(wire), limits=fits) == [task, GOOD_FRAME]
    assert run(chunk(wire), limits=short) == [TOO_LARGE, GOOD_FRAME]


def test_crlf_line_of_exactly_max_line_bytes_is_accepted() -> None:
    """L-1, F-2: the CRLF line end is not part of the line's bytes."""
    wire, frame = one_field_frame(SMALL.max_line_bytes)
    assert run([wire.replace(b"\n", b"\r\n")], limits=SMALL) == [frame]


def test_crlf_line_of_exactly_max_line_bytes_is_accepted_when_cr_and_lf_arrive_apart() -> None:
    """L-1, F-2: whether a line fits must not depend on where the chunks split."""
    wire, frame = one_field_frame(SMALL.max_line_bytes)
    assert run(byte_by_byte(wire.replace(b"\n", b"\r\n")), limits=SMALL) == [frame]


@chunkings
def test_over_long_line_error_carries_the_id_read_before_it(chunk: Chunker) -> None:
    """L-1, R-5: the ID line above the over-long line correlates the FAIL reply."""
    wire = b"STATUS OK\nID big-1\n" + field_line(SMALL.max_line_bytes + 1) + b"\n\n" + GOOD
    assert run(chunk(wire), limits=SMALL) == [
        Failed(ErrorCode.FRAME_TOO_LARGE, "big-1"),
        GOOD_FRAME,
    ]


@chunkings
def test_rest_of_a_frame_with_an_over_long_line_is_discarded(chunk: Chunker) -> None:
    """L-1, R-6: the tail of the long line and the frame's later lines are skipped."""
    wire = (
        b"STATUS OK\n"
        + field_line(SMALL.max_line_bytes * 3)
        + b"\nDATA dropped\nbad key dropped\n\xff\n\n"
        + GOOD
    )
    assert run(chunk(wire), limits=SMALL) == [TOO_LARGE, GOOD_FRAME]


def test_over_long_last_line_at_eof_is_frame_too_large() -> None:
    """L-1, F-6: an unterminated last line is measured like any other."""
    assert run([b"STATUS OK\n" + field_line(SMALL.max_line_bytes + 1)], limits=SMALL) == [TOO_LARGE]
    wire, frame = one_field_frame(SMALL.max_line_bytes)
    assert run([wire.removesuffix(b"\n\n")], limits=SMALL) == [frame]


def test_over_long_line_fed_in_many_chunks_is_not_buffered() -> None:
    """L-1, R-6: 4 MiB of one line under a 1 KiB limit raises once and holds ~nothing."""
    limits = Limits(max_line_bytes=1024, max_frame_bytes=4096, max_fields=8)
    conn = Connection(limits)
    chunk = b"x" * 4096
    assert feed(conn, [b"STATUS OK\nID big-1\nDATA "]) == []
    outcomes = []
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        for _ in range(1024):
            outcomes += feed(conn, [chunk])
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        if started:
            tracemalloc.stop()
    assert outcomes == [Failed(ErrorCode.FRAME_TOO_LARGE, "big-1")]
    assert peak_bytes < 256 * 1024
    assert conn.in_frame
    assert feed(conn, [b"tail\nDATA dropped\n\n"]) == []
    assert not conn.in_frame
    assert feed(conn, [GOOD]) == [GOOD_FRAME]


def test_over_long_line_cut_by_eof_while_skipping_closes_cleanly() -> None:
    """L-1, F-6: EOF in the tail of an over-long line ends the stream with one error."""
    conn = Connection(SMALL)
    assert feed(conn, [b"STATUS OK\n", b"DATA " + b"x" * 40, b"y" * 40]) == [TOO_LARGE]
    assert close(conn) == []


@pytest.mark.parametrize("size", [256 * 1024, 256 * 1024 + 1])
def test_default_line_limit_at_n_and_n_plus_one(size: int) -> None:
    """L-1: 256 KiB by default."""
    wire, frame = one_field_frame(size)
    expected = [frame] if size <= Limits().max_line_bytes else [TOO_LARGE]
    assert run([wire]) == expected


# L-2: bytes per frame, counting each line plus one byte for its newline.


def frame_of_size(total: int) -> tuple[bytes, Reply]:
    """A SMALL-compliant frame whose lines plus one newline byte each add up to ``total``."""
    rest = total - len(b"STATUS OK\n")
    first = field_line(rest // 2 - 1)
    second = field_line(rest - len(first) - 2)
    wire = b"STATUS OK\n" + first + b"\n" + second + b"\n\n"
    frame = Reply(Status.OK, (("DATA", first[5:].decode()), ("DATA", second[5:].decode())))
    return wire, frame


@chunkings
def test_frame_of_exactly_max_frame_bytes_is_accepted(chunk: Chunker) -> None:
    """L-2: N bytes counting a newline per line; the closing blank line is not counted."""
    wire, frame = frame_of_size(SMALL.max_frame_bytes)
    assert len(wire) == SMALL.max_frame_bytes + 1
    assert run(chunk(wire + GOOD), limits=SMALL) == [frame, GOOD_FRAME]


@chunkings
def test_frame_one_byte_over_max_frame_bytes_is_frame_too_large(chunk: Chunker) -> None:
    """L-2, R-6: N+1 bytes is frame_too_large and the next frame parses."""
    wire, _ = frame_of_size(SMALL.max_frame_bytes + 1)
    assert run(chunk(wire + GOOD), limits=SMALL) == [TOO_LARGE, GOOD_FRAME]


def test_frame_limit_counts_one_byte_per_newline_even_for_crlf() -> None:
    """L-2, F-2: CRLF counts as one newline byte."""
    wire, frame = frame_of_size(SMALL.max_frame_bytes)
    assert run([wire.replace(b"\n", b"\r\n")], limits=SMALL) == [frame]


def test_blank_lines_between_frames_do_not_count_toward_the_next_frame() -> None:
    """L-2, F-1: each frame's count starts at its header."""
    wire, frame = frame_of_size(SMALL.max_frame_bytes)
    many_blanks = Limits(SMALL.max_line_bytes, SMALL.max_frame_bytes, SMALL.max_fields, 100)
    assert run([b"\n" * 100 + wire + wire], limits=many_blanks) == [frame, frame]


def test_frame_too_large_carries_the_frame_id() -> None:
    """L-2, R-5: an ID line read before the limit passed correlates the reply."""
    wire = b"STATUS OK\nID f-9\n" + b"".join(field_line(20) + b"\n" for _ in range(3)) + b"\n"
    assert run([wire + GOOD], limits=SMALL) == [
        Failed(ErrorCode.FRAME_TOO_LARGE, "f-9"),
        GOOD_FRAME,
    ]


@pytest.mark.parametrize("extra", [0, 1])
def test_default_frame_limit_at_n_and_n_plus_one(extra: int) -> None:
    """L-2: 1 MiB by default."""
    full = field_line(Limits().max_line_bytes) + b"\n"
    head = b"STATUS OK\n" + full * 3
    last = field_line(Limits().max_frame_bytes - len(head) - 1 + extra)
    outcomes = run([head + last + b"\n\n"])
    if extra:
        assert outcomes == [TOO_LARGE]
    else:
        assert len(outcomes) == 1
        assert isinstance(outcomes[0], Reply)
        assert len(outcomes[0].fields) == 4


# L-3: fields per frame.


def frame_with_fields(count: int) -> tuple[bytes, Reply]:
    fields = tuple((f"K{i}", str(i)) for i in range(count))
    wire = b"STATUS OK\n" + b"".join(f"{k} {v}\n".encode() for k, v in fields) + b"\n"
    return wire, Reply(Status.OK, fields)


@chunkings
def test_frame_with_exactly_max_fields_is_accepted(chunk: Chunker) -> None:
    """L-3: N field lines; the header is not a field."""
    wire, frame = frame_with_fields(SMALL.max_fields)
    assert run(chunk(wire + GOOD), limits=SMALL) == [frame, GOOD_FRAME]


@chunkings
def test_frame_with_one_field_over_max_fields_is_frame_too_large(chunk: Chunker) -> None:
    """L-3, R-6: N+1 fields is frame_too_large and the next frame parses."""
    wire, _ = frame_with_fields(SMALL.max_fields + 1)
    assert run(chunk(wire + GOOD), limits=SMALL) == [TOO_LARGE, GOOD_FRAME]


@pytest.mark.parametrize("count", [128, 129])
def test_default_field_limit_at_n_and_n_plus_one(count: int) -> None:
    """L-3: 128 fields by default."""
    wire, frame = frame_with_fields(count)
    assert run([wire]) == ([frame] if count <= 128 else [TOO_LARGE])


# One error per frame, however the rest of the frame arrives.


@chunkings
@pytest.mark.parametrize(
    "first_violation",
    [
        pytest.param(b"A 1\nB 2\nC 3\nD 4\nE 5\n", id="fields"),
        pytest.param(field_line(30) + b"\n" + field_line(30) + b"\n", id="frame-bytes"),
        pytest.param(field_line(33) + b"\n", id="line-bytes"),
    ],
)
def test_over_long_line_in_a_frame_already_too_large_raises_no_second_error(
    chunk: Chunker, first_violation: bytes
) -> None:
    """L-1, L-2, L-3, R-6: a frame that passed a limit gets one error; its tail is skipped."""
    wire = b"STATUS OK\n" + first_violation + field_line(80) + b"\nDATA z\n\n" + GOOD
    assert run(chunk(wire), limits=SMALL) == [TOO_LARGE, GOOD_FRAME]


# Holding a line under the limit must stay cheap, or L-1 bounds memory but not CPU.


def _cpu_seconds_to_feed_bytewise(prefix: bytes, size: int) -> float:
    """CPU time to feed ``prefix`` and then ``size`` bytes of one unfinished line, a byte each."""
    conn = Connection()
    feed(conn, [prefix])
    start = time.process_time()
    for _ in range(size):
        conn.receive_data(b"x")
        conn.next_event()
    return time.process_time() - start


def test_unfinished_first_line_costs_no_more_per_byte_than_a_later_line() -> None:
    """L-1, F-1: each received byte is scanned once, whichever line of the frame it is in.

    A 64 KiB line arriving a byte at a time: as a frame's first line it must cost about what
    it costs as a field line (linear), not grow with the bytes already buffered (quadratic).
    CPU time, best of three, with a 3x margin, so a loaded machine does not fail it.
    """
    size = 64 * 1024
    as_field_line = min(_cpu_seconds_to_feed_bytewise(b"STATUS OK\nDATA ", size) for _ in "abc")
    budget = 3 * as_field_line + 0.05
    as_first_line = float("inf")
    for _ in range(3):
        as_first_line = min(as_first_line, _cpu_seconds_to_feed_bytewise(b"", size))
        if as_first_line < budget:
            break
    assert as_first_line < budget


# L-8: empty lines in a row outside a frame.

BLANKS = Limits(max_blank_lines=3)
TOO_MANY_BLANKS = Failed(ErrorCode.TOO_MANY_BLANK_LINES)


@chunkings
@pytest.mark.parametrize("newline", [b"\n", b"\r\n"], ids=["lf", "crlf"])
def test_max_blank_lines_between_frames_are_ignored(chunk: Chunker, newline: bytes) -> None:
    """L-8, F-1: N empty lines after a frame's own closing one are skipped."""
    wire = GOOD + newline * BLANKS.max_blank_lines + GOOD
    assert run(chunk(wire), limits=BLANKS) == [GOOD_FRAME, GOOD_FRAME]


@chunkings
@pytest.mark.parametrize("newline", [b"\n", b"\r\n"], ids=["lf", "crlf"])
def test_one_blank_line_over_the_budget_is_too_many_blank_lines(
    chunk: Chunker, newline: bytes
) -> None:
    """L-8: N+1 empty lines in a row raise too_many_blank_lines once they arrive."""
    wire = GOOD + newline * (BLANKS.max_blank_lines + 1) + GOOD
    assert run(chunk(wire), limits=BLANKS) == [GOOD_FRAME, TOO_MANY_BLANKS, GOOD_FRAME]


def test_blank_line_budget_starts_afresh_after_each_frame() -> None:
    """L-8: the budget counts empty lines in a row, so N between every two frames is fine."""
    gap = b"\n" * BLANKS.max_blank_lines
    assert run([(gap + GOOD) * 5], limits=BLANKS) == [GOOD_FRAME] * 5


def test_blank_lines_before_the_first_frame_count_against_the_budget() -> None:
    """L-8: a connection that opens with a flood of newlines is refused before any frame."""
    conn = Connection(BLANKS)
    conn.receive_data(b"\n" * 64 * 1024)
    with pytest.raises(ProtocolError) as caught:
        conn.next_event()
    assert caught.value.code is ErrorCode.TOO_MANY_BLANK_LINES


def test_a_run_of_blank_lines_is_skipped_in_one_pass() -> None:
    """L-8: 64 KiB of newlines within the budget is one buffer operation, not one per byte:
    the buffer is empty after a single next_event call."""
    conn = Connection(Limits(max_blank_lines=1 << 20))
    conn.receive_data(b"\n" * 64 * 1024)
    assert conn.next_event() is NEED_DATA
    assert not conn.in_frame


def test_a_cr_at_the_end_of_a_blank_run_waits_for_its_lf() -> None:
    """F-2: a trailing CR may be half of a CRLF, so it stays buffered."""
    conn = Connection(BLANKS)
    conn.receive_data(b"\n\r")
    assert conn.next_event() is NEED_DATA
    conn.receive_data(b"\n" + GOOD)
    assert conn.next_event() == GOOD_FRAME


def test_an_over_long_line_dropped_before_its_newline_ends_the_blank_run() -> None:
    """L-8, L-1: 30 newlines, a 400 kB line, 5 newlines and a ping give the same two events
    fed whole and in 64 KiB chunks (the line is dropped mid-way only in the second case)."""
    ping = b"TASK REQ:ping IN:SYS OUT:SYS\n\n"
    wire = b"\n" * 30 + b"A" * 400_000 + b"\n" * 5 + ping
    chunks = [wire[at : at + 64 * 1024] for at in range(0, len(wire), 64 * 1024)]
    expected = run([wire])
    assert expected == [TOO_LARGE, Task("ping", "SYS", "SYS")]
    assert run(chunks) == expected


def test_max_blank_lines_may_be_zero_but_not_negative() -> None:
    assert run([GOOD + GOOD], limits=Limits(max_blank_lines=0)) == [GOOD_FRAME] * 2
    with pytest.raises(ValueError, match="max_blank_lines"):
        Limits(max_blank_lines=-1)


@pytest.mark.parametrize("size", [SMALL.max_frame_bytes, SMALL.max_frame_bytes + 1])
@pytest.mark.parametrize("ends", [b"\n", b"\r\n"], ids=["lf", "crlf"])
def test_frame_at_n_and_n_plus_one_is_judged_alike_ahead_of_a_full_buffer(
    size: int, ends: bytes
) -> None:
    """L-2: a frame followed in the same read by more than a frame's worth of bytes (the
    whole-frame path searches only as far as a frame may reach) is judged as when it
    arrives alone, with LF or CRLF line ends; so are the oversized frames after it."""
    wire, frame = frame_of_size(size)
    oversized, _ = frame_of_size(SMALL.max_frame_bytes + 1)
    stream = (wire + oversized * 3 + GOOD).replace(b"\n", ends)
    first = frame if size == SMALL.max_frame_bytes else TOO_LARGE
    assert run([stream], limits=SMALL) == [first, TOO_LARGE, TOO_LARGE, TOO_LARGE, GOOD_FRAME]
