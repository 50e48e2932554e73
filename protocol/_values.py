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
_C1_UTF8 = re.compile(rb"\xc2[\x80-\x9f]")  # a C1 control in UTF-8 (0xc2 is never a tail byte)
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


# ASCII text (``str.isascii`` reads a flag: O(1)) is checked with ``str.isprintable``, whose
# non-printable ASCII characters are exactly the C0 controls and DEL: a C loop at about 1 ns a
# character, where the regexes' character classes take 6 (issue 26, ``python -m timeit`` on a
# 2,655-character page view: 0.4 against 16 us). Other text keeps the regexes.


def has_forbidden_raw(text: str) -> bool:
    """Whether ``text`` holds a character that may not stand raw on a line."""
    if text.isascii():
        return not text.replace("\t", "").isprintable()
    return _FORBIDDEN_RAW.search(text) is not None


def has_forbidden_raw_in_lines(text: str) -> bool:
    """Whether one of the LF-joined lines of ``text`` holds a character ``has_forbidden_raw``
    refuses."""
    if text.isascii():
        return not text.replace("\t", "").replace("\n", "").isprintable()
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
        or "\t" in value
        or has_forbidden_raw(value)
    )


def encode_value(value: str, *, quote: bool = False) -> str:
    """The text that stands for ``value`` on a line; quoted when asked or when needed.

    Raises ValueError for a lone surrogate, which has no UTF-8 encoding.
    """
    if not (quote or needs_quoting(value)):
        return value
    text = json.dumps(value, ensure_ascii=False)
    if text.isascii():  # no surrogate, no C1 control: DEL alone is left to escape (O(1) test)
        return text.replace("\x7f", "\\u007f")
    # Other text is looked at as UTF-8, whose strict encoder refuses a lone surrogate and
    # where a C1 control has a literal lead byte: 6.5 us on a 2,655-character page view
    # against 33 us for the two character-class regexes over the text (issue 26).
    try:
        encoded = text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("value holds a lone surrogate") from None
    if b"\x7f" not in encoded and _C1_UTF8.search(encoded) is None:
        return text
    return _ESCAPE_AFTER_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
