"""Properties of the codec over generated frames and byte streams (after hpack's
test_encode_decode.py): round trips under any chunking, and no exception but ProtocolError.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import re
import warnings

import pytest
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from protocol import (
    CLOSED,
    FREE_TEXT_KEYS,
    NEED_DATA,
    Connection,
    ErrorCode,
    Frame,
    Limits,
    ProtocolError,
    Reply,
    Status,
    Task,
    serialize,
)
from protocol._values import (
    encode_value,
    has_forbidden_raw,
    has_forbidden_raw_in_lines,
    needs_quoting,
)

from .helpers import Failed, byte_by_byte, run
from .strategies import (
    chunkings,
    frames,
    keys,
    mutated_streams,
    streams,
    values,
    written_frames,
)

# On a failure Hypothesis imports libcst to print the falsifying example as a patch, and
# libcst's import warns (mypy_extensions.TypedDict is deprecated); with filterwarnings=error
# that turns a failing property into a pytest INTERNALERROR. Import it once here, quietly.
with warnings.catch_warnings(), contextlib.suppress(ImportError):
    warnings.simplefilter("ignore", DeprecationWarning)
    importlib.import_module("libcst")

# Deterministic and quick: fixed seed, no example database written into the work tree.
# Phase.explain is left out: after a failure it replays many variants and costs seconds.
QUICK = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    database=None,
    phases=(Phase.explicit, Phase.generate, Phase.shrink),
)

# The five codes a malformed frame may cause (SPEC R-5).
FRAME_CODES = {
    ErrorCode.BAD_FRAME,
    ErrorCode.BAD_HEADER,
    ErrorCode.BAD_ENCODING,
    ErrorCode.BAD_VALUE,
    ErrorCode.FRAME_TOO_LARGE,
}
TIGHT = Limits(max_line_bytes=24, max_frame_bytes=60, max_fields=3)
_FORBIDDEN = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def assert_only_frames_and_protocol_errors(outcomes: list[Frame | Failed]) -> None:
    for outcome in outcomes:
        if isinstance(outcome, Failed):
            assert outcome.code in FRAME_CODES
        else:
            assert isinstance(outcome, Task | Reply)


@QUICK
@given(st.lists(frames(), min_size=1, max_size=3), st.data())
def test_serialized_frames_parse_back_equal_under_any_chunking(
    sent: list[Frame], data: st.DataObject
) -> None:
    """V-6, F-1, F-3, V-3: whatever the serializer writes, the parser reads back equal."""
    wire = b"".join(serialize(frame) for frame in sent)
    assert run(data.draw(chunkings(wire))) == sent


@QUICK
@given(frames(), st.data())
def test_serialized_frame_with_crlf_line_ends_parses_back_equal(
    frame: Frame, data: st.DataObject
) -> None:
    """V-6, F-2: a written frame never holds a raw LF in a value, so CRLF may replace LF."""
    wire = serialize(frame).replace(b"\n", b"\r\n")
    assert run(data.draw(chunkings(wire))) == [frame]


@QUICK
@given(frames())
def test_serialized_frame_cut_by_eof_before_its_blank_line_parses_back_equal(
    frame: Frame,
) -> None:
    """V-6, F-6: EOF ends the pending frame."""
    assert run([serialize(frame).removesuffix(b"\n\n")]) == [frame]


@QUICK
@given(frames())
def test_serializer_writes_only_lines_that_obey_the_line_rules(frame: Frame) -> None:
    """V-3, V-4, F-5: strict UTF-8, no raw control but none at all, free text always quoted."""
    wire = serialize(frame)
    assert wire.endswith(b"\n\n")
    lines = wire[:-2].split(b"\n")
    assert len(lines) == 1 + len(frame.fields)
    for line in lines:
        assert not _FORBIDDEN.search(line.decode("utf-8"))
    for (key, _), line in zip(frame.fields, lines[1:], strict=True):
        assert line.startswith(key.encode() + b" ")
        if key in FREE_TEXT_KEYS:
            assert line[len(key) + 1 :].startswith(b'"')


@QUICK
@given(keys.filter(lambda key: key not in FREE_TEXT_KEYS), values)
def test_serializer_quotes_a_value_exactly_when_it_would_not_survive_raw(
    key: str, value: str
) -> None:
    """V-1, V-3: empty, edge space or TAB, any control, or a leading quote force quoting."""
    survives_raw = (
        value != ""
        and value[0] not in '" \t'
        and value[-1] not in " \t"
        and "\t" not in value
        and not _FORBIDDEN.search(value)
    )
    [_, line] = serialize(Reply(Status.OK, ((key, value),))).split(b"\n")[:2]
    if survives_raw:
        assert line == f"{key} {value}".encode()
    else:
        assert line.startswith(f'{key} "'.encode())


@QUICK
@given(streams, st.data())
def test_arbitrary_bytes_parse_or_raise_protocol_error_and_nothing_else(
    stream: bytes, data: st.DataObject
) -> None:
    """R-5, R-6, F-5: only frames or ProtocolErrors; NEED_DATA after each chunk, CLOSED at EOF."""
    assert_only_frames_and_protocol_errors(run(data.draw(chunkings(stream))))


@QUICK
@given(streams, st.data())
def test_arbitrary_bytes_under_tight_limits_parse_or_raise_protocol_error(
    stream: bytes, data: st.DataObject
) -> None:
    """L-1, L-2, L-3, R-6: the limit paths raise nothing but ProtocolError either."""
    assert_only_frames_and_protocol_errors(run(data.draw(chunkings(stream)), limits=TIGHT))


@QUICK
@given(written_frames(), st.data())
def test_frames_the_parser_accepts_are_written_back_equal(wire: bytes, data: st.DataObject) -> None:
    """V-6, F-2, F-4: parse, serialize and parse again gives the same frame."""
    outcomes = run(data.draw(chunkings(wire)))
    assert outcomes == run([wire])
    assert_only_frames_and_protocol_errors(outcomes)
    for outcome in outcomes:
        if not isinstance(outcome, Failed):
            assert run([serialize(outcome)]) == [outcome]


@QUICK
@given(st.lists(streams | written_frames(), max_size=4).map(b"".join), st.data())
def test_outcomes_do_not_depend_on_chunking(stream: bytes, data: st.DataObject) -> None:
    """F-1, F-2, R-6: the same bytes give the same frames and errors however they are cut."""
    assert run(data.draw(chunkings(stream))) == run([stream])


@QUICK
@given(st.lists(streams | written_frames(), max_size=4).map(b"".join))
def test_outcomes_under_tight_limits_do_not_depend_on_chunking(stream: bytes) -> None:
    """L-1, L-2, L-3, R-6: a limit is passed or not whatever the chunk boundaries."""
    assert run(byte_by_byte(stream), limits=TIGHT) == run([stream], limits=TIGHT)


# Every budget small, the blank-line one included, so short streams cross each of them.
TIGHTEST = Limits(max_line_bytes=32, max_frame_bytes=80, max_fields=3, max_blank_lines=3)


@QUICK
@given(mutated_streams(), st.data())
def test_mutated_frames_give_the_same_events_whole_in_chunks_and_byte_by_byte(
    stream: bytes, data: st.DataObject
) -> None:
    """L-1 to L-3, L-8, R-6: no limit's verdict depends on where the chunks were cut."""
    once = run([stream], limits=TIGHTEST)
    assert run(data.draw(chunkings(stream)), limits=TIGHTEST) == once
    assert run(byte_by_byte(stream), limits=TIGHTEST) == once


