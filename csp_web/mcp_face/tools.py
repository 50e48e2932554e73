"""MCP tools from a daemon's op table: names, input schemas and the selection exposed.

The table is what ``REQ:ops IN:SYS OUT:OPS`` returns (``Op.describe``, ``FieldSpec.describe``),
the same source as docs/ops.md, so a tool's schema cannot drift from what the daemon validates.
Nothing here imports the MCP SDK: a tool is a plain ``ToolSpec``.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from protocol import Limits, Reply, Status

# IN:SYS ops (ping, ops, stats) are the daemon's own housekeeping, never tools.
INTERNAL_DOMAINS = frozenset({"SYS"})
# The daemon's line limit when the caller names none (SPEC L-1, connection.max_line_bytes).
DEFAULT_LINE_BYTES = Limits().max_line_bytes
_JSON_TYPES = {"text": "string", "int": "integer", "bool": "boolean", "choice": "string"}
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")  # the MCP spec's tool-name grammar


class ToolTableError(ValueError):
    """The daemon's op table cannot be read; the message says which entry and why."""


# The op table's effects (SPEC D-5) as MCP's tool annotations.
_HINTS = {
    "read_only": "readOnlyHint",
    "destructive": "destructiveHint",
    "idempotent": "idempotentHint",
    "open_world": "openWorldHint",
}
# Reply field types (SPEC D-5) as JSON Schema types; a field without one is text.
_REPLY_TYPES = {"text": "string", "int": "integer", "number": "number", "bool": "boolean"}
_ALWAYS_LISTS = frozenset({"CITE", "SNIPPET"})  # lists whatever the table says
# The frame fields (SPEC D-3) a tool takes as arguments: a budget is the caller's to set; ID
# and TRACEPARENT are the face's own.
TOOL_FRAME_FIELDS = frozenset({"BUDGET", "BUDGET_ID"})


@dataclass(frozen=True)
class ReplyShape:
    """How a reply field reads in structured content: ``kind`` (text, int, number, bool) and
    whether it is a list (``repeat``)."""

    kind: str = "text"
    repeat: bool = False


TEXT = ReplyShape()


@dataclass(frozen=True)
class ToolSpec:
    """One op as an MCP tool: ``name`` (e.g. ``web_fetch``) runs ``TASK REQ:<req> IN:<domain>
    OUT:<out>``; ``fields`` maps each argument name to its CSP/1 field entry, and ``lists``
    names the arguments that take a list (a repeatable field's ``urls``); ``replies`` gives
    each reply field's shape; ``annotations`` MCP's hints, when the op table says them."""

    name: str
    req: str
    domain: str
    out: str
    description: str
    input_schema: dict[str, Any]
    fields: Mapping[str, Mapping[str, Any]]
    output_schema: dict[str, Any] | None = None
    lists: frozenset[str] = frozenset()
    replies: Mapping[str, ReplyShape] = dataclasses.field(default_factory=dict)
    annotations: Mapping[str, bool] | None = None


def tool_name(req: str, domain: str) -> str:
    """``fetch`` IN:WEB is ``web_fetch``."""
    return f"{domain.lower()}_{req}"


def argument_name(field: str) -> str:
    """The argument a field is given as: ``MAX_CHARS`` is ``max_chars``."""
    return field.lower()


def parse_op_table(reply: Reply) -> list[dict[str, Any]]:
    """The entries of a ``REQ:ops`` reply; raises ToolTableError when it is not one."""
    if reply.status is not Status.OK:
        raise ToolTableError(f"REQ:ops answered {reply.status}: {reply.get('ERROR')}")
    entries = []
    for line in reply.get_all("OP"):
        try:
            entry = json.loads(line)
        except ValueError:
            raise ToolTableError(f"an OP line is not JSON: {line[:80]}") from None
        if not isinstance(entry, dict) or not {"req", "in", "out"} <= entry.keys():
            raise ToolTableError(f"an OP line lacks req, in or out: {line[:80]}")
        entries.append(entry)
    return entries


