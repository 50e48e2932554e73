"""Field schemas that ops declare, and validation of a task's fields against them (SPEC D-3).

Each op lists its fields with a type, bounds and default; ``validate`` turns a task's raw
string values into typed ``Params`` before the handler runs, so handlers never parse input.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from csp_web.core.api.errors import FieldError
from protocol import MAX_TRACEPARENT_CHARS, ErrorCode, Task, parse_budget, parse_traceparent
from protocol._budget import MAX_BUDGET_CHARS

Kind = Literal["text", "int", "bool", "choice", "json"]
ReplyKind = Literal["text", "int", "bool", "number"]

ID_PATTERN = re.compile(r"[A-Za-z0-9._:@/-]{1,128}")  # SPEC C-1
# A BUDGET_ID (SPEC D-3): an ID's characters, at most 64 of them (a Redis key and a SQLite
# primary key stay short; an agent's run id or a UUID fits).
BUDGET_ID_PATTERN = re.compile(r"[A-Za-z0-9._:@/-]{1,64}")
# Arrays and objects nested deeper than this are invalid_field: serde_json's default
# recursion limit, far inside what json.loads survives (it raises RecursionError near 1,000).
MAX_JSON_DEPTH = 128
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_JSON_BRACKET = re.compile(r"[\[\]{}]")
_SURROGATE = re.compile("[\ud800-\udfff]")  # after json.loads, only a lone one is left
_MAX_KEY_CHARS = 64  # of a repeated JSON key quoted in an ERROR line


@dataclass(frozen=True)
class FieldSpec:
    """One field an op takes; ``default`` applies when the field is absent."""

    name: str
    kind: Kind = "text"
    required: bool = False
    default: Any = None
    minimum: int | None = None
    maximum: int | None = None
    max_chars: int | None = None
    choices: tuple[str, ...] = ()
    repeat: bool = False
    doc: str = ""

    def describe(self) -> dict[str, Any]:
        """The JSON-able description ``REQ:ops`` prints."""
        out: dict[str, Any] = {"name": self.name, "type": self.kind}
        for key in ("required", "repeat"):
            if getattr(self, key):
                out[key] = True
        for key in ("default", "minimum", "maximum", "max_chars", "doc"):
            if getattr(self, key) not in (None, ""):
                out[key] = getattr(self, key)
        if self.choices:
            out["choices"] = list(self.choices)
        return out


@dataclass(frozen=True)
class FrameField:
    """A field every frame may carry, whatever its op (SPEC D-3): its description for
    ``REQ:ops`` and ``check``, which raises ValueError naming the rule a value breaks. A
    field with no ``check`` is read where its bound is known (TIMEOUT_MS: the dispatcher,
    against ``tasks.max_timeout_ms``)."""

    spec: FieldSpec
    check: Callable[[str], object] | None = None


def _check_id(value: str) -> None:
    if not ID_PATTERN.fullmatch(value):
        raise ValueError("must be 1-128 of [A-Za-z0-9._:@/-]")


def _check_budget_id(value: str) -> None:
    if not BUDGET_ID_PATTERN.fullmatch(value):
        raise ValueError("must be 1-64 of [A-Za-z0-9._:@/-]")


# The fields every frame may carry (SPEC D-3), checked in this order after the op's own.
FRAME_FIELDS = (
    FrameField(
        FieldSpec("ID", max_chars=128, doc="the correlation token its replies carry (C-1)"),
        _check_id,
    ),
    FrameField(
        FieldSpec(
            "TIMEOUT_MS", "int", minimum=1, doc="the task's deadline, up to tasks.max_timeout_ms"
        )
    ),
    FrameField(
        FieldSpec(
            "TRACEPARENT",
            max_chars=MAX_TRACEPARENT_CHARS,
            doc="W3C trace context: traces the task, passed on only to configured APIs",
        ),
        parse_traceparent,
    ),
    FrameField(
        FieldSpec(
            "BUDGET",
            max_chars=MAX_BUDGET_CHARS,
            doc="what the task and the work it starts may spend: searches:5,fetches:20,bytes:5MB,"
            "llm_tokens:N,exec_cpu_ms:N,browser_actions:N,wall_ms:N (any subset)",
        ),
        parse_budget,
    ),
    FrameField(
        FieldSpec(
            "BUDGET_ID",
            max_chars=64,
            doc="a budget tasks share: made by the first frame naming it with BUDGET, its uid's",
        ),
        _check_budget_id,
    ),
)
UNIVERSAL = frozenset(field.spec.name for field in FRAME_FIELDS)
_CHECKED = tuple((f.spec.name, f.check) for f in FRAME_FIELDS if f.check is not None)


@dataclass(frozen=True)
class ReplyField:
    """A field an op's reply can carry besides STATUS, ID, SCOPE, DATA and ERROR (which every
    reply may carry, SPEC R-1, R-2): its name, when it is sent, and what it means.

    ``kind`` says how its text reads (``int``: ASCII digits with an optional ``-``; ``bool``:
    ``true`` or ``false``; ``number``: a decimal; ``text``: anything), ``repeat`` that a
    reply may carry it more than once (a list). The wire is text either way (SPEC V-1); the
    MCP face gives structured content these types."""

    name: str
    when: str = "always"
    doc: str = ""
    kind: ReplyKind = "text"
    repeat: bool = False

    def describe(self) -> dict[str, Any]:
        """The JSON-able description ``REQ:ops`` prints: ``name``, ``always`` (whether every
        reply carries it), ``when`` (the condition, when not always), ``doc``, ``type`` (when
        not text) and ``repeat`` (when it may repeat)."""
        out: dict[str, Any] = {"name": self.name, "always": self.when == "always"}
        if self.when != "always":
            out["when"] = self.when
        if self.doc:
            out["doc"] = self.doc
        if self.kind != "text":
            out["type"] = self.kind
        if self.repeat:
            out["repeat"] = True
        return out


# Every reply may carry these (SPEC, and BUDGET_LEFT a budgeted task's, D-3); an op
# declares only the rest.
COMMON_REPLY_FIELDS = frozenset({"ID", "SCOPE", "DATA", "ERROR", "BUDGET_LEFT"})


@dataclass(frozen=True)
class Example:
    """One exchange for the ops reference: ``request`` is a TASK frame's text; ``reply`` the
    reply frame it gives, normalised (``csp_web.app.opsdoc.normalise``, which writes ``…`` for
    the values of the ``volatile`` fields); a test runs the request
    through a real daemon and compares, so the example cannot drift from the behaviour."""

    request: str
    reply: str
    volatile: tuple[str, ...] = ()  # reply fields whose values differ by run or machine


class Params:
    """A task's validated fields, read through typed accessors."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self._values = dict(values)

    def __contains__(self, name: str) -> bool:
        return self._values.get(name) is not None

    def given(self) -> list[str]:
        """The names of the fields that have a value, sent or by their default."""
        return [name for name, value in self._values.items() if value is not None]

    def text(self, name: str) -> str:
        value = self._values[name]
        assert isinstance(value, str), name
        return value

    def opt_text(self, name: str) -> str | None:
        value = self._values.get(name)
        return value if isinstance(value, str) else None

    def integer(self, name: str) -> int:
        value = self._values[name]
        assert isinstance(value, int), name
        return value

    def opt_integer(self, name: str) -> int | None:
        value = self._values.get(name)
        return value if isinstance(value, int) else None

    def flag(self, name: str) -> bool:
        return bool(self._values.get(name))

    def json(self, name: str) -> Any:
        return self._values.get(name)

    def texts(self, name: str) -> list[str]:
        """Every value of a repeatable field, in frame order."""
        return list(self._values.get(name) or [])


