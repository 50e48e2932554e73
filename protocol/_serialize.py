"""Writing frames as bytes (SPEC V-3, V-4, V-6): what this writes, the parser reads back equal."""

from __future__ import annotations

from ._frames import Frame, Task
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
