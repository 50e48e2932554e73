"""``csp-web memory-sink``: a small reference Memory Specialist for development and tests.

It serves CSP/1 on a Unix socket with the daemon's own connection loop, acknowledges
``REQ:write IN:MEMORY OUT:ACK`` by appending DATA to ``DIR/<PATH>``, and ignores an ID it has
already stored (SPEC M-2), remembering IDs across restarts in ``DIR/.sink-ids``.
``REQ:read IN:MEMORY OUT:CONTENT`` returns a stored file, so relayed reads can be tested.
Frames on a connection run one at a time, so writes land in the order they were sent.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import PurePosixPath

import trio

from protocol import ErrorCode

from .config import Config, ConnectionConfig, OutboxConfig
from .connection import Shutdown, StreamOptions, serve_stream
from .context import OpContext, Peer, Services
from .dispatch import Dispatcher
from .errors import OpError
from .fields import FieldSpec, Params
from .outbox import open_outbox
from .registry import Op, Registry
from .replies import Result
from .stats import Stats
from .unix import prepare_socket_directory, serve_unix

_MAX_BYTES = 64 * 1024 * 1024  # a full exec log is capped far below this


class SinkStore:
    """Files under ``root`` named by logical memory paths, plus the set of IDs stored."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        os.makedirs(self.root, mode=0o700, exist_ok=True)
        self._ids_path = os.path.join(self.root, ".sink-ids")
        self.ids: set[str] = set()
        if os.path.exists(self._ids_path):
            with open(self._ids_path, encoding="utf-8") as file:
                self.ids = {line.strip() for line in file if line.strip()}
        self.writes = 0

    def resolve(self, logical: str) -> str:
        """The file for a logical path; raises OpError(invalid_field) for escapes."""
        parts = PurePosixPath(logical).parts
        if not parts or logical.startswith("/") or any(p in ("..", ".", "") for p in parts):
            raise OpError(ErrorCode.INVALID_FIELD, "PATH must be relative without '..'")
        if any(part.startswith(".") for part in parts):
            raise OpError(ErrorCode.INVALID_FIELD, "PATH parts may not start with '.'")
        return os.path.join(self.root, *parts)

    def append(self, write_id: str, logical: str, data: str) -> bool:
        """Store ``data`` once per ID; False when the ID was already stored."""
        if write_id in self.ids:
            return False
        target = self.resolve(logical)
        try:
            os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
            with open(target, "a", encoding="utf-8") as file:
                file.write(data if data.endswith("\n") else data + "\n")
        except (IsADirectoryError, NotADirectoryError, FileExistsError):
            raise OpError(ErrorCode.INVALID_FIELD, "PATH clashes with a folder") from None
        with open(self._ids_path, "a", encoding="utf-8") as file:
            file.write(write_id + "\n")
        self.ids.add(write_id)
        self.writes += 1
        return True


def sink_ops(store: SinkStore) -> list[Op]:
    async def write(params: Params, ctx: OpContext) -> Result:
        if ctx.client_id is None:
            raise OpError(ErrorCode.MISSING_FIELD, "ID")
        stored = await trio.to_thread.run_sync(
            store.append, ctx.client_id, params.text("PATH"), params.text("DATA")
        )
        return Result("stored" if stored else "duplicate", scope=("memory",))

    async def read(params: Params, ctx: OpContext) -> Result:
        target = store.resolve(params.text("PATH"))
        try:
            return Result(await trio.Path(target).read_text("utf-8"), scope=("memory",))
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise OpError(ErrorCode.INVALID_FIELD, "no such PATH") from None

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


@asynccontextmanager
async def open_sink_dispatcher(directory: str) -> AsyncIterator[Dispatcher]:
    """A dispatcher for the sink's ops; it keeps no outbox of its own worth delivering."""
    config = Config(outbox=OutboxConfig(path=os.path.join(directory, ".sink-outbox.sqlite3")))
    store = SinkStore(directory)
    async with open_outbox(config.outbox_path, config.outbox, config.memory) as outbox:
        services = Services(config, outbox, extras={"sink": store})
        yield Dispatcher(Registry(sink_ops(store)), services, Stats(), audit=False)


async def serve_memory_sink(
    socket_path: str,
    directory: str,
    *,
    task_status: trio.TaskStatus[SinkStore] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the sink at ``socket_path`` until cancelled. The socket's folder is made (0700)
    before the store's, so a store folder beside the socket cannot leave it 0755."""
    prepare_socket_directory(socket_path)
    conn = ConnectionConfig(
        max_line_bytes=_MAX_BYTES,
        max_frame_bytes=_MAX_BYTES,
        max_in_flight=1024,
        max_queued_replies=1024,
    )
    options = StreamOptions(conn, None, sequential=True)
    shutdown = Shutdown()
    async with open_sink_dispatcher(directory) as dispatcher, trio.open_nursery() as nursery:

        async def handle(stream: trio.SocketStream, peer: Peer) -> None:
            await serve_stream(stream, dispatcher, peer, options, shutdown)

        await nursery.start(
            lambda task_status: serve_unix(
                socket_path,
                dispatcher.services.config.socket,
                handle,
                handler_nursery=nursery,
                task_status=task_status,
            )
        )
        task_status.started(dispatcher.services.extras["sink"])
