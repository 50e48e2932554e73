"""What the core needs from the layers above it, as Protocols: the memory path (the outbox
and the IN:MEMORY relay) and, for background tasks, a port to submit work as a peer.

The core imports none of their implementations (csp_web.memory, csp_web.cron): the
composition root hands them in, so the import graph runs one way.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, TypeAlias

from csp_web.config import SocketConfig
from csp_web.core.api.records import MemoryWrite
from protocol import Reply, Task

# A REQ:stats line (KEY value): a value, several, or a callable giving the current one(s).
StatsLine: TypeAlias = str | tuple[str, ...] | Callable[[], str | tuple[str, ...]]
# Whether a store's disk is full now (SPEC O-6), by the store's name on REQ:stats' STORAGE line.
StorageChecks: TypeAlias = Mapping[str, Callable[[], bool]]


class Outbound(Protocol):
    """The durable outbox as the core uses it (csp_web.memory.outbox.Outbox)."""

    @property
    def depth(self) -> int: ...
    @property
    def delivered(self) -> int: ...
    @property
    def rejected(self) -> int: ...
    @property
    def refused(self) -> int: ...
    @property
    def connected(self) -> bool: ...
    @property
    def waiting(self) -> int: ...
    @property
    def full(self) -> bool: ...
    @property
    def storage_full(self) -> bool: ...
    def peer_full(self, owner: str) -> bool: ...

    async def put(
        self, write: MemoryWrite, *, use_reserve: bool = True, owner: str | None = None
    ) -> None: ...
    async def put_or_fold(
        self, write: MemoryWrite, key: str | Mapping[str, int], *, owner: str | None = None
    ) -> None: ...
    def put_or_fold_nowait(
        self, write: MemoryWrite, key: str | Mapping[str, int], *, owner: str | None = None
    ) -> None: ...
    async def wait_room(self, owner: str) -> None: ...
    async def wait_paced(self, owner: str) -> bool: ...
    async def wait_flushed(self) -> None: ...
    async def call_memory(self, task: Task, *, timeout_s: float) -> Reply: ...


class Relay(Protocol):
    """Forwards an IN:MEMORY task to the Memory Specialist (csp_web.memory.relay)."""

    async def forward(self, task: Task) -> Reply: ...


@dataclass(frozen=True)
class MemoryPath:
    """Where memory writes go: the outbox (audit records, ``OpContext.remember``), the relay
    for IN:MEMORY frames (None: they are looked up in the op table), and the ``REQ:stats``
    lines the path adds (the embedded store's ``MEMORY``) and its stores' full-disk checks
    besides the outbox's (the embedded store's ``memory``)."""

    outbox: Outbound
    relay: Relay | None
    stats_lines: Mapping[str, StatsLine] = field(default_factory=dict)
    storage: StorageChecks = field(default_factory=dict)


class TaskPort(Protocol):
    """What a background task (the cron scheduler) may do with the daemon: check a task,
    submit it as a peer, and queue a memory write. Made by ``core.dispatch.DispatchPort``."""

    @property
    def accepting(self) -> bool:
        """False once shutdown began: submit nothing new."""
        ...

    def check(self, task: Task) -> None:
        """Raise OpError unless ``task`` names an op and its fields are valid (a relayed
        IN:MEMORY task is the Memory Specialist's to judge: not checked)."""
        ...

    async def submit(self, task: Task, *, uid: int | None) -> Reply:
        """Run ``task`` as peer ``cron`` under ``uid``; a uid the socket no longer allows gets
        ``FAIL permission_denied`` without running (not audited)."""
        ...

    async def remember(self, write: MemoryWrite) -> None:
        """Queue ``write`` in the outbox; raises OpError(outbox_full)."""
        ...


def allowed_uids(config: SocketConfig) -> frozenset[int]:
    """Who may use the daemon: ``allowed_uids``, else the daemon's own uid. The one rule, read
    from the running settings by the gate at each accept and by the task port before each
    submitted task."""
    return frozenset(config.allowed_uids) or frozenset({os.geteuid()})
