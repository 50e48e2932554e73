"""Writing frames as bytes (SPEC V-3, V-4, V-6): what this writes, the parser reads back equal."""

from __future__ import annotations

from dataclasses import dataclass

from ._frames import Frame, Task
from ._limits import Limits
from ._values import FREE_TEXT_KEYS, encode_value


def serialize(frame: Frame, *, quote_keys: frozenset[str] = FREE_TEXT_KEYS) -> bytes:
    """The LF-terminated bytes of ``frame``, ending with the blank line.

    Values under ``quote_keys`` are always written as JSON strings; others only when they
    would not survive raw. Raises ValueError for a value with a lone surrogate.
    """
    lines = [_header(frame)]
    lines.extend(
        f"{key} {encode_value(value, quote=key in quote_keys)}" for key, value in frame.fields
    )
    lines.append("\n")
    return "\n".join(lines).encode("utf-8")


def _header(frame: Frame) -> str:
    if isinstance(frame, Task):
        inline = "" if frame.inline is None else " " + encode_value(frame.inline)
        return f"TASK REQ:{frame.req}{inline} IN:{frame.domain} OUT:{frame.out}"
    return f"STATUS {frame.status}"


@dataclass(frozen=True, slots=True)
class Oversize:
    """Why a parser with given limits would refuse a frame as ``frame_too_large``.

    ``detail`` is the parser's own (``line over 262144 bytes``); ``key`` is the field whose
    line is too long (None when the header line is, or the frame or its field count);
    ``size`` is that line's bytes, the frame's, or its field count.
    """

    detail: str
    key: str | None
    size: int


def oversize(frame: Frame, limits: Limits) -> Oversize | None:
    """What ``Connection(limits)`` would refuse the bytes of ``frame`` for (SPEC L-1 to L-3),
    checked in the parser's order; None when they fit. A sender checks this before sending a
    frame whose values it does not control, rather than spend the peer's malformed-frame
    budget (L-6). Raises ValueError for a value with a lone surrogate, as ``serialize``."""
    lines = serialize(frame).split(b"\n")[:-2]  # the blank line's two empty pieces
    keys: list[str | None] = [None, *(key for key, _ in frame.fields)]
    total = 0
    for held, (line, key) in enumerate(zip(lines, keys, strict=True)):
        if len(line) > limits.max_line_bytes:
            return Oversize(f"line over {limits.max_line_bytes} bytes", key, len(line))
        total += len(line) + 1
        if total > limits.max_frame_bytes:
            return Oversize(f"frame over {limits.max_frame_bytes} bytes", None, total)
        if held > limits.max_fields:
            return Oversize(f"more than {limits.max_fields} fields", None, len(frame.fields))
    return None
