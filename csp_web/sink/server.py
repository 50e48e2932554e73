"""The reference Memory Specialist: ``csp-web memory-sink``, and the daemon's embedded one.

``REQ:write IN:MEMORY OUT:ACK`` stores DATA under its logical PATH in a SQLite store
(``csp_web.sink.store``): ID and DATA in one transaction, many writes per transaction
(``csp_web.sink.commit``), the reply sent only after the commit. A repeated ID with the
same content is answered ``DATA duplicate`` (SPEC M-2), with other content ``FAIL id_conflict``
(M-5). ``REQ:read IN:MEMORY OUT:CONTENT`` returns a path's writes joined in order;
``REQ:list IN:MEMORY OUT:PATHS`` the stored paths under a PREFIX, a page at a time
(``csp_web.sink.listing``).

It reads with the one loop (``core.stream.serve_stream``) but has its own, lean handler, not the
daemon's connection and ``Dispatcher`` (they cost more per frame than the write itself): the
frames one read from the socket brought are collected, every frame is validated (op, ID, fields,
sizes: the catalogue's FAIL frames as the dispatcher gives them) and every write staged, in order;
then the chunk's writes are committed as one group (``csp_web.sink.commit``) and its
replies sent in one write. Frames on a connection are handled one at a time, so writes are stored
in the order they were sent, and a read sees every write sent before it. Outcomes are logged as
one INFO line of counts per ``LOG_INTERVAL_S``, not one per write.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import trio

from csp_web.config import ConnectionConfig, MemoryConfig, SocketConfig, TasksConfig
from csp_web.core.api.context import Peer
from csp_web.core.api.errors import FieldError, OpError, StorageFull
from csp_web.core.api.fields import ID_PATTERN, FieldSpec, Params, parse_timeout_ms, validate
from csp_web.core.api.replies import Result, fail_reply, ok_reply
from csp_web.core.transports.unix import Lease, prepare_socket_directory, serve_unix
from csp_web.core.wire.stream import StreamHandler, serve_stream
from csp_web.sink import listing
from csp_web.sink.commit import GroupCommit
from csp_web.sink.store import Retention, SinkStore
from protocol import (
    Connection,
    ErrorCode,
    Limits,
    ProtocolError,
    Reply,
    Task,
    serialize,
)

__all__ = ["MemorySink", "SinkStore", "open_memory_sink", "serve_memory_sink"]

log = logging.getLogger(__name__)

MAX_FRAME_BYTES = 64 * 1024 * 1024  # a full exec log is capped far below this
RECEIVE_BYTES = 256 * 1024  # one read: up to about a thousand audit writes, one commit
LOG_INTERVAL_S = 10.0
_CONNECTION = ConnectionConfig()  # bad-frame, blank-line and slowloris budgets as the daemon's

_WRITE_FIELDS = (
    FieldSpec("FROM", "choice", True, choices=("web", "tool", "sys", "client")),
    FieldSpec("TYPE", required=True, max_chars=64),
    FieldSpec("PATH", required=True, max_chars=1024),
    FieldSpec("DATA", required=True),
)
_READ_FIELDS = (FieldSpec("PATH", required=True),)
# REQ -> (OUT, fields): the sink's ops, all IN:MEMORY.
_OPS = {
    "write": ("ACK", _WRITE_FIELDS),
    "read": ("CONTENT", _READ_FIELDS),
    "list": ("PATHS", listing.FIELDS),
}
_MAX_TIMEOUT_MS = TasksConfig().max_timeout_ms


def _fields_of(task: Task) -> tuple[FieldSpec, ...]:
    """The fields of the op ``task`` names; raises FieldError as the daemon's registry does."""
    op = _OPS.get(task.req)
    if op is None:
        raise FieldError(ErrorCode.UNKNOWN_OP, task.req)
    if task.domain != "MEMORY":
        raise FieldError(ErrorCode.WRONG_DOMAIN, f"{task.req} runs IN:MEMORY")
    out, fields = op
    if task.out != out:
        raise FieldError(ErrorCode.WRONG_OUT, f"{task.req} gives OUT:{out}")
    return fields


