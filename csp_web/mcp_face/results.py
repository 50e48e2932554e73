"""Tool calls as CSP/1 tasks, and CSP/1 replies as tool results (SDK-free).

Arguments are only spelled as fields here; the daemon validates them (SPEC D-3), so a bad
argument gets the same ``invalid_field`` as on the wire. Their size is checked here, though:
a frame the daemon's parser would refuse (``fitting``) is never sent, as each would count
against the malformed-frame budget of the connection every caller of the face shares.
A reply becomes text (what a model reads) plus structured content (the reply's fields).
PARTIAL and FAIL say what is missing: ``isError`` with ``ERROR code:detail`` for FAIL, the
cause a PARTIAL names (R-2) on its first line, the next START for a truncated page, the wait
for a rate limit; never a bare protocol error.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from csp_web.mcp_face.tools import TEXT, ReplyShape, ToolSpec, argument_name
from protocol import ErrorCode, Field, Limits, Reply, Status, Task, oversize

log = logging.getLogger(__name__)

# Fields the text shows elsewhere (DATA, ERROR) or that mean nothing to a model (ID).
_NOT_LISTED = frozenset({"ID", "DATA", "ERROR"})
# Lists in every reply, declared or not (as tools.reply_shape makes them).
_ALWAYS_LISTS = frozenset({"CITE", "SNIPPET"})
_ALWAYS_LIST = ReplyShape(repeat=True)
# ASCII only (int() and float() take other digits, "_" and spaces); 30 digits bound the work.
_INT = re.compile(r"-?[0-9]{1,30}")
_NUMBER = re.compile(r"-?[0-9]{1,30}(\.[0-9]{1,30})?")
# The budgets a daemon reads frames with when its configuration names none (SPEC L-1 to L-3).
DAEMON_LIMITS = Limits()


@dataclass(frozen=True)
class ToolOutcome:
    """A tool result before it becomes the SDK's ``CallToolResult``."""

    text: str
    structured: dict[str, Any]
    is_error: bool


class ArgumentError(Exception):
    """An argument cannot be spelled as a field; carries the catalogue code."""

    def __init__(self, code: ErrorCode, detail: str) -> None:
        super().__init__(f"{code}:{detail}")
        self.code = code
        self.detail = detail


def task_for(
    tool: ToolSpec,
    arguments: Mapping[str, Any] | None,
    *,
    task_id: str | None = None,
    limits: Limits = DAEMON_LIMITS,
) -> Task:
    """The task a call of ``tool`` sends (with ``ID`` ``task_id`` first, when given); raises
    ArgumentError(unknown_field, invalid_field), and ArgumentError(frame_too_large) when
    the daemon, reading with ``limits`` (its ``connection`` budgets: the face's config),
    would refuse the frame's bytes (``fitting``)."""
    fields: list[Field] = [] if task_id is None else [("ID", task_id)]
    for name, value in (arguments or {}).items():
        spec = tool.fields.get(name)
        if spec is None:
            raise ArgumentError(ErrorCode.UNKNOWN_FIELD, name)
        if value is None:
            continue
        values = value if name in tool.lists and isinstance(value, list) else [value]
        fields += [(spec["name"], field_value(spec, one)) for one in values]
    return fitting(Task(tool.req, tool.domain, tool.out, None, tuple(fields)), limits)


def fitting(task: Task, limits: Limits) -> Task:
    """``task``, unless its bytes pass ``limits``: then ArgumentError(frame_too_large) with
    the daemon's own detail and the argument to blame. The face never sends such a frame,
    as the daemon would count it against the one connection every caller of the face
    shares (SPEC L-6: the eleventh closes it)."""
    over = oversize(task, limits)
    if over is None:
        return task
    if over.key is None:
        why = f"{over.size} {'fields' if 'fields' in over.detail else 'bytes'}: send less"
    else:
        why = f"argument {argument_name(over.key)} is {over.size} bytes as a field line"
    raise ArgumentError(ErrorCode.FRAME_TOO_LARGE, f"{over.detail} ({why})")