def validate(task: Task, specs: tuple[FieldSpec, ...], inline: str | None) -> Params:
    """Check ``task`` against ``specs`` and return typed params; raises FieldError."""
    by_name = _names(specs)
    raw: dict[str, list[str]] = {}
    for key, value in task.fields:
        if key not in by_name and key not in UNIVERSAL:
            raise FieldError(ErrorCode.UNKNOWN_FIELD, key)
        raw.setdefault(key, []).append(value)
    if task.inline is not None:
        if inline is None:
            raise FieldError(ErrorCode.UNKNOWN_FIELD, "inline text")
        if inline in raw:
            raise FieldError(ErrorCode.DUPLICATE_FIELD, f"{inline} given inline and as a field")
        raw[inline] = [task.inline]
    values: dict[str, Any] = {}
    for spec in specs:
        given = raw.get(spec.name)
        if given is None and not spec.required:  # the common case: a call less per field
            values[spec.name] = [] if spec.repeat else spec.default
        else:
            values[spec.name] = _field_value(spec, given or [])
    _check_frame_fields(raw)
    return Params(values)


# Each op's field names, by the identity of its specs tuple (kept in the entry, so the id is
# never reused while it stands): a dict of them was built per frame, 10 entries for a fetch
# (validate of a one-field fetch 10.5 -> 4.1 us with the default's shortcut, under load 5).
# Ops' specs are a few dozen tuples; the bound is for tuples built on the fly.
_NAMES_BOUND = 4096
_NAMES: dict[int, tuple[tuple[FieldSpec, ...], frozenset[str]]] = {}