def run_ahead(chunks: list[bytes], most: int, limits: Limits) -> list[Failed | Frame]:
    """``run``, with ``read_ahead(most)`` before every ``next_event``, EOF included."""
    conn = Connection(limits)
    outcomes: list[Failed | Frame] = []
    for chunk in [*chunks, b""]:
        conn.receive_data(chunk)
        while True:
            conn.read_ahead(most)
            try:
                event = conn.next_event()
            except ProtocolError as exc:
                outcomes.append(Failed(exc.code, exc.frame_id))
                continue
            if event is NEED_DATA or event is CLOSED:
                break
            assert isinstance(event, Task | Reply)
            outcomes.append(event)
    return outcomes


@QUICK
@given(mutated_streams(), st.data(), st.integers(1, 5))
def test_frames_read_ahead_come_out_as_read_one_by_one(
    stream: bytes, data: st.DataObject, most: int
) -> None:
    """R-6, L-1 to L-8: parsing ahead changes neither the events, their order, the errors
    raised in their turn, nor where the stream ends, however it was cut."""
    chunks = [chunk for chunk in data.draw(chunkings(stream)) if chunk]
    assert run_ahead(chunks, most, TIGHTEST) == run([stream], limits=TIGHTEST)


# Any text, ASCII alone (the checks' fast path) and with controls, C1 and lone surrogates.
_any_text = st.text(st.characters(max_codepoint=0x7F)) | st.text(
    st.characters(max_codepoint=0x10FFFF, blacklist_categories=())
)
_ESCAPE_AFTER_JSON = re.compile(r"[\x7f-\x9f]")


@QUICK
@given(_any_text)
@example("tab\there\nline\x7f")
@example("\u00e9\x9f\t")
def test_raw_checks_agree_with_the_line_rule_on_any_text(text: str) -> None:
    """F-5: the checks' ASCII path (``isprintable``) refuses exactly what the rule's regex
    does, on a line and on LF-joined lines."""
    assert has_forbidden_raw(text) == bool(_FORBIDDEN.search(text))
    in_lines = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
    assert has_forbidden_raw_in_lines(text) == bool(in_lines.search(text))


@QUICK
@given(_any_text, st.booleans())
@example("a\x7fb", True)
@example("caf\u00e9 \x85 \u2014\x7f", False)
@example("\u00e9\ud800", True)
@example("\u00a0\u00bf\u0100", True)
def test_a_quoted_value_is_its_json_with_del_and_c1_escaped_or_a_surrogate_error(
    text: str, quote: bool
) -> None:
    """V-2, V-3: a quoted value is ``json.dumps`` (non-ASCII kept) with DEL and the C1
    controls escaped as \\u00XX; a lone surrogate raises ValueError."""
    if not (quote or needs_quoting(text)):
        assert encode_value(text, quote=quote) == text
        return
    if re.search(r"[\ud800-\udfff]", text):
        with pytest.raises(ValueError, match="surrogate"):
            encode_value(text, quote=quote)
        return
    escape = _ESCAPE_AFTER_JSON.sub
    expected = escape(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(text, ensure_ascii=False))
    assert encode_value(text, quote=quote) == expected
