"""Feeding the seed frames through ``Connection`` in every shape a stream can deliver them.

After h11's tests/test_io.py: each sample whole, byte by byte, with trailing bytes that must stay
buffered, with CRLF, and cut short by EOF.
"""

from __future__ import annotations

import pytest

from protocol import (
    CLOSED,
    NEED_DATA,
    Connection,
    ErrorCode,
    ProtocolError,
    Reply,
    Status,
    Task,
    serialize,
)

from .helpers import byte_by_byte, close, drain, feed, run
from .samples import REPLIES, REQUESTS, SAMPLES, Sample, sample_id

every_sample = pytest.mark.parametrize("sample", SAMPLES, ids=sample_id)


@pytest.mark.parametrize("sample", REQUESTS, ids=sample_id)
def test_every_seed_request_parses_as_written(sample: Sample) -> None:
    """F-1, F-3, F-4, V-1, V-2: each seed request frame is one Task."""
    assert run([sample.wire]) == [sample.frame]


@pytest.mark.parametrize("sample", REPLIES, ids=sample_id)
def test_every_seed_reply_is_what_the_serializer_writes(sample: Sample) -> None:
    """V-3, V-4, V-5: free text quoted, SNIPPET/SCOPE/DATA raw, exactly as the seeds show."""
    assert serialize(sample.frame) == sample.wire


@pytest.mark.parametrize("sample", REQUESTS, ids=sample_id)
def test_every_seed_request_is_what_the_serializer_writes(sample: Sample) -> None:
    """V-3, V-4, V-5: requests too are written as the seeds show them (inline text raw)."""
    assert serialize(sample.frame) == sample.wire


@every_sample
def test_sample_fed_whole_yields_its_frame(sample: Sample) -> None:
    """F-1: one chunk holding one frame yields that frame and then NEED_DATA."""
    conn = Connection()
    conn.receive_data(sample.wire)
    assert conn.next_event() == sample.frame
    assert conn.next_event() is NEED_DATA


@every_sample
def test_sample_fed_byte_by_byte_yields_its_frame_only_at_the_last_byte(sample: Sample) -> None:
    """F-1: no frame is returned before its closing blank line arrives."""
    conn = Connection()
    *head, last = byte_by_byte(sample.wire)
    assert feed(conn, head) == []
    assert feed(conn, [last]) == [sample.frame]
    assert close(conn) == []


@every_sample
def test_trailing_bytes_stay_buffered_until_they_complete_a_frame(sample: Sample) -> None:
    """F-1: bytes after a frame wait in the buffer and later complete the next frame."""
    conn = Connection()
    conn.receive_data(sample.wire + b"STATUS O")
    assert conn.next_event() == sample.frame
    assert conn.next_event() is NEED_DATA
    assert conn.next_event() is NEED_DATA
    assert conn.in_frame
    conn.receive_data(b"K\nDATA x\n\n")
    assert conn.next_event() == Reply(Status.OK, (("DATA", "x"),))
    assert conn.next_event() is NEED_DATA


@every_sample
def test_sample_with_crlf_line_ends_yields_its_frame(sample: Sample) -> None:
    """F-2: CRLF ends a line as LF does, whole or byte by byte."""
    wire = sample.wire.replace(b"\n", b"\r\n")
    assert run([wire]) == [sample.frame]
    assert run(byte_by_byte(wire)) == [sample.frame]


def test_cr_and_lf_of_one_line_end_may_arrive_in_separate_chunks() -> None:
    """F-2: a CRLF split across receive_data calls is still one line end."""
    assert run([b"STATUS OK\r", b"\nDATA x\r", b"\n\r", b"\n"]) == [
        Reply(Status.OK, (("DATA", "x"),))
    ]


def test_lf_and_crlf_may_mix_within_a_frame() -> None:
    """F-2: each line may end either way."""
    assert run([b"STATUS OK\r\nDATA x\nSCOPE []\r\n\n"]) == [
        Reply(Status.OK, (("DATA", "x"), ("SCOPE", "[]")))
    ]


@every_sample
def test_eof_ends_a_frame_missing_its_blank_line(sample: Sample) -> None:
    """F-6: EOF ends the pending frame when its closing blank line never came."""
    assert run([sample.wire.removesuffix(b"\n")]) == [sample.frame]


@every_sample
def test_eof_ends_a_frame_whose_last_line_has_no_newline(sample: Sample) -> None:
    """F-6: the bytes after the last newline are the pending frame's last line."""
    assert run([sample.wire.removesuffix(b"\n\n")]) == [sample.frame]
    assert run(byte_by_byte(sample.wire.removesuffix(b"\n\n"))) == [sample.frame]


def test_eof_after_a_crlf_line_without_blank_line_ends_the_frame() -> None:
    """F-2, F-6: the last line may end in CRLF before EOF."""
    assert run([b"STATUS FAIL\r\nDATA none\r\n"]) == [Reply(Status.FAIL, (("DATA", "none"),))]


