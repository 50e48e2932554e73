"""The two frames of CSP/1: a Task a client sends and the Reply it gets back."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

KEY = re.compile(r"[A-Z][A-Z0-9_]*")
OP_NAME = re.compile(r"[a-z][a-z0-9_.-]*")
KIND = re.compile(r"[A-Z][A-Z0-9_]*")

Field = tuple[str, str]


class Status(enum.StrEnum):
    """The outcome a reply's first line states (SPEC R-1)."""

    OK = "OK"
    PARTIAL = "PARTIAL"
    FAIL = "FAIL"


class _HasFields:
    """Read access to a frame's ordered, possibly repeated ``KEY value`` fields."""

    __slots__ = ()
    fields: tuple[Field, ...]

    def get(self, key: str, default: str | None = None) -> str | None:
        """The first value of ``key``, or ``default``."""
        for name, value in self.fields:
            if name == key:
                return value
        return default

    def get_all(self, key: str) -> list[str]:
        """Every value of ``key`` in frame order (SNIPPET repeats once per result)."""
        return [value for name, value in self.fields if name == key]

    @property
    def id(self) -> str | None:
        """The correlation token (SPEC C-1), if the frame carries one."""
        return self.get("ID")


KNOWN_KEYS: set[str] = set()  # keys already checked: a daemon uses a few dozen, over and over


# (REQ, IN, OUT) triples already checked, as KNOWN_KEYS: a peer sends a few, over and over.
_KNOWN_HEADERS: set[tuple[str, str, str]] = set()


def remember_key(key: str) -> None:
    """Note ``key`` (which matched KEY) as checked; the set stays bounded."""
    if len(KNOWN_KEYS) < 4096:
        KNOWN_KEYS.add(key)


def _check_fields(fields: tuple[Field, ...]) -> None:
    for key, value in fields:
        if key not in KNOWN_KEYS:
            if not KEY.fullmatch(key):
                raise ValueError(f"invalid field key {key!r}")
            remember_key(key)
        if not isinstance(value, str):
            raise TypeError(f"field {key} value must be str, not {type(value).__name__}")


@dataclass(frozen=True, slots=True)
class Task(_HasFields):
    """``TASK REQ:<req>[ <inline>] IN:<domain> OUT:<out>`` followed by its fields."""

    req: str
    domain: str
    out: str
    inline: str | None = None
    fields: tuple[Field, ...] = ()

    def __post_init__(self) -> None:
        header = (self.req, self.domain, self.out)
        if header not in _KNOWN_HEADERS:
            if not OP_NAME.fullmatch(self.req):
                raise ValueError(f"invalid op name {self.req!r}")
            if not (KIND.fullmatch(self.domain) and KIND.fullmatch(self.out)):
                raise ValueError("IN and OUT must match [A-Z][A-Z0-9_]*")
            if len(_KNOWN_HEADERS) < 4096:
                _KNOWN_HEADERS.add(header)
        _check_fields(self.fields)


@dataclass(frozen=True, slots=True)
class Reply(_HasFields):
    """``STATUS <status>`` followed by its fields (SCOPE, DATA, ERROR, ...)."""

    status: Status
    fields: tuple[Field, ...] = ()

    def __post_init__(self) -> None:
        _check_fields(self.fields)


Frame = Task | Reply
