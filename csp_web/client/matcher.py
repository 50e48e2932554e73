"""Matching replies to the callers awaiting them, sans-IO: the one piece both clients drive.

A ``ReplyMatcher`` owns the client side's codec (``protocol.Connection``) and a table from task
ID to the caller's waiter; it never reads or writes a socket, sleeps or wakes anyone. A client
asks it for the bytes of its frames (automatic IDs added), registers a waiter per ID, feeds it
what the socket gave, and wakes the waiters it hands back. The trio client's waiter is one per
batch (the reply's place in the batch rides along); the asyncio client's is a future per ID.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Iterator, Mapping, Sequence
from typing import Generic, NamedTuple, TypeVar

from protocol import CLOSED, NEED_DATA, Connection, Limits, Reply, Task

W = TypeVar("W")

# Replies up to 64 MiB and 100,000 fields: a client reads what its daemon sends.
CLIENT_LIMITS = Limits(max_line_bytes=64 << 20, max_frame_bytes=64 << 20, max_fields=100_000)


class ClientClosed(Exception):
    """The connection ended (or broke) before the reply arrived."""


class Matched(NamedTuple, Generic[W]):
    """A reply, the waiter that awaited it, and its place in that waiter's batch."""

    waiter: W
    place: int
    reply: Reply


class ReplyMatcher(Generic[W]):
    """Frames out with IDs, replies in routed to their waiters by ID (see the module doc)."""

    def __init__(self, limits: Limits | None = None, *, id_prefix: str | None = None) -> None:
        self._codec = Connection(limits or CLIENT_LIMITS)
        prefix = id_prefix if id_prefix is not None else new_id_prefix()
        self._ids = (f"{prefix}{n}" for n in itertools.count(1))
        self._waiting: dict[str, tuple[W, int]] = {}
        self.closed = False

    def frames(self, tasks: Sequence[Task | Mapping[str, str]]) -> tuple[list[str], bytes]:
        """The IDs of ``tasks`` as sent (the next automatic ID where one has none) and their
        bytes, in order."""
        frames = [with_id(as_task(task), self._ids) for task in tasks]
        return [frame.id or "" for frame in frames], b"".join(map(self._codec.send, frames))

    def expect(self, ids: Sequence[str], waiters: Sequence[W]) -> None:
        """Await the reply to ``ids[i]`` with ``waiters[i]`` (place ``i``), all or none.

        Raises ClientClosed once the connection is closed, ValueError when an ID repeats or
        is already awaited."""
        if self.closed:
            raise ClientClosed("connection is closed")
        if len(set(ids)) < len(ids):
            raise ValueError("an ID is repeated in the batch")
        for task_id in ids:
            if task_id in self._waiting:
                raise ValueError(f"ID {task_id} is already awaiting a reply (a repeated ID)")
        for index, (task_id, waiter) in enumerate(zip(ids, waiters, strict=True)):
            self._waiting[task_id] = (waiter, index)

    def forget(self, ids: Sequence[str], waiter: W) -> None:
        """Stop awaiting the replies to ``ids`` that ``waiter`` still awaits."""
        for task_id in ids:
            entry = self._waiting.get(task_id)
            if entry is not None and entry[0] is waiter:
                del self._waiting[task_id]

    def receive_data(self, data: bytes | bytearray) -> tuple[list[Matched[W]], bool]:
        """Feed what the socket gave (``b""`` at EOF): the replies now complete that someone
        awaits, and whether the peer has closed. A reply nobody awaits is dropped.

        Raises protocol.ProtocolError on bytes that are not CSP/1 replies."""
        self._codec.receive_data(data)
        replies, peer_closed = received_replies(self._codec)
        matched = []
        for reply in replies:
            entry = self._waiting.pop(reply.id or "", None)
            if entry is not None:
                matched.append(Matched(entry[0], entry[1], reply))
        return matched, peer_closed

    def close(self) -> list[W]:
        """Mark the connection closed: the waiters still waiting (each once), now forgotten;
        every later ``expect`` raises ClientClosed."""
        self.closed = True
        waiters = list({id(waiter): waiter for waiter, _ in self._waiting.values()}.values())
        self._waiting.clear()
        return waiters


def received_replies(codec: Connection) -> tuple[list[Reply], bool]:
    """The replies ``codec`` holds parsed now, and whether the peer has closed."""
    replies: list[Reply] = []
    while True:
        event = codec.next_event()
        if event is NEED_DATA or event is CLOSED:
            return replies, event is CLOSED
        if isinstance(event, Reply):
            replies.append(event)


def with_id(task: Task, ids: Iterator[str]) -> Task:
    """``task`` as sent: with the next automatic ID from ``ids`` when it has none."""
    if task.id is not None:
        return task
    return Task(task.req, task.domain, task.out, task.inline, (("ID", next(ids)), *task.fields))


def as_task(task: Task | Mapping[str, str]) -> Task:
    """A Task from a mapping with REQ, IN, OUT (and optional INLINE) plus field keys."""
    if isinstance(task, Task):
        return task
    fields = tuple((k, v) for k, v in task.items() if k not in ("REQ", "IN", "OUT", "INLINE"))
    return Task(task["REQ"], task["IN"], task["OUT"], task.get("INLINE"), fields)


def new_id_prefix() -> str:
    """A random prefix for a client's automatic IDs, e.g. ``c3f9a0b1c2d4e-``."""
    return f"c{secrets.token_hex(6)}-"