_PLAIN_WRITE_KEYS = frozenset(("ID", "FROM", "TYPE", "PATH", "DATA"))
_SOURCES = frozenset(("web", "tool", "sys", "client"))


def _plain_write(task: Task) -> tuple[str, str, str, str, str] | None:
    """(ID, FROM, TYPE, PATH, DATA) of a write that ``validate`` would pass as it is: the five
    fields once each, nothing else, every value within its spec; None for anything else,
    which then takes the generic path and gets the same FAIL it always did. What the outbox
    sends, and nearly every frame the sink sees, is such a write: checked here in one pass."""
    fields = task.fields
    if len(fields) != 5 or task.req != "write" or task.domain != "MEMORY" or task.out != "ACK":
        return None
    given = dict(fields)
    if given.keys() != _PLAIN_WRITE_KEYS or task.inline is not None:
        return None
    task_id, source, type_, path, data = (
        given["ID"],
        given["FROM"],
        given["TYPE"],
        given["PATH"],
        given["DATA"],
    )
    if (
        source not in _SOURCES
        or not ID_PATTERN.fullmatch(task_id)
        or len(type_) > 64
        or len(path) > 1024
        or not (type_.strip() and path.strip() and data.strip())
    ):
        return None
    return task_id, source, type_, path, data


def _acknowledged(task_id: str, outcome: str) -> bytes:
    # ``task_id`` passed ID_PATTERN (SPEC C-1), so it stands raw on its line: the same bytes
    # as serialize(ok_reply(...)), without building a Reply per write.
    return f"STATUS OK\nID {task_id}\nSCOPE [memory]\nDATA {outcome}\n\n".encode()


@dataclass
class Tally:
    """Outcomes since the last log line: ``stored``, ``duplicate`` and FAIL codes."""

    counts: Counter[str] = field(default_factory=Counter)
    since: float = field(default_factory=time.monotonic)

    def maybe_log(self) -> None:
        now = time.monotonic()
        if now - self.since < LOG_INTERVAL_S:
            return
        if self.counts:
            outcomes = ", ".join(f"{key} {n}" for key, n in sorted(self.counts.items()))
            log.info("memory sink: %s in %.0fs", outcomes, now - self.since)
            self.counts.clear()
        self.since = now


@dataclass
class MemorySink:
    """A running sink: serve any number of connections with ``serve_connection``."""

    store: SinkStore
    commits: GroupCommit
    tally: Tally = field(default_factory=Tally)

    async def serve_connection(self, stream: trio.abc.Stream, peer: Peer) -> None:
        """Serve CSP/1 on ``stream`` until EOF (or a failed commit); closes it."""
        session = SinkSession(self, stream, peer)
        self.commits.gates.add(session)
        try:
            await session.run()
        finally:
            self.commits.gates.discard(session)
            await trio.aclose_forcefully(stream)