def build_tools(
    entries: Iterable[Mapping[str, Any]],
    *,
    selected: Sequence[str] | None = None,
    exec_configured: bool,
    max_timeout_ms: int,
    max_line_bytes: int = DEFAULT_LINE_BYTES,
) -> list[ToolSpec]:
    """The tools to expose: every op outside IN:SYS, or only those ``selected`` names (an
    unknown name is a ToolTableError); ``shell_exec`` only when ``exec_configured``. Text
    arguments whose ``maxLength`` could pass ``max_line_bytes`` (the daemon's line limit)
    once sent as UTF-8 say so in their description (``property_schema``)."""
    tools = {}
    for entry in entries:
        if entry["in"] in INTERNAL_DOMAINS:
            continue
        if entry["in"] == "SHELL" and not exec_configured:
            continue
        tool = tool_spec(entry, max_timeout_ms=max_timeout_ms, max_line_bytes=max_line_bytes)
        tools[tool.name] = tool
    if selected is None:
        return list(tools.values())
    unknown = [name for name in selected if name not in tools]
    if unknown:
        raise ToolTableError(
            f"no tool named {', '.join(unknown)} (available: {', '.join(tools) or 'none'})"
        )
    return [tools[name] for name in dict.fromkeys(selected)]


def tool_spec(
    entry: Mapping[str, Any], *, max_timeout_ms: int, max_line_bytes: int = DEFAULT_LINE_BYTES
) -> ToolSpec:
    """One op table entry as a tool; every op also takes ``timeout_ms`` (SPEC C-4), and
    ``budget`` and ``budget_id`` when the daemon lists them as frame fields (D-3). Raises
    ToolTableError for an entry this face cannot read (a daemon of another version may
    describe an op with a field type it has no schema for): never a KeyError or TypeError,
    which at a refresh would end the face."""
    try:
        return _tool_spec(entry, max_timeout_ms=max_timeout_ms, max_line_bytes=max_line_bytes)
    except ToolTableError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        what = f"{type(exc).__name__}: {exc}"[:120]
        raise ToolTableError(
            f"op {entry.get('req')} IN:{entry.get('in')} cannot be read ({what})"
        ) from exc


def _tool_spec(entry: Mapping[str, Any], *, max_timeout_ms: int, max_line_bytes: int) -> ToolSpec:
    name = tool_name(entry["req"], entry["in"])
    if not _TOOL_NAME.fullmatch(name):
        raise ToolTableError(f"op {entry['req']} IN:{entry['in']} has no valid tool name")
    fields, lists = arguments(entry.get("fields", []))
    if "timeout_ms" not in fields:
        fields["timeout_ms"] = {
            "name": "TIMEOUT_MS",
            "type": "int",
            "minimum": 1,
            "maximum": max_timeout_ms,
            "doc": "the task's deadline in milliseconds (default: the daemon's)",
        }
    for spec in entry.get("frame_fields", []):
        if spec["name"] in TOOL_FRAME_FIELDS:
            fields.setdefault(argument_name(spec["name"]), spec)
    doc = entry.get("doc", "")
    description = f"{doc[:1].upper()}{doc[1:]}. CSP/1: REQ:{entry['req']} IN:{entry['in']}."
    return ToolSpec(
        name=name,
        req=entry["req"],
        domain=entry["in"],
        out=entry["out"],
        description=description.lstrip(". "),
        input_schema=input_schema(fields, lists, max_line_bytes=max_line_bytes),
        fields=fields,
        output_schema=output_schema(entry.get("replies", [])),
        lists=lists,
        replies={f["name"]: reply_shape(f) for f in entry.get("replies", [])},
        annotations=tool_hints(entry.get("effects")),
    )


def arguments(
    specs: Iterable[Mapping[str, Any]],
) -> tuple[dict[str, Mapping[str, Any]], frozenset[str]]:
    """Each field's argument names and the set of those that take a list. A repeatable field
    is two: one value under its own name (``url``, what a client expects of a fetch) and a
    list under its plural (``urls``); a field already named as a plural (``HEADERS``), or
    whose plural another field holds, is one list argument."""
    fields: dict[str, Mapping[str, Any]] = {argument_name(f["name"]): f for f in specs}
    lists = set()
    for name, spec in list(fields.items()):
        if not spec.get("repeat"):
            continue
        several = plural(name)
        if several is None or several in fields:
            lists.add(name)
            continue
        fields[several] = {**spec, "name": spec["name"], "required": False, "plural_of": name}
        lists.add(several)
    return fields, frozenset(lists)


def plural(name: str) -> str | None:
    """``url``'s list argument is ``urls``, ``query``'s ``queries``; None for a name that
    already ends in s."""
    if name.endswith("s"):
        return None
    if name.endswith("y") and name[-2:-1] not in ("a", "e", "i", "o", "u"):
        return f"{name[:-1]}ies"
    return f"{name}s"


def tool_hints(effects: Any) -> dict[str, bool] | None:
    """The op table's ``effects`` as MCP tool annotations; None when the daemon says none (an
    older daemon), so the client assumes MCP's defaults."""
    if not isinstance(effects, Mapping):
        return None
    return {hint: bool(effects[key]) for key, hint in _HINTS.items() if key in effects}


