"""Parsing one complete frame's lines into a Task or Reply (SPEC F-1 to F-8)."""

from __future__ import annotations

from ._errors import ProtocolError
from ._frames import KEY, KIND, KNOWN_KEYS, OP_NAME, Field, Frame, Reply, Status, Task, remember_key
from ._values import decode_value, has_forbidden_raw, has_forbidden_raw_in_lines
from .codes import ErrorCode

_TASK_PREFIX = "TASK REQ:"
_STATUS_PREFIX = "STATUS "


def parse_frame(lines: list[bytes]) -> Frame:
    """Turn a frame's raw lines (terminators removed, at least one) into a frame.

    Raises ProtocolError carrying the frame's ID when that line could be read.
    """
    return parse_block(b"\n".join(lines))


def parse_block(block: bytes) -> Frame:
    """``parse_frame`` of the lines ``block`` holds, joined by LF: a frame as it stands in
    the buffer when it has no CR, parsed with no split and join of its lines."""
    try:
        texts = _decode_lines(block)
        fields = tuple([_parse_field(text) for text in texts[1:]])
    except ProtocolError as exc:
        exc.frame_id = salvage_id(block.split(b"\n"))
        raise
    try:
        return _parse_header(texts[0], fields)
    except ProtocolError as exc:
        exc.frame_id = _find(fields, "ID")
        raise


def _decode_lines(block: bytes) -> list[str]:
    # One decode and one scan for the whole frame; when either finds a fault, the line-by-line
    # path below reports it (the byte offset is the line's own, as always).
    try:
        text = block.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or has_forbidden_raw_in_lines(text):
        return [_decode_line(line) for line in block.split(b"\n")]
    return text.split("\n")


def _decode_line(line: bytes) -> str:
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(ErrorCode.BAD_ENCODING, f"invalid UTF-8 at byte {exc.start}") from exc
    if has_forbidden_raw(text):
        raise ProtocolError(ErrorCode.BAD_ENCODING, "control character in line")
    return text


def _parse_field(text: str) -> Field:
    key, sep, raw = text.partition(" ")
    if key not in KNOWN_KEYS:
        if not KEY.fullmatch(key):
            raise ProtocolError(ErrorCode.BAD_FRAME, "field key must match [A-Z][A-Z0-9_]*")
        remember_key(key)
    if not sep:
        return key, ""
    return key, raw if raw[:1] != '"' else decode_value(raw)


def _parse_header(text: str, fields: tuple[Field, ...]) -> Frame:
    if text.startswith(_TASK_PREFIX):
        return _parse_task_header(text[len(_TASK_PREFIX) :], fields)
    if text.startswith(_STATUS_PREFIX):
        status = text[len(_STATUS_PREFIX) :]
        if status not in Status.__members__:
            raise ProtocolError(ErrorCode.BAD_HEADER, "STATUS must be OK, PARTIAL or FAIL")
        return Reply(Status(status), fields)
    raise ProtocolError(ErrorCode.BAD_HEADER, "frame must start with TASK or STATUS")


# Headers parsed before, by their text after "TASK REQ:": a daemon sees the same few over and
# over (every ping's is "ping IN:SYS OUT:PONG"). Only valid ones are kept, so a bad header
# is checked (and refused) every time; the table is bounded by clearing it when full.
_HEADERS: dict[str, tuple[str, str, str, str | None]] = {}
MAX_REMEMBERED_HEADERS = 512


def _parse_task_header(rest: str, fields: tuple[Field, ...]) -> Task:
    header = _HEADERS.get(rest)
    if header is None:
        header = _task_header(rest)
        if len(_HEADERS) >= MAX_REMEMBERED_HEADERS:
            _HEADERS.clear()
        _HEADERS[rest] = header
    return Task(*header, fields)


def _task_header(rest: str) -> tuple[str, str, str, str | None]:
    """(REQ, IN, OUT, inline text) of a TASK header after "TASK REQ:"."""
    # Split from the right so inline text may itself contain " IN:" or " OUT:" (SPEC F-3).
    body, sep_out, out = rest.rpartition(" OUT:")
    body, sep_in, domain = body.rpartition(" IN:")
    if not (sep_out and sep_in):
        raise ProtocolError(ErrorCode.BAD_HEADER, "TASK header needs REQ:, IN: and OUT:")
    req, sep_inline, inline = body.partition(" ")
    if not OP_NAME.fullmatch(req):
        raise ProtocolError(ErrorCode.BAD_HEADER, "REQ must match [a-z][a-z0-9_.-]*")
    if not (KIND.fullmatch(domain) and KIND.fullmatch(out)):
        raise ProtocolError(ErrorCode.BAD_HEADER, "IN and OUT must match [A-Z][A-Z0-9_]*")
    return req, domain, out, decode_value(inline) if sep_inline else None


def _find(fields: tuple[Field, ...], key: str) -> str | None:
    return next((value for name, value in fields if name == key), None)


def salvage_id(lines: list[bytes]) -> str | None:
    """The raw ID of a frame that failed to parse, if a plain ``ID`` field line holds one."""
    for line in lines[1:]:
        if line.startswith(b"ID "):
            try:
                text = line[3:].decode("utf-8")
                return None if has_forbidden_raw(text) else decode_value(text)
            except (UnicodeDecodeError, ProtocolError):
                return None
    return None
