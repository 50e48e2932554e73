"""The reference Memory Specialist: ``csp-web memory-sink``, and the daemon's embedded one.

It serves CSP/1 with the daemon's own connection loop. ``REQ:write IN:MEMORY OUT:ACK`` stores
DATA under its logical PATH in a SQLite store (``csp_web.sink_store``): ID and DATA in one
transaction, many writes per transaction (``csp_web.sink_commit``), the reply sent only after
the commit. A repeated ID with the same content is answered ``DATA duplicate`` (SPEC M-2), with
other content ``FAIL id_conflict`` (M-5). ``REQ:read IN:MEMORY OUT:CONTENT`` returns a path's
writes joined in order. Frames on a connection are handled one at a time, so writes are stored
in the order they were sent.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import trio

from protocol import ErrorCode

from .config import (
    Config,
    ConnectionConfig,
    MemoryConfig,
    OutboxConfig,
    SpecialistLimits,
    TasksConfig,
)
from .connection import Shutdown, StreamOptions, serve_stream
from .context import OpContext, Peer, Services
from .dispatch import Dispatcher
from .errors import OpError
from .fields import FieldSpec, Params
from .outbox import open_outbox
from .registry import Op, Registry
from .replies import Result
from .sink_commit import CommittedReplies, GroupCommit
from .sink_store import Retention, SinkStore
from .stats import Stats
from .unix import Lease, prepare_socket_directory, serve_unix

__all__ = ["MemorySink", "SinkStore", "open_memory_sink", "serve_memory_sink"]

MAX_FRAME_BYTES = 64 * 1024 * 1024  # a full exec log is capped far below this


def sink_ops(commits: GroupCommit) -> list[Op]:
    async def write(params: Params, ctx: OpContext) -> Result:
        if ctx.client_id is None:
            raise OpError(ErrorCode.MISSING_FIELD, "ID")
        fresh = commits.stage(
            params.text("FROM"),
            params.text("TYPE"),
            params.text("PATH"),
            params.text("DATA"),
            ctx.client_id,
        )
        return Result("stored" if fresh else "duplicate", scope=("memory",))

    async def read(params: Params, ctx: OpContext) -> Result:
        await commits.wait_committed()  # a read sees the writes sent before it
        text = commits.store.read(params.text("PATH"), MAX_FRAME_BYTES // 2)
        if text is None:
            raise OpError(ErrorCode.INVALID_FIELD, "no such PATH")
        return Result(text, scope=("memory",))

    text = FieldSpec
    return [
        Op(
            "write",
            "MEMORY",
            "ACK",
            "memory",
            write,
            (
                text("FROM", "choice", True, choices=("web", "tool", "sys", "client")),
                text("TYPE", required=True, max_chars=64),
                text("PATH", required=True, max_chars=1024),
                text("DATA", required=True),
            ),
            doc="store DATA at PATH once per ID",
        ),
        Op(
            "read",
            "MEMORY",
            "CONTENT",
            "memory",
            read,
            (text("PATH", required=True),),
            doc="return what is stored at PATH",
        ),
    ]


@dataclass
class MemorySink:
    """A running sink: serve any number of connections with ``serve_connection``."""

    store: SinkStore
    commits: GroupCommit
    dispatcher: Dispatcher
    shutdown: Shutdown

    async def serve_connection(self, stream: trio.abc.Stream, peer: Peer) -> None:
        """Serve CSP/1 on ``stream`` until EOF; closes it."""
        options = StreamOptions(_SINK_CONNECTION, None, sequential=True)
        gated = CommittedReplies(stream, self.commits)
        await serve_stream(gated, self.dispatcher, peer, options, self.shutdown)


_SINK_CONNECTION = ConnectionConfig(
    max_line_bytes=MAX_FRAME_BYTES,
    max_frame_bytes=MAX_FRAME_BYTES,
    max_in_flight=1024,
    max_queued_replies=1024,  # replies waiting for their commit; more stops the reader
)


@asynccontextmanager
async def open_memory_sink(directory: str, memory: MemoryConfig) -> AsyncIterator[MemorySink]:
    """Open the store under ``directory`` and run its committer; both end on exit, after the
    caller's connections (which must be served inside this context)."""
    retention = Retention(memory.retention_max_bytes, memory.retention_max_age_s)
    store = await trio.to_thread.run_sync(SinkStore, directory, retention)
    try:
        commits = GroupCommit(store)
        # Frames on one connection run in sequence; this bounds connections, not frames.
        limits = SpecialistLimits(max_running=1024, max_queued=1024)
        config = Config(
            outbox=OutboxConfig(path=os.path.join(directory, ".sink-outbox.sqlite3")),
            tasks=TasksConfig(specialists={"memory": limits}),
        )
        # The dispatcher needs an outbox; the sink's (audit off) never receives a write.
        async with (
            open_outbox(config.outbox_path, config.outbox, MemoryConfig()) as outbox,
            trio.open_nursery() as nursery,
        ):
            await nursery.start(commits.serve)
            services = Services(config, outbox, extras={"sink": store})
            dispatcher = Dispatcher(Registry(sink_ops(commits)), services, Stats(), audit=False)
            yield MemorySink(store, commits, dispatcher, Shutdown())
            nursery.cancel_scope.cancel()
    finally:
        await trio.to_thread.run_sync(store.close)


async def serve_memory_sink(
    socket_path: str,
    directory: str,
    memory: MemoryConfig | None = None,
    *,
    task_status: trio.TaskStatus[SinkStore] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the sink at ``socket_path`` until cancelled, retention from ``memory``. The
    socket's folder is made (0700) before the store's, so a store folder beside the socket
    cannot leave it 0755."""
    prepare_socket_directory(socket_path)
    memory = memory or MemoryConfig()
    async with open_memory_sink(directory, memory) as sink, trio.open_nursery() as nursery:

        async def handle(stream: trio.SocketStream, peer: Peer, _lease: Lease) -> None:
            await sink.serve_connection(stream, peer)

        await nursery.start(
            lambda task_status: serve_unix(
                socket_path,
                sink.dispatcher.services.config.socket,
                handle,
                handler_nursery=nursery,
                task_status=task_status,
            )
        )
        task_status.started(sink.store)
