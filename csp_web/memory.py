"""Memory writes: the one way the specialists record anything (SPEC M-1).

The daemon never reads or writes memory storage itself; each write becomes a
``TASK REQ:write IN:MEMORY OUT:ACK`` frame for the external Memory Specialist, queued durably
in the outbox (``csp_web.outbox``) before the reply that caused it is sent.
"""

from __future__ import annotations

import datetime
import itertools
import json
import secrets
from dataclasses import dataclass
from typing import Any, Literal

from protocol import Task

Source = Literal["web", "tool", "sys"]


# 64 random bits drawn once per process keep IDs unique across restarts and hosts; the
# counter keeps them unique within the process without a syscall per write.
_PROCESS_TAG = secrets.token_hex(8)
_counter = itertools.count(1)


def new_write_id() -> str:
    """A unique idempotency key: a time-ordered prefix, the process tag, a counter."""
    now = datetime.datetime.now(datetime.UTC)
    return f"w-{now:%Y%m%dT%H%M%S%f}-{_PROCESS_TAG}-{next(_counter)}"


def today() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")


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


def json_record(**fields: Any) -> str:
    """A compact, key-sorted JSON record for a write's DATA."""
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str)


def make_write(source: Source, type_: str, folder: str, data: str, *, suffix: str) -> MemoryWrite:
    """A write with a fresh ID, filed under ``<folder>/<today>/<id><suffix>``."""
    write_id = new_write_id()
    return MemoryWrite(source, type_, f"{folder}/{today()}/{write_id}{suffix}", data, write_id)
