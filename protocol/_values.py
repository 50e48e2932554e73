"""Value encoding (SPEC V-1 to V-5): raw to the end of the line, or one JSON string literal."""

from __future__ import annotations

import json
import re

from ._errors import ProtocolError
from .codes import ErrorCode

# C0 controls but TAB, DEL and the C1 controls may not stand raw on a line (SPEC F-5).
_FORBIDDEN_RAW = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
# The same, save LF: for a frame's lines joined by LF, to scan them all at once.
_FORBIDDEN_RAW_BUT_LF = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# What json.dumps(ensure_ascii=False) leaves raw but a CSP/1 line may not hold.
_ESCAPE_AFTER_JSON = re.compile(r"[\x7f-\x9f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_scanstring = json.decoder.scanstring  # type: ignore[attr-defined]

# Free text that the seeds always show quoted, so its spacing is never in doubt (SPEC V-4).
FREE_TEXT_KEYS = frozenset(
    {
        "TITLE",
        "QUERY",
        "COMMAND",
        "STDOUT_SUMMARY",
        "STDERR_SUMMARY",
        "TASK_DESCRIPTION",
        "QUESTION",
        "NOTE",
        "SCHEDULE",
        "SUMMARY",
        "DESCRIPTION",
        "TEXT",
        "BULLET",
        "VALUE",
    }
)


def has_forbidden_raw(text: str) -> bool:
    """Whether ``text`` holds a character that may not stand raw on a line."""
    return _FORBIDDEN_RAW.search(text) is not None


def has_forbidden_raw_in_lines(text: str) -> bool:
    """Whether one of the LF-joined lines of ``text`` holds a character ``has_forbidden_raw``
    refuses."""
    return _FORBIDDEN_RAW_BUT_LF.search(text) is not None


def decode_value(raw: str) -> str:
    """The value a field line's text stands for; a leading quote makes it a JSON string.

    Raises ProtocolError(bad_value) for a quoted value that is not exactly one JSON string
    literal, or that decodes to a lone surrogate (which no UTF-8 peer could read back).
    """
    if not raw.startswith('"'):
        return raw
    try:
        text, end = _scanstring(raw, 1, True)
    except ValueError as exc:
        raise ProtocolError(ErrorCode.BAD_VALUE, "quoted value is not a JSON string") from exc
    if end != len(raw):
        raise ProtocolError(ErrorCode.BAD_VALUE, "text after the closing quote")
    if _SURROGATE.search(text):
        raise ProtocolError(ErrorCode.BAD_VALUE, "lone surrogate in quoted value")
    return str(text)


def needs_quoting(value: str) -> bool:
    """Whether ``value`` would not survive raw: empty, edge spaces, controls, leading quote."""
    return (
        not value
        or value[0] in '" \t'
        or value[-1] in " \t"
        or _FORBIDDEN_RAW.search(value) is not None
        or "\t" in value
    )


def encode_value(value: str, *, quote: bool = False) -> str:
    """The text that stands for ``value`` on a line; quoted when asked or when needed.

    Raises ValueError for a lone surrogate, which has no UTF-8 encoding.
    """
    if not (quote or needs_quoting(value)):
        return value
    if _SURROGATE.search(value):
        raise ValueError("value holds a lone surrogate")
    text = json.dumps(value, ensure_ascii=False)
    return _ESCAPE_AFTER_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