def test_eof_on_an_empty_stream_is_closed_at_once() -> None:
    """F-6: EOF with nothing pending yields no frame."""
    conn = Connection()
    conn.receive_data(b"")
    assert conn.next_event() is CLOSED
    assert conn.next_event() is CLOSED


def test_eof_after_only_blank_lines_yields_no_frame() -> None:
    """F-1, F-6: blank lines are no frame, even at EOF."""
    assert run([b"\n\r\n\n"]) == []


def test_blank_lines_between_frames_are_ignored() -> None:
    """F-1: any number of LF or CRLF blank lines may separate frames."""
    wire = b"\n\r\n" + SAMPLES[0].wire + b"\n\n\r\n\n" + SAMPLES[-1].wire + b"\n\n"
    assert run([wire]) == [SAMPLES[0].frame, SAMPLES[-1].frame]
    assert run(byte_by_byte(wire)) == [SAMPLES[0].frame, SAMPLES[-1].frame]


def test_all_samples_in_one_chunk_yield_all_frames_in_order() -> None:
    """F-1: a stream is a sequence of frames."""
    wire = b"".join(sample.wire for sample in SAMPLES)
    assert run([wire]) == [sample.frame for sample in SAMPLES]


def test_all_samples_byte_by_byte_yield_all_frames_in_order() -> None:
    """F-1: frame boundaries do not depend on chunk boundaries."""
    wire = b"".join(sample.wire for sample in SAMPLES)
    assert run(byte_by_byte(wire)) == [sample.frame for sample in SAMPLES]


def test_next_event_before_any_data_needs_data() -> None:
    conn = Connection()
    assert conn.next_event() is NEED_DATA
    assert not conn.in_frame


def test_closed_stays_closed() -> None:
    conn = Connection()
    conn.receive_data(SAMPLES[0].wire)
    conn.receive_data(b"")
    assert drain(conn) == ([SAMPLES[0].frame], CLOSED)
    assert conn.next_event() is CLOSED


@pytest.mark.parametrize("data", [b"", b"STATUS OK\n\n"])
def test_receive_data_after_eof_is_a_runtime_error(data: bytes) -> None:
    conn = Connection()
    conn.receive_data(b"")
    with pytest.raises(RuntimeError):
        conn.receive_data(data)


def test_in_frame_is_true_from_the_first_byte_to_the_closing_blank_line() -> None:
    """F-1: a frame has started once any of its bytes arrived and ends at its blank line."""
    conn = Connection()
    assert not conn.in_frame
    conn.receive_data(b"STAT")
    assert conn.next_event() is NEED_DATA
    assert conn.in_frame
    conn.receive_data(b"US OK\n")
    assert conn.next_event() is NEED_DATA
    assert conn.in_frame
    conn.receive_data(b"DATA x\n")
    assert conn.next_event() is NEED_DATA
    assert conn.in_frame
    conn.receive_data(b"\n")
    assert conn.next_event() == Reply(Status.OK, (("DATA", "x"),))
    assert not conn.in_frame
    assert conn.next_event() is NEED_DATA
    assert not conn.in_frame


def test_in_frame_is_false_after_blank_lines_between_frames() -> None:
    """F-1: blank lines between frames do not start a frame."""
    conn = Connection()
    conn.receive_data(b"\n\r\n\n")
    assert conn.next_event() is NEED_DATA
    assert not conn.in_frame


def test_in_frame_is_false_after_a_malformed_frame_is_skipped() -> None:
    """R-6: once the bad frame's blank line is read, no frame is in progress."""
    conn = Connection()
    conn.receive_data(b"HELLO\n\n")
    assert drain(conn)[1] is NEED_DATA
    assert not conn.in_frame


@every_sample
def test_send_writes_what_serialize_writes(sample: Sample) -> None:
    """V-6: Connection.send is the serializer."""
    assert Connection().send(sample.frame) == sample.wire


def test_frames_read_ahead_wait_their_turn_and_a_full_lookahead_parses_no_more() -> None:
    """F-1, R-6: ``read_ahead`` parses at most ``most`` frames, an error raised in its turn;
    while any waits, another ``read_ahead`` parses nothing (the rest stays buffered)."""
    conn = Connection()
    ping = b"TASK REQ:ping IN:SYS OUT:PONG\n"
    conn.receive_data(ping + b"ID a\n\nBOGUS\n\n" + ping + b"ID b\n\n" + ping + b"ID c\n\n")
    conn.read_ahead(3)
    assert conn.next_event() == Task("ping", "SYS", "PONG", None, (("ID", "a"),))
    conn.read_ahead(3)  # two still wait: nothing more is parsed
    with pytest.raises(ProtocolError) as error:
        conn.next_event()
    assert error.value.code is ErrorCode.BAD_HEADER
    assert conn.next_event() == Task("ping", "SYS", "PONG", None, (("ID", "b"),))
    assert conn.next_event() == Task("ping", "SYS", "PONG", None, (("ID", "c"),))
    assert conn.next_event() is NEED_DATA
    conn.receive_data(b"")
    conn.read_ahead(3)
    assert conn.next_event() is CLOSED
