"""What a handler may use while it runs: configuration, shared services, the peer, memory."""

from __future__ import annotations

from dataclasses import dataclass

from csp_web.config import Config
from csp_web.core.api.budget import TaskBudget, running
from csp_web.core.api.ports import MemoryPath, Outbound
from csp_web.core.api.records import MemoryWrite, Source, make_write
from csp_web.core.api.trace import TraceContext


@dataclass(frozen=True)
class Peer:
    """Who sent the frame: the socket peer's credentials, or the stdin pipe (uid/pid None)."""

    connection: str
    uid: int | None = None
    pid: int | None = None


@dataclass
class Services:
    """What every handler shares through its context: the running configuration (one
    reference, swapped by a reload) and the memory path. A specialist's own services are
    its handlers' third argument (core.ops.bind), never looked up here."""

    config: Config
    memory: MemoryPath | None  # None: no audit, no relay, no remember (a bare op table)

    @property
    def outbox(self) -> Outbound:
        """The memory path's outbox; RuntimeError when composed without one (a bug: an op
        that remembers was composed into a daemon with no memory path)."""
        if self.memory is None:
            raise RuntimeError("this daemon was composed without a memory path")
        return self.memory.outbox


@dataclass(frozen=True)
class OpContext:
    """Per-task context; ``task_id`` is the client's ID (``client_id``) or one made up;
    ``trace`` the trace its calls to configured APIs pass on, if any (SPEC D-3)."""

    services: Services
    peer: Peer
    op: str
    task_id: str
    client_id: str | None = None
    trace: TraceContext | None = None

    @property
    def config(self) -> Config:
        return self.services.config

    @property
    def budget(self) -> TaskBudget | None:
        """The task's budget (SPEC D-3; ``csp_web.core.api.budget``): ``await
        ctx.budget.take("fetches")``; None when unbudgeted."""
        return running()

    async def remember(
        self,
        source: Source,
        type_: str,
        folder: str,
        data: str,
        *,
        suffix: str = ".json",
        use_reserve: bool = True,
    ) -> MemoryWrite:
        """Queue a memory write durably; returns once persisted. Raises OpError(outbox_full).

        DATA past ``outbox.max_write_bytes`` keeps its head and tail (SPEC O-2). The write
        counts against this peer's share. ``use_reserve``: whether the write may use the room
        kept for admitted ops' logs."""
        data = fit_write(data, self.services.config.outbox.max_write_bytes)
        write = make_write(source, type_, folder, data, suffix=suffix)
        await self.services.outbox.put(write, use_reserve=use_reserve, owner=self.peer.connection)
        return write


def fit_write(data: str, max_bytes: int) -> str:
    """``data`` if its UTF-8 form fits ``max_bytes``, else its head and tail around a line
    saying how many bytes were cut (errors come last, so the tail is kept too)."""
    if len(data) * 4 <= max_bytes:  # no character takes more than 4 bytes
        return data
    raw = data.encode("utf-8")
    if len(raw) <= max_bytes:
        return data
    marker = f"\n[... {len(raw) - max_bytes} bytes cut ...]\n"
    keep = max(0, max_bytes - len(marker.encode("utf-8")) - 16)  # the count may grow a digit
    head = raw[: keep // 2].decode("utf-8", "ignore")
    tail = raw[len(raw) - (keep - keep // 2) :].decode("utf-8", "ignore")
    cut = len(raw) - len(head.encode("utf-8")) - len(tail.encode("utf-8"))
    return f"{head}\n[... {cut} bytes cut ...]\n{tail}"