def _names(specs: tuple[FieldSpec, ...]) -> frozenset[str]:
    entry = _NAMES.get(id(specs))
    if entry is None or entry[0] is not specs:
        if len(_NAMES) >= _NAMES_BOUND:
            _NAMES.clear()
        entry = _NAMES[id(specs)] = (specs, frozenset(spec.name for spec in specs))
    return entry[1]


def _field_value(spec: FieldSpec, given: list[str]) -> Any:
    if not given:
        if spec.required:
            raise FieldError(ErrorCode.MISSING_FIELD, spec.name)
        return [] if spec.repeat else spec.default
    if spec.repeat:
        return [_convert(spec, value) for value in given]
    if len(given) > 1:
        raise FieldError(ErrorCode.DUPLICATE_FIELD, spec.name)
    return _convert(spec, given[0])


def check_frame_fields(task: Task) -> None:
    """Raise FieldError unless each checked frame field (``FRAME_FIELDS``) the task carries
    is single and well-formed (SPEC C-1, D-3)."""
    _check_frame_fields({name: task.get_all(name) for name, _ in _CHECKED})


def _check_frame_fields(raw: Mapping[str, list[str]]) -> None:
    for name, check in _CHECKED:
        given = raw.get(name)
        if not given:
            continue
        if len(given) > 1:
            raise FieldError(ErrorCode.DUPLICATE_FIELD, name)
        try:
            check(given[0])
        except ValueError as exc:
            raise FieldError(ErrorCode.INVALID_FIELD, f"{name} {exc}") from None


def _convert(spec: FieldSpec, value: str) -> Any:
    if spec.kind == "int":
        return _integer(spec, value)
    if spec.kind == "bool":
        if value.lower() not in ("true", "false"):
            raise FieldError(ErrorCode.INVALID_FIELD, f"{spec.name} must be true or false")
        return value.lower() == "true"
    if spec.kind == "choice":
        if value not in spec.choices:
            raise FieldError(
                ErrorCode.INVALID_FIELD, f"{spec.name} must be {'|'.join(spec.choices)}"
            )
        return value
    if spec.kind == "json":
        return _json(spec, value)
    if spec.max_chars is not None and len(value) > spec.max_chars:
        raise FieldError(ErrorCode.INVALID_FIELD, f"{spec.name} over {spec.max_chars} chars")
    if spec.required and not value.strip():
        raise FieldError(ErrorCode.INVALID_FIELD, f"{spec.name} is empty")
    return value


def _json(spec: FieldSpec, value: str) -> Any:
    if json_depth(value) > MAX_JSON_DEPTH:
        raise FieldError(
            ErrorCode.INVALID_FIELD, f"{spec.name} nests deeper than {MAX_JSON_DEPTH} levels"
        )
    try:
        parsed = json.loads(value, object_pairs_hook=unique_keys)
    except DuplicateKey as exc:
        key = json.dumps(exc.key)  # quoted and ASCII: a reply line holds any key
        if len(key) > _MAX_KEY_CHARS:
            key = key[: _MAX_KEY_CHARS - 3] + "..."
        raise FieldError(ErrorCode.INVALID_FIELD, f"{spec.name} repeats the key {key}") from None
    except ValueError:
        raise FieldError(ErrorCode.INVALID_FIELD, f"{spec.name} is not JSON") from None
    if holds_lone_surrogate(value, parsed):
        raise FieldError(ErrorCode.INVALID_FIELD, f"{spec.name} holds a lone surrogate")
    return parsed


