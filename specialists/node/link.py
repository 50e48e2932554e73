"""The daemon's end of one node connection (protocol/NODES.md): one reader (the one read loop,
``core.stream.serve_stream``, with the link as its handler), one write lock.

The node's TASK frames are link frames only (hello, pair, heartbeat, media), answered in
order by this loop; anything else is refused and can never reach the daemon's ops (N-3). The
node's STATUS frames answer the daemon's action tasks and wake their callers by ID. When the
link ends (EOF, a budget, the heartbeat deadline, a revoke) every call waiting on it fails
``node_unavailable`` at once (N-13).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
from collections.abc import Mapping
from typing import Any, Protocol

import trio

from csp_web.core.api.errors import OpError
from csp_web.core.api.replies import Result, fail_reply, ok_reply
from csp_web.core.wire.stream import StreamHandler, serve_stream
from protocol import (
    Connection,
    ErrorCode,
    Limits,
    NumberError,
    ProtocolError,
    Reply,
    Task,
    serialize,
)
from specialists.node.config import NodesConfig

from .results import MediaAssembly
from .wire import DOMAIN, LINK_OPS, RESULT, Hello, decode_chunk


class LinkHub(Protocol):
    """What a link needs of the hub (``hub.NodeHub``): its settings, and the hand-offs of a
    link's hello, pairing request and end. A Protocol, so the link does not import the hub
    that imports it."""

    config: NodesConfig

    async def on_hello(self, link: NodeLink, task: Task) -> Result: ...
    async def on_pair(self, link: NodeLink, task: Task) -> Result: ...
    def detach(self, link: NodeLink) -> None: ...


log = logging.getLogger(__name__)
MAX_BAD_FRAMES = 10  # as the client connections' L-6 budget
WRITE_TIMEOUT_S = 10.0  # as connection.write_timeout_s: a node that does not read is cut


class _Call:
    __slots__ = ("action", "done", "error", "media", "reply")

    def __init__(self, action: str, max_media_bytes: int) -> None:
        self.action = action
        self.done = trio.Event()
        self.reply: Reply | None = None
        self.error: OpError | None = None
        self.media = MediaAssembly(max_media_bytes)


class NodeLink(StreamHandler):
    """One node connection; ``source`` names its peer for the attempt limiter (``uid:N``,
    ``ip:A``). ``name`` and ``hello`` are set once the node is known (hello or approval)."""

    def __init__(self, stream: trio.abc.Stream, hub: LinkHub, source: str) -> None:
        self.stream = stream
        self.hub = hub
        self.source = source
        self.codec = Connection(Limits())
        self.hello: Hello | None = None
        self.paired = False
        self.pair_expires_at: float | None = None  # a pairing link ends with its code (N-4)
        self.calls: dict[str, _Call] = {}
        self.ids = (f"d-{n}" for n in itertools.count(1))
        self.send_lock = trio.Lock()
        self.scope = trio.CancelScope()
        self.accepted_at = self.last_heard = trio.current_time()
        self.bad_frames = 0
        self.closing = False  # set by a refusal: the link ends once its answer is written
        self.closed = False
        self.ended = trio.Event()  # set once the link is over and its calls have failed

    @property
    def name(self) -> str | None:
        return self.hello.name if self.hello is not None else None

    @property
    def capabilities(self) -> tuple[str, ...]:
        return self.hello.capabilities if self.hello is not None else ()

    def cut(self) -> None:
        """End the link now (revoke, replaced by a newer link, heartbeat missed)."""
        self.scope.cancel()

    async def serve(self) -> None:
        """Serve until the link ends; then fail its waiting calls and close the stream."""
        try:
            with self.scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._watch_liveness)
                    await serve_stream(self.stream, self.codec, self)
                    nursery.cancel_scope.cancel()
        finally:
            self.closed = True
            self._fail_calls()
            self.hub.detach(self)
            self.ended.set()
            await trio.aclose_forcefully(self.stream)

    async def call(self, action: str, params: Mapping[str, Any]) -> tuple[Reply, MediaAssembly]:
        """Send ``action`` to the node and wait for its reply (and media); raises OpError
        node_unavailable when the link ends first, the media's error when it failed."""
        if self.closed:
            raise _unavailable(self.name)
        task_id = next(self.ids)
        call = _Call(action, self.hub.config.max_media_bytes)
        self.calls[task_id] = call
        try:
            body = json.dumps(params, separators=(",", ":"), ensure_ascii=False)
            task = Task(action, DOMAIN, RESULT, None, (("ID", task_id), ("PARAMS", body)))
            await self.send(task)
            await call.done.wait()
        finally:
            self.calls.pop(task_id, None)
        if call.error is not None:
            raise call.error
        assert call.reply is not None
        return call.reply, call.media

    async def deliver_token(self, token: str) -> None:
        """Hand an approved node its token (N-5) and wait for it to say it stored it; raises
        OpError node_unavailable when the link ends or the node does not answer in time."""
        assert self.hello is not None
        task_id = next(self.ids)
        call = _Call("paired", 0)
        self.calls[task_id] = call
        fields = (
            ("ID", task_id),
            ("NODE", self.hello.name),
            ("TOKEN", token),
            ("HEARTBEAT_S", f"{self.hub.config.heartbeat_interval_s:g}"),
        )
        try:
            await self.send(Task("paired", DOMAIN, "ACK", None, fields))
            with trio.move_on_after(self.hub.config.hello_timeout_s):
                await call.done.wait()
        finally:
            self.calls.pop(task_id, None)
        if call.reply is None or call.reply.status != "OK":
            self.cut()
            raise _unavailable(self.name)
        self.paired = True

    async def send(self, frame: Task | Reply) -> None:
        """Write ``frame``; a node that does not take it within the write limit is cut."""
        try:
            async with self.send_lock:
                with trio.fail_after(WRITE_TIMEOUT_S):
                    await self.stream.send_all(serialize(frame))
        except (trio.TooSlowError, trio.BrokenResourceError, trio.ClosedResourceError):
            self.cut()
            raise _unavailable(self.name) from None

    # --- the read loop's handler (``core.stream.StreamHandler``)

    async def on_task(self, task: Task) -> bool:
        self.last_heard = trio.current_time()
        await self._answer(task)
        return True

    async def on_reply(self, reply: Reply) -> bool:
        self.last_heard = trio.current_time()
        self._take_reply(reply)
        return True

    async def on_bad_frame(self, error: ProtocolError) -> bool:
        return await self._bad_frame(error.code, error.detail, error.frame_id)

    async def _bad_frame(self, code: ErrorCode, detail: str, frame_id: str | None) -> bool:
        self.bad_frames += 1
        if self.bad_frames > MAX_BAD_FRAMES:
            await self._reply(fail_reply(OpError(ErrorCode.TOO_MANY_BAD_FRAMES), None))
            return False
        await self._reply(fail_reply(OpError(code, detail), frame_id))
        return True

    def _take_reply(self, reply: Reply) -> None:
        call = self.calls.get(reply.id or "")
        if call is None:  # a reply to a call given up on (deadline): dropped
            log.debug("node %s: reply to no waiting task %s", self.name, reply.id)
            return
        if not call.done.is_set():
            call.reply = reply
            call.done.set()

    async def _answer(self, task: Task) -> None:
        try:
            reply = ok_reply(await self._link_op(task), task.id)
        except OpError as exc:
            reply = fail_reply(exc, task.id)
        except NumberError as exc:  # no node of ours writes a bad number: this one is cut
            log.warning("node link %s (%s) cut: bad number, %s", self.name, self.source, exc)
            self.closing = True
            reply = fail_reply(OpError(ErrorCode.INVALID_FIELD, exc.detail), task.id)
        await self._reply(reply)
        if self.closing:
            self.cut()

    async def _reply(self, reply: Reply) -> None:
        with contextlib.suppress(OpError):  # the link is cut; the reader ends with it
            await self.send(reply)

    async def _link_op(self, task: Task) -> Result:
        if task.domain != DOMAIN or task.req not in LINK_OPS:
            # Nodes are not clients: nothing a node sends reaches the daemon's ops (N-3).
            raise OpError(ErrorCode.UNKNOWN_OP, f"a node may send only {', '.join(LINK_OPS)}")
        if task.req == "hello":
            return await self.hub.on_hello(self, task)
        if task.req == "pair":
            return await self.hub.on_pair(self, task)
        if self.hello is None:
            raise OpError(ErrorCode.PERMISSION_DENIED, "say hello first")
        if task.req == "heartbeat":  # paired, or pairing and waiting for the operator
            return Result("alive", ("node",))
        if not self.paired:
            raise OpError(ErrorCode.PERMISSION_DENIED, "not paired yet")
        return self._on_media(task)

    def _on_media(self, task: Task) -> Result:
        for_id, seq, chunk = decode_chunk(task)
        call = self.calls.get(for_id)
        if call is None or call.done.is_set():
            raise OpError(ErrorCode.INVALID_FIELD, f"no task {for_id} awaits media")
        try:
            if len(chunk) > self.hub.config.max_chunk_bytes:
                limit = self.hub.config.max_chunk_bytes
                raise OpError(ErrorCode.TOO_LARGE, f"a chunk holds at most {limit} bytes")
            call.media.add(seq, chunk)
        except OpError as exc:
            call.media.failed = call.media.failed or exc
            call.error = call.media.failed  # the task fails now, not at the node's reply
            call.done.set()
            raise
        return Result(f"bytes:{call.media.size}", ("node",))

    async def _watch_liveness(self) -> None:
        """Cut a link that has not said a valid hello or pair ``hello_timeout_s`` after it
        was accepted, whatever else it sent (refused frames do not buy time); a paired or
        pairing one silent for ``heartbeat_timeout_s`` (N-7); a pairing one also when its
        code expires unapproved (N-4)."""
        config = self.hub.config
        while True:
            if self.hello is None:
                deadline = self.accepted_at + config.hello_timeout_s
            else:
                deadline = self.last_heard + config.heartbeat_timeout_s
            if not self.paired and self.pair_expires_at is not None:
                deadline = min(deadline, self.pair_expires_at)
            if trio.current_time() >= deadline:
                log.info("node link %s (%s) silent or unpaired, closing", self.name, self.source)
                self.cut()
                return
            await trio.sleep_until(deadline)

    def _fail_calls(self) -> None:
        for call in self.calls.values():
            if not call.done.is_set():
                call.error = _unavailable(self.name)
                call.done.set()


def _unavailable(name: str | None) -> OpError:
    return OpError(ErrorCode.NODE_UNAVAILABLE, name or "?", scope=("node",))
