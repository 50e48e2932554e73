"""``python -m csp_web.app.opsdoc > docs/ops.md``: every op's fields, reply fields and one
example exchange, from the registry itself.

A test compares docs/ops.md with this output, so the document cannot drift from the code;
tests/test_op_examples.py runs every example request through a real daemon and compares the
reply, normalised here, with the one declared, so the examples cannot drift either.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from csp_web.app.catalog import SPECIALISTS
from csp_web.core.api.fields import (
    COMMON_REPLY_FIELDS,
    FRAME_FIELDS,
    Example,
    FieldSpec,
    ReplyField,
)
from csp_web.core.api.ops import Effects, OpSpec
from csp_web.core.daemon.compose import op_table
from protocol import Connection, Reply, Task, serialize

# Placeholders the examples show for what changes from run to run; ``normalise`` writes them
# and ``request_of`` fills the fileKey and job placeholders with the run's real ones.
FILE_KEY = "fk_xxxxxxxxxxxxxxxx"
JOB_ID = "rj_xxxxxxxxxxxxxxxx"
TIME = "2026-01-01T00:00:00Z"
_MS_FIELDS = ("EXEC_TIME", "NODE_TIME", "CPU_MS", "PEAK_RSS_KIB")
_SUBSTITUTIONS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bfk_[a-z2-7]{16}\b"), FILE_KEY),
    (re.compile(r"\brj_[0-9a-f]{16}\b"), JOB_ID),
    (re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)"), TIME),
    (re.compile(r"((?:\b|_)ms):\d+(?:\.\d+)?"), r"\1:0"),
    (re.compile(r'("\w+_at"):\d+(?:\.\d+)?'), r"\1:0"),  # a JSON time in epoch seconds
    (re.compile(r"^(" + "|".join(_MS_FIELDS) + r") \d+$", re.M), r"\1 0"),
)
MAX_VALUE_CHARS = 160  # a longer value is cut in the doc (and in the comparison)
_MAX_REPEATS = 3  # lines of one field name shown; the rest counted


def normalise(
    text: str,
    *,
    port: int | None = None,
    replacements: Mapping[str, str] | None = None,
    volatile: Iterable[str] = (),
) -> str:
    """A reply frame's text with what varies between runs written as placeholders: fileKeys,
    job ids, times, milliseconds, the test origin's ``port``, the ``replacements`` (a real
    path -> its placeholder) and the values of ``volatile`` fields (``…``); long values cut and
    long runs of one field counted, so the doc stays readable."""
    if port is not None:
        text = text.replace(f".test:{port}", ".test")
    for real, placeholder in (replacements or {}).items():
        text = text.replace(real, placeholder)
    for pattern, replacement in _SUBSTITUTIONS:
        text = pattern.sub(replacement, text)
    for name in volatile:
        text = re.sub(rf"^{re.escape(name)} .*$", f"{name} …", text, flags=re.M)
    return _shorten(text)


def _shorten(text: str) -> str:
    lines: list[str] = []
    seen: dict[str, int] = {}
    for line in text.rstrip("\n").split("\n"):
        name = line.split(" ", 1)[0]
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > _MAX_REPEATS:
            continue
        if len(line) > MAX_VALUE_CHARS:
            line = line[:MAX_VALUE_CHARS] + "…"
        lines.append(line)
    more = [(name, count - _MAX_REPEATS) for name, count in seen.items() if count > _MAX_REPEATS]
    lines += [f"… {count} more {name}" for name, count in more]
    return "\n".join(lines) + "\n"


def request_of(example: Example, *, port: int, values: Mapping[str, str]) -> Task:
    """The task ``example.request`` spells, its ``.test`` hosts at the origin's ``port`` and
    each placeholder in ``values`` replaced by its real value. Raises ValueError when the
    text is not one task frame."""
    text = re.sub(r"(\w)\.test/", rf"\1.test:{port}/", example.request)
    for placeholder, real in values.items():
        text = text.replace(placeholder, real)
    codec = Connection()
    codec.receive_data(text.rstrip("\n").encode("utf-8") + b"\n\n")
    frame = codec.next_event()
    if not isinstance(frame, Task):
        raise ValueError(f"not a task frame: {example.request!r}")
    return frame


def reply_text(reply: Reply) -> str:
    """The reply frame as it goes on the wire, without the closing blank line."""
    return serialize(reply).decode("utf-8").rstrip("\n") + "\n"


def undeclared(op: OpSpec, reply: Reply) -> list[str]:
    """The field names in ``reply`` that ``op`` does not declare (nor every reply carries)."""
    declared = COMMON_REPLY_FIELDS | {field.name for field in op.replies}
    return sorted({name for name, _ in reply.fields} - declared)


def _field_line(spec: FieldSpec, inline: str | None) -> str:
    notes: list[str] = [spec.kind]
    if spec.required:
        notes.append("required")
    if spec.repeat:
        notes.append("repeatable")
    if spec.choices:
        notes.append("one of " + " ".join(f"`{choice}`" for choice in spec.choices))
    if spec.minimum is not None or spec.maximum is not None:
        notes.append(
            f"{spec.minimum if spec.minimum is not None else ''}.."
            f"{spec.maximum if spec.maximum is not None else ''}"
        )
    if spec.max_chars is not None:
        notes.append(f"<= {spec.max_chars} chars")
    if spec.default not in (None, ""):
        notes.append(f"default {spec.default}")
    if spec.name == inline:
        notes.append("inline text fills it")
    return f"| `{spec.name}` | {', '.join(notes)} | {_cell(spec.doc)} |"


def _cell(text: str) -> str:
    # A pipe would end the table cell; ``<url>`` would be read as an HTML tag and vanish.
    return text.replace("|", "\\|").replace("<", "&lt;")


def _reply_line(field: ReplyField) -> str:
    shape: list[str] = [field.kind] if field.kind != "text" else []
    shape += ["list"] if field.repeat else []
    name = f"`{field.name}` ({', '.join(shape)})" if shape else f"`{field.name}`"
    return f"| {name} | {_cell(field.when)} | {_cell(field.doc)} |".replace("  |", " |")


def _effects_line(effects: Effects) -> str:
    said = ["reads only" if effects.read_only else "changes state"]
    if not effects.read_only:
        said.append("may delete or overwrite" if effects.destructive else "only adds")
    said.append("idempotent" if effects.idempotent else "not idempotent")
    said.append("reaches outside the machine" if effects.open_world else "local")
    return f"Effects (the MCP face's tool annotations): {', '.join(said)}."


def _op_lines(op: OpSpec) -> list[str]:
    lines = [f"## `{op.req}` IN:{op.domain} OUT:{op.out}", ""]
    if op.doc:
        lines += [op.doc[0].upper() + op.doc[1:] + ".", ""]
    lines += [_effects_line(op.effects), ""]
    if op.fields:
        lines += ["| field | type and bounds | meaning |", "|---|---|---|"]
        lines += [_field_line(spec, op.inline).rstrip() for spec in op.fields]
    else:
        lines.append("No fields.")
    if op.replies:
        lines += ["", "Reply fields besides `STATUS`, `ID`, `SCOPE`, `DATA` and `ERROR`:", ""]
        lines += ["| reply field | when | meaning |", "|---|---|---|"]
        lines += [_reply_line(field) for field in op.replies]
    else:
        lines += ["", "Reply fields: only `STATUS`, `ID`, `SCOPE`, `DATA` and `ERROR`."]
    if op.example is not None:
        lines += ["", "Example:", "", "```", op.example.request.rstrip("\n"), "```", ""]
        lines += ["```", op.example.reply.rstrip("\n"), "```"]
    return lines


def _frame_fields() -> str:
    """``ID``, ``TIMEOUT_MS`` and ...: the names of ``FRAME_FIELDS`` as a phrase."""
    names = [f"`{field.spec.name}`" for field in FRAME_FIELDS]
    return f"{', '.join(names[:-1])} and {names[-1]}"


def render(ops: Iterable[OpSpec]) -> str:
    lines = [
        "# Ops",
        "",
        "Generated by `python -m csp_web.app.opsdoc` from the op registry; "
        "`REQ:ops IN:SYS OUT:OPS` gives the request and reply fields as JSON. Every op also "
        f"takes the fields every frame may carry, {_frame_fields()} "
        "(protocol/SPEC.md C-1, C-4, D-3). Every reply carries `STATUS`, `SCOPE` "
        "and `DATA`, `ID` when the task had one, and `ERROR code:detail` when it is `FAIL` "
        "(R-1, R-2); each op lists the further fields its replies carry.",
        "",
        "Each example is a request and the reply a daemon gave it in "
        "tests/test_op_examples.py (against local test origins under `*.test`), with what "
        f"changes between runs written as placeholders: fileKeys `{FILE_KEY}`, job ids "
        f"`{JOB_ID}`, times `{TIME}` (in JSON, epoch seconds 0), milliseconds 0, the state "
        "directory `<state_dir>`, the exec workspace `<workspace>`, values that differ by "
        "machine `…`; "
        f"values over {MAX_VALUE_CHARS} characters are cut (`…`) and past "
        f"{_MAX_REPEATS} lines of one field the rest are counted.",
    ]
    for op in ops:
        lines += ["", *_op_lines(op)]
    return "\n".join(lines) + "\n"


def main() -> None:
    print(render(op_table(SPECIALISTS)), end="")


if __name__ == "__main__":
    main()
