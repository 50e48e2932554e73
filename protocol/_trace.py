"""W3C Trace Context's ``traceparent``, as the ``TRACEPARENT`` field carries it (SPEC D-3).

``version-traceid-parentid-flags`` in lower-case hex (W3C Trace Context Level 1, section 3.2):
version ``00`` is exactly 55 characters; a later version may append fields after a ``-`` and
is read by its first four (section 4.3, "Versioning of traceparent"); version ``ff`` is never
valid; an all-zero trace id or parent id is invalid. Upper-case hex is refused, as the
recommendation's HEXDIGLC asks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The same bound as ID (SPEC C-1): room for a later version's extra fields, not for a flood.
MAX_TRACEPARENT_CHARS = 128
_VERSION_00_CHARS = 55
_FIELDS = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


class TraceParentError(ValueError):
    """A value that is not a W3C ``traceparent``; ``detail`` says which rule it breaks."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


@dataclass(frozen=True, slots=True)
class TraceParent:
    """A parsed ``traceparent``: the caller's trace, the span that called, and its flags."""

    trace_id: str  # 32 lower-case hex digits, not all zero
    parent_id: str  # 16 lower-case hex digits, not all zero
    flags: str  # 2 lower-case hex digits; bit 0 is "sampled"

    @property
    def sampled(self) -> bool:
        return bool(int(self.flags, 16) & 1)


def parse_traceparent(text: str) -> TraceParent:
    """``text`` as a ``traceparent``; raises TraceParentError naming the rule it breaks."""
    if len(text) > MAX_TRACEPARENT_CHARS:
        raise TraceParentError(f"over {MAX_TRACEPARENT_CHARS} chars")
    match = _FIELDS.match(text)
    if match is None:
        raise TraceParentError("must be 2-32-16-2 lower-case hex digits joined by -")
    version, trace_id, parent_id, flags = match.groups()
    if version == "ff":
        raise TraceParentError("version ff is invalid")
    rest = text[_VERSION_00_CHARS:]
    if rest and version == "00":
        raise TraceParentError("version 00 is exactly 55 chars")
    if rest and not rest.startswith("-"):
        raise TraceParentError("a later version's own fields follow a -")
    if trace_id == "0" * 32:
        raise TraceParentError("trace id is all zero")
    if parent_id == "0" * 16:
        raise TraceParentError("parent id is all zero")
    return TraceParent(trace_id, parent_id, flags)