def holds_lone_surrogate(text: str, value: object) -> bool:
    """Whether ``value``, which ``json.loads`` made of ``text``, holds a lone surrogate in a
    key or a string at any depth (SPEC V-2 for JSON: ``"\\ud800"`` decodes to one, which no
    UTF-8 peer, execve or reply line can carry). A surrogate pair decodes to one character
    and passes. Only a ``\\u`` escape makes one, unless ``text`` held it already, so text
    without that escape costs a substring test (and ASCII test), never a walk."""
    if "\\u" not in text:
        return not text.isascii() and _SURROGATE.search(text) is not None
    pending: list[object] = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            pending.extend(item)
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


class DuplicateKey(ValueError):
    """A JSON object of a client's names ``key`` twice (``unique_keys``)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s ``object_pairs_hook`` for JSON a client sends: the object, or
    DuplicateKey (a ValueError) when it names a key twice, which ``json`` would otherwise
    resolve silently by keeping the last (RFC 8259 4: names SHOULD be unique)."""
    value = dict(pairs)
    if len(value) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return value


def json_depth(text: str, *, limit: int = MAX_JSON_DEPTH) -> int:
    """How deep arrays and objects nest in ``text`` (brackets inside strings do not count),
    measured without parsing and only up to ``limit + 1``, so any input is cheap to ask about."""
    depth = deepest = 0
    for match in _JSON_BRACKET.finditer(_JSON_STRING.sub("", text)):
        if match.group() in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    break
        else:
            depth -= 1
    return deepest


def _integer(spec: FieldSpec, value: str) -> int:
    match = re.fullmatch(r"(-?)0*([0-9]+)", value)
    if not match:
        raise FieldError(ErrorCode.INVALID_FIELD, f"{spec.name} must be an integer")
    sign, digits = match.groups()
    if len(digits) > 18:  # past every bound a field has: say which end, never parse it
        bound = spec.minimum if sign else spec.maximum
        side = "below" if sign else "above"
        detail = f"{side} {bound}" if bound is not None else "out of range"
        raise FieldError(ErrorCode.INVALID_FIELD, f"{spec.name} {detail}")
    number = int(sign + digits)
    if spec.minimum is not None and number < spec.minimum:
        raise FieldError(ErrorCode.INVALID_FIELD, f"{spec.name} below {spec.minimum}")
    if spec.maximum is not None and number > spec.maximum:
        raise FieldError(ErrorCode.INVALID_FIELD, f"{spec.name} above {spec.maximum}")
    return number


def past_the_end(start: int, length: int) -> bool:
    """Whether START ``start`` lies past a text of ``length`` characters: beyond it, or at
    the end of a non-empty one, whose page would be an empty OK (never a silent empty OK,
    R-2). START 0 of an empty text is its one page (the op says why it is empty)."""
    return start > 0 and start >= length


def check_start(start: int, length: int) -> None:
    """Raise FieldError invalid_field when ``start`` is ``past_the_end`` of a text of
    ``length`` characters (fetch, cabinet and the browser's snapshot page alike)."""
    if past_the_end(start, length):
        raise FieldError(ErrorCode.INVALID_FIELD, f"START beyond the end ({length})")


def parse_timeout_ms(task: Task, *, default_ms: int, max_ms: int) -> int:
    """The task's deadline in ms: TIMEOUT_MS if given (1..max_ms), else ``default_ms``."""
    values = task.get_all("TIMEOUT_MS")
    if not values:
        return min(default_ms, max_ms)
    spec = FieldSpec("TIMEOUT_MS", "int", minimum=1, maximum=max_ms)
    return _field_value(spec, values)  # type: ignore[no-any-return]