def input_schema(
    fields: Mapping[str, Mapping[str, Any]],
    lists: frozenset[str],
    *,
    max_line_bytes: int = DEFAULT_LINE_BYTES,
) -> dict[str, Any]:
    """A JSON Schema object with one property per argument; unknown arguments are refused."""
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            name: property_schema(spec, many=name in lists, max_line_bytes=max_line_bytes)
            for name, spec in fields.items()
        },
        "additionalProperties": False,
    }
    required = [name for name, spec in fields.items() if spec.get("required")]
    if required:
        schema["required"] = required
    return schema


def property_schema(
    spec: Mapping[str, Any], *, many: bool, max_line_bytes: int = DEFAULT_LINE_BYTES
) -> dict[str, Any]:
    """One argument's schema: its type, choices, bounds, default and doc; an argument that
    takes a list (``many``) is an array of them, a JSON field an object. ``maxLength``
    counts characters; where that many could pass ``max_line_bytes`` as UTF-8 (4 bytes a
    character at most), the description states the byte limit the wire applies."""
    kind = spec.get("type", "text")
    one: dict[str, Any] = {"type": "object"} if kind == "json" else {"type": _JSON_TYPES[kind]}
    if spec.get("choices"):
        one["enum"] = list(spec["choices"])
    if "minimum" in spec:
        one["minimum"] = spec["minimum"]
    if "maximum" in spec:
        one["maximum"] = spec["maximum"]
    if "max_chars" in spec:
        one["maxLength"] = spec["max_chars"]
    if kind == "text" and spec.get("required"):
        one["minLength"] = 1  # the daemon refuses an empty or blank required text
    schema = {"type": "array", "items": one} if many else one
    if "default" in spec:
        schema["default"] = spec["default"]
    if "plural_of" in spec:
        schema["description"] = (
            f"several {spec['plural_of']} values, sent after {spec['plural_of']}"
        )
    elif spec.get("doc"):
        schema["description"] = spec["doc"]
    if spec.get("max_chars", 0) * 4 > max_line_bytes:
        note = (
            f"at most {max_line_bytes} bytes once sent as UTF-8, name and quoting included "
            "(a character outside ASCII takes 2 to 4); a longer value is refused "
            "frame_too_large whatever maxLength allows"
        )
        doc = schema.get("description")
        schema["description"] = f"{doc}; {note}" if doc else note
    return schema


# What every reply's structured content may hold (SPEC R-1, R-2; results.structured_fields).
_COMMON_OUTPUT = {
    "STATUS": {"type": "string", "enum": ["OK", "PARTIAL", "FAIL"]},
    "SCOPE": {"type": "string", "description": "the sources the reply covers"},
    "DATA": {"type": "string", "description": "the content"},
    "ERROR": {
        "type": "string",
        "description": "FAIL (and a PARTIAL naming its cause): code:detail",
    },
    "BUDGET_LEFT": {
        "type": "string",
        "description": "what is left of the task's budget, in BUDGET's syntax (when budgeted)",
    },
}


def output_schema(replies: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The schema of a tool's structured content: STATUS, SCOPE, DATA, ERROR and the op's
    reply fields from its ``REQ:ops`` entry, each with its doc and when it is sent. Only
    STATUS is required and other keys are allowed, so a client that validates results
    against it (the SDK's does) never rejects a reply the daemon sent."""
    properties: dict[str, Any] = dict(_COMMON_OUTPUT)
    for field in replies:
        properties[field["name"]] = reply_property(field)
    return {"type": "object", "properties": properties, "required": ["STATUS"]}


def reply_shape(field: Mapping[str, Any]) -> ReplyShape:
    """A reply field's shape from its ``REQ:ops`` entry: a type the face does not know is
    read as text, so a newer daemon's table never stops the face."""
    kind = field.get("type", "text")
    repeat = bool(field.get("repeat")) or field["name"] in _ALWAYS_LISTS
    return ReplyShape(kind if kind in _REPLY_TYPES else "text", repeat)


def reply_property(field: Mapping[str, Any]) -> dict[str, Any]:
    """One reply field's schema: its type (a string unless the table types it), an array of
    them when it may repeat (CITE and SNIPPET always are lists)."""
    shape = reply_shape(field)
    one = {"type": _REPLY_TYPES[shape.kind]}
    schema: dict[str, Any] = {"type": "array", "items": one} if shape.repeat else dict(one)
    when = "always" if field.get("always") else f"when: {field.get('when', 'sometimes')}"
    doc = field.get("doc", "")
    schema["description"] = f"{doc} ({when})" if doc else when
    return schema
