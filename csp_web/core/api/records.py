"""Memory writes: the one way the specialists record anything (SPEC M-1).

The daemon never reads or writes memory storage itself; each write becomes a
``TASK REQ:write IN:MEMORY OUT:ACK`` frame for the external Memory Specialist, queued durably
in the outbox (``csp_web.memory.outbox``) before the reply that caused it is sent.
"""

from __future__ import annotations

import datetime
import itertools
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any, Literal

from protocol import Task

Source = Literal["web", "tool", "sys"]


# 64 random bits drawn once per process keep IDs unique across restarts and hosts; the
# counter keeps them unique within the process without a syscall per write.
_PROCESS_TAG = secrets.token_hex(8)
_counter = itertools.count(1)


_second = -1
_stamp = _day = ""


def _now() -> tuple[str, str, int]:
    """(``%Y%m%dT%H%M%S``, ``%Y-%m-%d``, microseconds) in UTC, formatted once a second: the
    audit path calls this once per frame."""
    global _second, _stamp, _day
    now = time.time()
    second = int(now)
    if second != _second:
        moment = datetime.datetime.fromtimestamp(second, datetime.UTC)
        _second, _stamp, _day = second, f"{moment:%Y%m%dT%H%M%S}", f"{moment:%Y-%m-%d}"
    return _stamp, _day, int((now - second) * 1_000_000)


def new_write_id() -> str:
    """A unique idempotency key: a time-ordered prefix, the process tag, a counter."""
    stamp, _, micros = _now()
    return f"w-{stamp}{micros:06d}-{_PROCESS_TAG}-{next(_counter)}"


def today() -> str:
    return _now()[1]


@dataclass(frozen=True)
class MemoryWrite:
    """One record for the Memory Specialist; ``path`` is logical, never a local file path."""

    source: Source
    type: str
    path: str
    data: str
    id: str = ""

    def to_task(self) -> Task:
        return Task(
            "write",
            "MEMORY",
            "ACK",
            None,
            (
                ("ID", self.id),
                ("FROM", self.source),
                ("TYPE", self.type),
                ("PATH", self.path),
                ("DATA", self.data),
            ),
        )


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)


def json_record(**fields: Any) -> str:
    """A compact, key-sorted JSON record for a write's DATA."""
    return _ENCODER.encode(fields)


def make_write(source: Source, type_: str, folder: str, data: str, *, suffix: str) -> MemoryWrite:
    """A write with a fresh ID, filed under ``<folder>/<today>/<id><suffix>``."""
    stamp, day, micros = _now()
    write_id = f"w-{stamp}{micros:06d}-{_PROCESS_TAG}-{next(_counter)}"
    return MemoryWrite(source, type_, f"{folder}/{day}/{write_id}{suffix}", data, write_id)