def field_value(spec: Mapping[str, Any], value: Any) -> str:
    """``value`` as the field's wire text: JSON for a JSON field, ``true``/``false`` for a
    flag, digits for a number. Raises ArgumentError(invalid_field) for a list or object
    where one value is wanted, and for a value no frame can carry (a lone surrogate, which
    has no UTF-8; a number past Python's digit limit; JSON nested past the recursion limit);
    the daemon judges every other mismatch."""
    name = argument_name(spec["name"])
    if isinstance(value, list | dict) and spec.get("type") != "json":
        raise ArgumentError(ErrorCode.INVALID_FIELD, f"{name} takes one value")
    try:
        text = _spelled(spec, value)
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ArgumentError(ErrorCode.INVALID_FIELD, f"{name} holds a lone surrogate") from None
    except ValueError:  # int -> str past sys.get_int_max_str_digits()
        raise ArgumentError(ErrorCode.INVALID_FIELD, f"{name} has too many digits") from None
    except RecursionError:
        raise ArgumentError(ErrorCode.INVALID_FIELD, f"{name} is nested too deeply") from None
    return text


def _spelled(spec: Mapping[str, Any], value: Any) -> str:
    if spec.get("type") == "json":
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def outcome_of(tool: ToolSpec, reply: Reply) -> ToolOutcome:
    """The tool result for ``reply``: FAIL is an error result naming its code."""
    structured = structured_fields(reply, tool.replies)
    lines = []
    if reply.status is Status.FAIL:
        lines.append(f"ERROR {reply.get('ERROR', 'internal_error:no ERROR field')}")
    elif reply.status is Status.PARTIAL and (cause := reply.get("ERROR")) is not None:
        lines.append(f"PARTIAL BECAUSE {cause}")  # SPEC R-2: the cause of what is missing
    data = reply.get("DATA")
    if data and not (reply.status is Status.FAIL and data == "none"):
        lines.append(data)
    listed = [f"{key} {value}" for key, value in reply.fields if key not in _NOT_LISTED]
    if listed:
        lines += ["", *listed]
    lines += missing_notes(tool, reply)
    return ToolOutcome("\n".join(lines), structured, reply.status is Status.FAIL)


def structured_fields(
    reply: Reply, shapes: Mapping[str, ReplyShape] | None = None
) -> dict[str, Any]:
    """``{"STATUS": ..., KEY: value}``, each value typed as ``shapes`` (the op table) says:
    ``WORD_COUNT`` an integer, a field that may repeat a list even when it came once. A key
    the table does not know is a string, a list when it repeats. A value that does not read
    as its type, or a second value of a field declared single, is left out (and logged): the
    text still shows it, and a client that validates against the output schema would refuse
    the whole result for it."""
    shapes = shapes or {}
    out: dict[str, Any] = {"STATUS": str(reply.status)}
    for key, value in reply.fields:
        if key == "ID":
            continue
        shape = shapes.get(key, _ALWAYS_LIST if key in _ALWAYS_LISTS else TEXT)
        typed = typed_value(shape.kind, value)
        if typed is None:
            log.warning(
                "reply field %s is not the %s the op table says: %.40r", key, shape.kind, value
            )
            continue
        if shape.repeat:
            out.setdefault(key, []).append(typed)
        elif key not in out:
            out[key] = typed
        elif key in shapes:  # declared single: a list would fail the schema; the text has all
            log.warning("reply field %s repeats, but the op table says it does not", key)
        else:
            previous = out[key]
            out[key] = [*previous, typed] if isinstance(previous, list) else [previous, typed]
    return out


def typed_value(kind: str, value: str) -> Any:
    """``value`` as ``kind`` reads it (int, number, bool, text); None when it does not."""
    if kind == "int":
        return int(value) if _INT.fullmatch(value) else None
    if kind == "number":
        return float(value) if _NUMBER.fullmatch(value) else None
    if kind == "bool":
        return {"true": True, "false": False}.get(value)
    return value


def missing_notes(tool: ToolSpec, reply: Reply) -> list[str]:
    """What a PARTIAL or FAIL leaves out, said as the next call to make."""
    notes = []
    next_start = reply.get("NEXT_START")
    if next_start is not None:
        remaining = reply.get("REMAINING_CHARS", "some")
        notes.append(
            f"TRUNCATED: {remaining} more characters; call {tool.name} again with "
            f"start={next_start} for the rest."
        )
    retry_after = reply.get("RETRY_AFTER")
    if retry_after is not None:
        notes.append(f"RATE LIMITED: retry after {retry_after} s.")
    if reply.status is Status.PARTIAL and not notes:
        notes.append("PARTIAL: only part of what was asked; the fields above say what is missing.")
    return ["", *notes] if notes else []


def refused(code: ErrorCode, detail: str) -> ToolOutcome:
    """An error result made by the face itself (a bad argument, the daemon unreachable)."""
    error = f"{code}:{detail}"
    structured = {"STATUS": "FAIL", "SCOPE": "mcp", "DATA": "none", "ERROR": error}
    return ToolOutcome(f"ERROR {error}", structured, True)
