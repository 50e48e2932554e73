"""Driving a ``Connection`` synchronously and recording what it yields, errors included."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from protocol import (
    CLOSED,
    NEED_DATA,
    Connection,
    ErrorCode,
    Frame,
    Limits,
    ProtocolError,
    Sentinel,
)


@dataclass(frozen=True)
class Failed:
    """A ProtocolError as data, so a whole run compares with one ``==``."""

    code: ErrorCode
    frame_id: str | None = None


Outcome = Frame | Failed


def drain(conn: Connection, *, budget: int = 100_000) -> tuple[list[Outcome], Sentinel]:
    """Call ``next_event`` until NEED_DATA or CLOSED; fail if that never happens."""
    outcomes: list[Outcome] = []
    for _ in range(budget):
        try:
            event = conn.next_event()
        except ProtocolError as exc:
            outcomes.append(Failed(exc.code, exc.frame_id))
            continue
        if isinstance(event, Sentinel):
            return outcomes, event
        outcomes.append(event)
    raise AssertionError(f"next_event returned no sentinel in {budget} calls")


def feed(conn: Connection, chunks: Iterable[bytes]) -> list[Outcome]:
    """Feed each non-empty chunk and drain after it; each drain must end in NEED_DATA."""
    outcomes: list[Outcome] = []
    for chunk in chunks:
        if not chunk:
            continue  # b"" would be EOF, which only ``close`` sends
        conn.receive_data(chunk)
        events, sentinel = drain(conn)
        outcomes += events
        assert sentinel is NEED_DATA
    return outcomes


def close(conn: Connection) -> list[Outcome]:
    """Send EOF and drain; the drain must end in CLOSED."""
    conn.receive_data(b"")
    outcomes, sentinel = drain(conn)
    assert sentinel is CLOSED
    return outcomes


def run(chunks: Iterable[bytes], *, limits: Limits | None = None) -> list[Outcome]:
    """Everything a fresh connection yields for ``chunks`` and then for EOF."""
    conn = Connection(limits)
    outcomes = feed(conn, chunks)
    return outcomes + close(conn)


def whole(data: bytes) -> list[bytes]:
    """``data`` as one chunk."""
    return [data]


def byte_by_byte(data: bytes) -> list[bytes]:
    """``data`` as one-byte chunks."""
    return [data[i : i + 1] for i in range(len(data))]
