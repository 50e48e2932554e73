"""Hypothesis strategies for CSP/1 frames and byte streams (after attrs' tests/strategies.py)."""

from __future__ import annotations

import itertools
import json
import operator
import string
from typing import Literal

from hypothesis import strategies as st

from protocol import FREE_TEXT_KEYS, Field, Frame, Reply, Status, Task, serialize

# Characters that stress the value encoding: the quote, escapes, spaces, TAB, line ends, C0,
# DEL, C1, the first non-C1 Latin-1 character, line separators and an astral character.
_TRICKY = ' "\\\t\n\r\x00\x01\x1b\x1f\x7f\x80\x85\x9f\xa0\u2028\u2029\u2192\ufeff\U0001f600aZ:'
_SURROGATES: list[Literal["Cs"]] = ["Cs"]
_NO_SURROGATES = st.characters(exclude_categories=_SURROGATES)
_UPPER = string.ascii_uppercase
_LOWER = string.ascii_lowercase


def _names(first: str, rest: str, max_size: int) -> st.SearchStrategy[str]:
    """``[first][rest]{0,max_size}``, built directly (cheaper than from_regex)."""
    return st.builds(
        operator.add, st.sampled_from(first), st.text(st.sampled_from(rest), max_size=max_size)
    )


keys: st.SearchStrategy[str] = st.one_of(
    st.sampled_from(sorted(FREE_TEXT_KEYS | {"ID", "DATA", "SCOPE", "SNIPPET", "ERROR", "PARAMS"})),
    _names(_UPPER, _UPPER + string.digits + "_", 11),
)
op_names: st.SearchStrategy[str] = _names(_LOWER, _LOWER + string.digits + "_.-", 11)
kinds: st.SearchStrategy[str] = st.one_of(
    st.sampled_from(["WEB", "SHELL", "TOOL", "SYS", "MEMORY", "IN", "OUT"]),
    _names(_UPPER, _UPPER + string.digits + "_", 9),
)
values: st.SearchStrategy[str] = st.one_of(
    st.text(_NO_SURROGATES, max_size=40),
    st.text(st.sampled_from(_TRICKY), max_size=12),
    st.sampled_from(["", " ", '"', '""', "IN:X", " IN:A OUT:B", 'a" b', "\\u0041", "\\"]),
    st.builds(
        lambda a, b, c: f"{a} IN:{b} OUT:{c}", st.text(max_size=5, alphabet=_TRICKY), kinds, kinds
    ),
)
fields: st.SearchStrategy[tuple[Field, ...]] = st.lists(st.tuples(keys, values), max_size=6).map(
    tuple
)


def tasks() -> st.SearchStrategy[Task]:
    return st.builds(Task, op_names, kinds, kinds, st.none() | values, fields)


def replies() -> st.SearchStrategy[Reply]:
    return st.builds(Reply, st.sampled_from(Status), fields)


def frames() -> st.SearchStrategy[Frame]:
    return st.one_of(tasks(), replies())


@st.composite
def chunkings(draw: st.DrawFn, data: bytes) -> list[bytes]:
    """``data`` cut at any set of offsets, from one chunk to one byte each."""
    if len(data) < 2:
        return [data] if data else []
    if draw(st.booleans()):
        points = draw(st.lists(st.integers(1, len(data) - 1), max_size=24))
    else:
        points = list(range(0, len(data), draw(st.integers(1, 8))))
    cuts = sorted({0, len(data), *points})
    return [data[a:b] for a, b in itertools.pairwise(cuts)]


# Pieces from which near-valid streams are assembled, so arbitrary input reaches deep branches.
_FRAGMENTS = [
    b"TASK REQ:",
    b"TASK REQ:search",
    b" IN:",
    b" OUT:",
    b"WEB",
    b"URL_REFS",
    b"STATUS ",
    b"STATUS OK",
    b"PARTIAL",
    b"FAIL",
    b"\n",
    b"\r\n",
    b"\n\n",
    b"\r",
    b" ",
    b"\t",
    b"ID ",
    b"ID t-1",
    b"DATA ",
    b"KEY",
    b"key",
    b'"',
    b"\\",
    b"\\u",
    b"\\ud800",
    b"d83d",
    b"\\n",
    b"x",
    b"\x00",
    b"\x7f",
    "\u0085".encode(),
    "\u2192".encode(),
    b"\xff",
    b"\xc3",
    b"\xed\xa0\x80",
]

streams: st.SearchStrategy[bytes] = st.one_of(
    st.binary(max_size=200),
    st.lists(st.sampled_from(_FRAGMENTS) | st.binary(max_size=3), max_size=40).map(b"".join),
)

_LINE_TEXT = st.text(
    st.characters(exclude_categories=_SURROGATES, exclude_characters="\n"), max_size=30
)
_FIELD_VALUE_TEXT = st.one_of(
    _LINE_TEXT,
    values.map(json.dumps),
    values.map(lambda value: json.dumps(value, ensure_ascii=False)),
)


@st.composite
def written_frames(draw: st.DrawFn) -> bytes:
    """Frames as a peer might type them: mostly valid, sometimes not, LF or CRLF."""
    inline = draw(st.none() | _FIELD_VALUE_TEXT)
    task_header = f"TASK REQ:{draw(op_names)}{'' if inline is None else ' ' + inline}"
    task_header += f" IN:{draw(kinds)} OUT:{draw(kinds)}"
    header = draw(st.sampled_from([task_header, f"STATUS {draw(st.sampled_from(Status))}"]))
    lines = [header]
    for _ in range(draw(st.integers(0, 5))):
        key = draw(keys)
        lines.append(key if draw(st.booleans()) else f"{key} {draw(_FIELD_VALUE_TEXT)}")
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    return "".join(line + eol for line in lines).encode() + eol.encode()


# Pieces that put a stream next to every limit of ``Limits(32, 80, 3, 3)``: runs of empty
# lines around the blank-line budget, lines around the line budget, and whole frames.
_BLANKS = st.builds(operator.mul, st.sampled_from([b"\n", b"\r\n"]), st.integers(1, 6))
_LONG = st.builds(operator.mul, st.sampled_from([b"A", b"\xc3\xa9", b" "]), st.integers(14, 90))
_LIMIT_PIECES: st.SearchStrategy[bytes] = st.one_of(
    _BLANKS,
    _LONG,
    # A line between two blank runs: both runs count toward L-8 only if the line is empty.
    st.builds(lambda before, line, after: before + line + after, _BLANKS, _LONG, _BLANKS),
    st.sampled_from([b"TASK REQ:ping IN:SYS OUT:SYS\n\n", b"ID t-1\n", b"\n", b"\r"]),
)


@st.composite
def mutated_streams(draw: st.DrawFn) -> bytes:
    """Frames and limit-probing pieces, joined, then cut, duplicated or spliced at random."""
    # Mostly limit pieces, so runs of them (blanks, a long line, blanks) are common.
    frame = written_frames() | frames().map(serialize)
    pieces = draw(st.lists(st.one_of(*[_LIMIT_PIECES] * 5, frame), max_size=10))
    stream = b"".join(pieces)
    for _ in range(draw(st.integers(0, 3))):
        if not stream:
            break
        start = draw(st.integers(0, len(stream)))
        end = draw(st.integers(start, min(len(stream), start + 40)))
        # Drop the slice, repeat it, or put a line end in its place.
        insert = draw(st.sampled_from([b"", stream[start:end] * 2, b"\n", b"\n\n", b"\r"]))
        stream = stream[:start] + insert + stream[end:]
    return stream
