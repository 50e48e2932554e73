"""What the core needs from the layers above it, as Protocols: the memory path (the outbox
and the IN:MEMORY relay) and, for background tasks, a port to submit work as a peer; and the
seams between specialists (``Seams``: the browser's ``Renderer``, web's ``FileStore``).

The core imports none of their implementations (csp_web.memory, csp_web.cron, specialists):
the composition root hands them in, so the import graph runs one way.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeAlias, TypeVar

from csp_web.config import SocketConfig
from csp_web.core.api.records import MemoryWrite
from protocol import Reply, Task

T = TypeVar("T")
# A REQ:stats line (KEY value): a value, several, or a callable giving the current one(s).
StatsLine: TypeAlias = str | tuple[str, ...] | Callable[[], str | tuple[str, ...]]
# Whether a store's disk is full now (SPEC O-6), by the store's name on REQ:stats' STORAGE line.
StorageChecks: TypeAlias = Mapping[str, Callable[[], bool]]


@dataclass(frozen=True)
class CounterFamily:
    """A labelled counter a specialist keeps, read at each metrics scrape (csp_web.app.metrics)
    and never on an op's path: ``samples()`` gives (label values, count) now. Label values
    come from bounded sets (cache namespaces, configured bucket names), never hosts or URLs.
    Families of one ``name`` from several specialists are one metric (their labels tell them
    apart)."""

    name: str  # without the csp_web_ prefix and the _total suffix
    doc: str
    labels: tuple[str, ...]
    samples: Callable[[], Iterable[tuple[tuple[str, ...], float]]]


class OutboundRoom(Protocol):
    """What is pending in the outbox, and its limits (csp_web.memory.outbox_room.OutboxRoom)."""

    @property
    def depth(self) -> int: ...
    @property
    def refused(self) -> int: ...
    @property
    def connected(self) -> bool: ...
    @property
    def waiting_turns(self) -> int: ...
    @property
    def full(self) -> bool: ...
    @property
    def storage_full(self) -> bool: ...
    def peer_full(self, owner: str) -> bool: ...
    async def wait_paced(self, owner: str) -> bool: ...


class OutboundDelivery(Protocol):
    """What left the outbox (csp_web.memory.outbox_delivery.Delivery)."""

    @property
    def delivered(self) -> int: ...
    @property
    def rejected(self) -> int: ...


class Outbound(Protocol):
    """The durable outbox as the core uses it (csp_web.memory.outbox.Outbox): its parts
    ``room`` and ``delivery``, and the operations that need more than one part."""

    @property
    def room(self) -> OutboundRoom: ...
    @property
    def delivery(self) -> OutboundDelivery: ...

    def has_room_now(self, owner: str) -> bool: ...

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
        """Raise OpError unless ``task`` passes the checks each run of it makes before it
        starts: it names an op, its fields and TIMEOUT_MS are valid (a relayed IN:MEMORY
        task: the fields every frame may carry and TIMEOUT_MS; the rest is the Memory
        Specialist's to judge)."""
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


# The seams between specialists (issue 23): each is provided by one specialist and consumed by
# another, which never import each other; the composition root (csp_web.app.catalog) hands
# the same ``Port`` to both.


@dataclass(frozen=True)
class Rendered:
    """A page as a browser rendered it: its final URL, HTTP status (None when the browser
    saw none), title, and the DOM serialised after the load event."""

    url: str
    status: int | None
    title: str
    html: str


class Renderer(Protocol):
    """Renders a page's JavaScript in a browser (the browser specialist provides it; web's
    fetch consumes it for pages built by script)."""

    async def render(self, url: str, *, timeout_s: float) -> Rendered:
        """Load ``url`` in a context of its own, every request through the guard, and return
        its DOM after the load event; the context is closed before this returns. Raises
        OpError: the guard's refusals (URL_REJECTED, SSRF_BLOCKED, ...) for the URL or its
        landing, FETCH_FAILED (``timeout`` past ``timeout_s``), BROWSER_UNAVAILABLE, BUSY."""
        ...


@dataclass(frozen=True)
class StoredFile:
    """A file kept under a fileKey: the bytes, where they came from, their name and type."""

    key: str
    url: str
    name: str
    content_type: str
    body: bytes


class FileStore(Protocol):
    """fileKeys for files (web provides it; the browser's downloads and uploads consume it).
    The store keeps what it is given: the consumer caps the bytes it puts."""

    async def put(self, body: bytes, *, url: str, name: str, content_type: str) -> str:
        """Keep ``body`` and return its fileKey: the same bytes from the same URL get the
        same key. Raises OpError(STORAGE_FULL) when the store's disk is full (nothing
        kept), OpError(TOO_LARGE, "over:<n>") past the largest file it keeps."""
        ...

    async def get(self, key: str) -> StoredFile:
        """The file ``key`` names. Raises OpError(INVALID_FIELD) for a malformed key,
        OpError(UNKNOWN_FILE_KEY) for one not held (expired, or never kept here)."""
        ...


class Port(Generic[T]):
    """One seam: the provider fills it while its services are open (``provided``), the
    consumer reads it at each use (``get``): None when the daemon has no provider open."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._provided: T | None = None

    @contextmanager
    def provided(self, implementation: T) -> Iterator[T]:
        """Offer ``implementation`` for the block; one provider at a time (RuntimeError)."""
        if self._provided is not None:
            raise RuntimeError(f"port {self.name} is provided twice")
        self._provided = implementation
        try:
            yield implementation
        finally:
            self._provided = None

    def get(self) -> T | None:
        return self._provided


@dataclass(frozen=True)
class Seams:
    """The ports between the specialists of one composed daemon."""

    renderer: Port[Renderer] = field(default_factory=lambda: Port("renderer"))
    files: Port[FileStore] = field(default_factory=lambda: Port("files"))