class SinkSession(StreamHandler):
    """One connection: the frames each read brings are collected, then validated and
    staged, committed as one group, and answered in one write."""

    def __init__(self, sink: MemorySink, stream: trio.abc.Stream, peer: Peer) -> None:
        self.sink = sink
        self.stream = stream
        self.peer = peer
        self.codec = Connection(
            Limits(
                MAX_FRAME_BYTES,
                MAX_FRAME_BYTES,
                _CONNECTION.max_fields,
                _CONNECTION.max_blank_lines,
            )
        )
        self.bad_frames = 0
        self.broken = False  # set by GroupCommit when a commit failed: replies are withheld
        self.unstored: set[str] = set()  # IDs a full disk kept out (set by GroupCommit)
        self.events: list[Task | Reply | ProtocolError] = []  # read, not yet answered
        self.errors = 0  # malformed frames counted as they are read (the loop stops past L-6)

    async def run(self) -> None:
        await serve_stream(self.stream, self.codec, self, receive_bytes=RECEIVE_BYTES)

    # --- the read loop's handler (``core.stream.StreamHandler``)

    async def on_task(self, task: Task) -> bool:
        self.events.append(task)
        return True

    async def on_reply(self, reply: Reply) -> bool:
        self.events.append(reply)
        return True

    async def on_bad_frame(self, error: ProtocolError) -> bool:
        self.events.append(error)
        self.errors += 1  # past the budget (or a newline flood) answering stops there
        return not (
            error.code is ErrorCode.TOO_MANY_BLANK_LINES or self.errors > _CONNECTION.max_bad_frames
        )

    async def on_drained(self, reading: bool) -> bool:
        out: list[bytes] = []
        events, self.events = self.events, []
        answering = await self.answer_frames(events, out)
        if out and not await self.send(out):
            return False
        self.sink.tally.maybe_log()
        return reading and answering

    def read_deadline(self, frame_started: float | None) -> float:
        if frame_started is None:
            return math.inf
        return frame_started + _CONNECTION.frame_deadline_s

    async def on_read_deadline(self, in_frame: bool) -> bool:
        """A started frame stalled past the deadline (slowloris): answered, then closed."""
        detail = f"frame not completed within {_CONNECTION.frame_deadline_s:g}s"
        error = OpError(ErrorCode.FRAME_TIMEOUT, detail)
        await self.send([serialize(fail_reply(error, None))])
        return False

    # --- answering

    async def send(self, replies: list[bytes]) -> bool:
        """Commit what was staged, then send ``replies`` in one write; False when the
        connection must end: a commit failed (the replies are withheld, so the writer sends
        the writes again, SPEC M-2) or the peer is gone."""
        await self.sink.commits.wait_committed()
        if self.broken:
            log.warning("%s: a commit failed, replies withheld", self.peer.connection)
            return False
        if self.unstored:
            replies = self.refuse_unstored(replies)
        try:
            await self.stream.send_all(b"".join(replies))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return False
        return True

    def refuse_unstored(self, replies: list[bytes]) -> list[bytes]:
        """``replies`` with the acknowledgement of each write a full disk kept out replaced
        by ``FAIL storage_full:memory`` (SPEC O-6); ``unstored`` is emptied."""
        refused: dict[bytes, bytes] = {}
        for task_id in self.unstored:
            fail = serialize(fail_reply(StorageFull("memory"), task_id))
            for outcome in ("stored", "duplicate"):  # a repeat in the same chunk too
                refused[_acknowledged(task_id, outcome)] = fail
        self.unstored.clear()
        answered = [refused.get(reply, reply) for reply in replies]
        self.sink.tally.counts[ErrorCode.STORAGE_FULL] += sum(r in refused for r in replies)
        return answered

    async def answer_frames(
        self, events: list[Task | Reply | ProtocolError], out: list[bytes]
    ) -> bool:
        """Answer ``events`` (what one read brought), into ``out``, in order; False to stop
        reading. The writes' IDs are looked up in the store together (one query, not one
        per write)."""
        plain = [_plain_write(item) if isinstance(item, Task) else None for item in events]
        ids = [write[0] for write in plain if write is not None]
        stored = self.sink.commits.stored_hashes(ids) if ids else None
        for item, write in zip(events, plain, strict=True):
            if isinstance(item, ProtocolError):
                if not self.bad_frame(out, item.code, item.detail, item.frame_id):
                    return False
            elif isinstance(item, Reply):
                if not self.bad_frame(out, ErrorCode.BAD_HEADER, "expected a TASK frame", item.id):
                    return False
            elif write is not None:
                out.append(self.stage_plain(write, item.id, stored))
            else:
                out.append(await self.answer(item))
                stored = None  # a read may have waited: look IDs up afresh
        return True

    def bad_frame(
        self, out: list[bytes], code: ErrorCode, detail: str, frame_id: str | None
    ) -> bool:
        """Answer a malformed frame; False when the connection must close (SPEC L-6, L-8)."""
        self.bad_frames += 1
        self.sink.tally.counts[code] += 1
        if code is ErrorCode.TOO_MANY_BLANK_LINES:
            out.append(serialize(fail_reply(OpError(code, detail), None)))
            return False
        if self.bad_frames > _CONNECTION.max_bad_frames:
            error = OpError(ErrorCode.TOO_MANY_BAD_FRAMES, f"over {_CONNECTION.max_bad_frames}")
            out.append(serialize(fail_reply(error, None)))
            return False
        out.append(serialize(fail_reply(OpError(code, detail), frame_id)))
        return True

    def stage_plain(
        self,
        write: tuple[str, str, str, str, str],
        task_id: str | None,
        stored: dict[str, bytes] | None,
    ) -> bytes:
        """The reply to a plain write (``_plain_write``), staged; ``stored`` as for
        ``GroupCommit.stage``."""
        try:
            return self.stage(*write, stored=stored)
        except OpError as exc:
            self.sink.tally.counts[exc.code] += 1
            return serialize(fail_reply(exc, task_id))

    async def answer(self, task: Task) -> bytes:
        """The reply to one frame; a write is staged, a read waits for earlier writes."""
        plain = _plain_write(task)
        if plain is not None:
            return self.stage_plain(plain, task.id, None)
        try:
            params = validate(task, _fields_of(task), None)
            parse_timeout_ms(task, default_ms=_MAX_TIMEOUT_MS, max_ms=_MAX_TIMEOUT_MS)
            if task.req == "write":
                return self.write(params, task.id)
            if task.req == "list":
                return await self.list_paths(params, task.id)
            return await self.read(params, task.id)
        except OpError as exc:
            self.sink.tally.counts[exc.code] += 1
            return serialize(fail_reply(exc, task.id))

    def write(self, params: Params, task_id: str | None) -> bytes:
        if task_id is None:
            raise FieldError(ErrorCode.MISSING_FIELD, "ID")
        texts = (params.text(name) for name in ("FROM", "TYPE", "PATH", "DATA"))
        return self.stage(task_id, *texts)

    def stage(
        self,
        task_id: str,
        source: str,
        type_: str,
        path: str,
        data: str,
        *,
        stored: dict[str, bytes] | None = None,
    ) -> bytes:
        fresh = self.sink.commits.stage(source, type_, path, data, task_id, stored)
        outcome = "stored" if fresh else "duplicate"
        self.sink.tally.counts[outcome] += 1
        return _acknowledged(task_id, outcome)

    async def read(self, params: Params, task_id: str | None) -> bytes:
        await self.sink.commits.wait_committed()  # a read sees the writes sent before it
        text = self.sink.store.read(params.text("PATH"), MAX_FRAME_BYTES // 2)
        if text is None:
            raise OpError(ErrorCode.NOT_FOUND, "no writes at PATH")  # SPEC M-7
        self.sink.tally.counts["read"] += 1
        return serialize(ok_reply(Result(text, scope=("memory",)), task_id))

    async def list_paths(self, params: Params, task_id: str | None) -> bytes:
        """A page of the stored paths under PREFIX (SPEC M-9); none is ``not_found``."""
        prefix = listing.check_prefix(params.opt_text("PREFIX") or "")
        start = params.opt_text("START")
        if start is not None:
            listing.check_start(start)
        await self.sink.commits.wait_committed()  # as a read: every write sent before it
        page = listing.list_page(self.sink.store, prefix, start, params.integer("MAX_RESULTS"))
        if not page.paths:
            raise OpError(ErrorCode.NOT_FOUND, "no writes under PREFIX")
        fields = [("PATH", path) for path in page.paths]
        if page.next_start is not None:
            fields.append(("NEXT_START", page.next_start))
        self.sink.tally.counts["list"] += 1
        result = Result(f"paths:{len(page.paths)}", scope=("memory",), fields=tuple(fields))
        return serialize(ok_reply(result, task_id))


@asynccontextmanager
async def open_memory_sink(directory: str, memory: MemoryConfig) -> AsyncIterator[MemorySink]:
    """Open the store under ``directory`` and run its committer; both end on exit, after the
    caller's connections (which must be served inside this context)."""
    retention = Retention(memory.retention_max_bytes, memory.retention_max_age_s)
    store = await trio.to_thread.run_sync(SinkStore, directory, retention)
    try:
        commits = GroupCommit(store)
        async with trio.open_nursery() as nursery:
            await nursery.start(commits.serve)
            yield MemorySink(store, commits)
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
                SocketConfig(),
                handle,
                handler_nursery=nursery,
                task_status=task_status,
            )
        )
        task_status.started(sink.store)
