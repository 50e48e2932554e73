"""The reference node: ``csp-web node run --connect <socket|host:port> --name NAME``.

It connects (a Unix path, or host:port with TLS and a pinned SHA-256 certificate
fingerprint), says hello with its stored token, or asks to pair and prints the code for the
operator, stores the token it is then given (0600), sends heartbeats, and runs the daemon's
action tasks with its backends, sending media in checksummed chunks before the reply.
It exits when the link ends (3) or its token is refused (5): a supervisor restarts it.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

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
    Status,
    Task,
    parse_decimal,
    parse_uint,
    serialize,
)

from .backends import Backend, BackendError, BackendOptions, Capture, detect, work_ms
from .transports import pinned_client_context
from .wire import DOMAIN, RESULT, Hello, MediaInfo, chunk_task, hello_fields, media_line

log = logging.getLogger(__name__)
EXIT_OK, EXIT_UNREACHABLE, EXIT_REFUSED = 0, 3, 5
CHUNK_BYTES = 64 * 1024  # under the daemon's max_chunk_bytes default (96 KiB)


class LinkClosed(Exception):
    """The daemon closed the link (or it broke)."""


@dataclass(frozen=True)
class NodeOptions:
    connect: str
    name: str
    token_file: str
    fingerprint: str | None = None  # required for host:port
    platform: str = field(default_factory=lambda: f"{platform.system()}/{platform.machine()}")
    backends: BackendOptions = field(default_factory=BackendOptions)


def is_tcp_address(connect: str) -> bool:
    host, sep, port = connect.rpartition(":")
    return bool(sep and host and _port(port) is not None and "/" not in connect)


def _port(text: str) -> int | None:
    """The TCP port ``text`` names in ASCII digits (1 to 65535), else None."""
    try:
        return parse_uint(text, max_digits=5, maximum=65535) or None
    except NumberError:
        return None


def seconds(text: str | None, default: float) -> float:
    """A duration the daemon sent (HEARTBEAT_S, EXPIRES_S): an ASCII decimal above zero,
    else ``default`` (NaN made trio's sleep raise, "inf" made the node never beat)."""
    try:
        value = parse_decimal(text or "", max_chars=12)
    except NumberError:
        return default
    return value if value > 0 else default


async def open_link(options: NodeOptions) -> trio.abc.Stream:
    """Connect to the daemon; raises OSError, or ValueError when a TLS peer's certificate is
    not the pinned one (or no fingerprint was given)."""
    if not is_tcp_address(options.connect):
        return await trio.open_unix_socket(options.connect)
    if not options.fingerprint:
        raise ValueError("a host:port needs --fingerprint (from `csp-web nodes list`)")
    host, _, port = options.connect.rpartition(":")
    tcp = await trio.open_tcp_stream(host.strip("[]"), _port(port) or 0)
    stream = trio.SSLStream(tcp, pinned_client_context(), server_hostname=None)
    try:
        await stream.do_handshake()
        der = stream.getpeercert(binary_form=True)
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise
    seen = hashlib.sha256(der or b"").hexdigest()
    if seen != options.fingerprint.lower().replace(":", "").removeprefix("sha256"):
        await trio.aclose_forcefully(stream)
        raise ValueError(f"the daemon's certificate is sha256 {seen}, not the pinned one")
    return stream


class NodeAgent(StreamHandler):
    """One link to the daemon, from this node's side."""

    tasks: trio.Nursery  # the daemon's action tasks, open while the link is read

    def __init__(
        self,
        stream: trio.abc.Stream,
        options: NodeOptions,
        backends: dict[str, Backend],
        *,
        on_code: Callable[[str], None] | None = None,
    ) -> None:
        self.stream = stream
        self.on_code = on_code or _print_code
        self.options = options
        self.backends = backends
        self.codec = Connection(Limits())
        self.send_lock = trio.Lock()
        self.ids = (f"n-{n}" for n in itertools.count(1))
        self.waiting: dict[str, tuple[trio.Event, list[Reply]]] = {}
        self.paired = trio.Event()
        self.heartbeat_s = 10.0
        self.closed = trio.Event()

    def hello(self, token: str | None) -> Hello:
        return Hello(self.options.name, self.options.platform, tuple(sorted(self.backends)), token)

    async def run(self) -> int:
        """Join (hello or pairing) and serve until the link ends; closes the stream."""
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read, nursery)
                try:
                    code = await self._join()
                    if code == EXIT_OK:
                        nursery.start_soon(self._beat)
                        await self.closed.wait()
                        log.warning("node %s: the daemon closed the link", self.options.name)
                        code = EXIT_UNREACHABLE
                except LinkClosed:
                    log.warning("node %s: the link closed", self.options.name)
                    code = EXIT_UNREACHABLE
                nursery.cancel_scope.cancel()
        finally:
            await trio.aclose_forcefully(self.stream)
        return code

    async def _join(self) -> int:
        token = read_token(self.options.token_file)
        if token is not None:
            reply = await self.call(
                Task("hello", DOMAIN, "WELCOME", None, hello_fields(self.hello(token)))
            )
            if reply.status is not Status.OK:
                log.error("node %s: hello refused: %s", self.options.name, reply.get("ERROR"))
                return EXIT_REFUSED
            self.heartbeat_s = seconds(reply.get("HEARTBEAT_S"), self.heartbeat_s)
            log.info("node %s: connected", self.options.name)
            return EXIT_OK
        pair = Task("pair", DOMAIN, "PAIR_CODE", None, hello_fields(self.hello(None)))
        reply = await self.call(pair)
        if reply.status is not Status.OK:
            log.error("node %s: pairing refused: %s", self.options.name, reply.get("ERROR"))
            return EXIT_REFUSED
        self.on_code((reply.get("DATA") or "").removeprefix("code:"))
        expires = seconds(reply.get("EXPIRES_S"), 300.0)
        with trio.move_on_after(expires):
            async with trio.open_nursery() as beats:
                beats.start_soon(self._beat)
                await self.paired.wait()
                beats.cancel_scope.cancel()
        if not self.paired.is_set():
            log.error("node %s: the pairing code expired", self.options.name)
            return EXIT_REFUSED
        return EXIT_OK

    async def call(self, task: Task) -> Reply:
        """Send a link frame and wait for the daemon's answer; raises LinkClosed."""
        task_id = next(self.ids)
        task = Task(task.req, task.domain, task.out, None, (("ID", task_id), *task.fields))
        event, slot = trio.Event(), list[Reply]()
        self.waiting[task_id] = (event, slot)
        try:
            await self.send(task)
            await event.wait()
        finally:
            self.waiting.pop(task_id, None)
        if not slot:
            raise LinkClosed
        return slot[0]

    async def send(self, frame: Task | Reply) -> None:
        try:
            async with self.send_lock:
                await self.stream.send_all(serialize(frame))
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise LinkClosed from exc

    async def _beat(self) -> None:
        while True:
            await trio.sleep(self.heartbeat_s)
            await self.call(Task("heartbeat", DOMAIN, "ACK"))

    async def _read(self, nursery: trio.Nursery) -> None:
        """Read the link with the one read loop (``core.stream.serve_stream``) until it ends;
        then wake every call waiting for an answer (it fails ``LinkClosed``)."""
        self.tasks = nursery
        try:
            await serve_stream(self.stream, self.codec, self)
        finally:
            self.closed.set()
            for event_, _ in self.waiting.values():
                event_.set()

    # --- the read loop's handler (``core.stream.StreamHandler``)

    async def on_task(self, task: Task) -> bool:
        self.tasks.start_soon(self._on_task, task)
        return True

    async def on_reply(self, reply: Reply) -> bool:
        waiter = self.waiting.get(reply.id or "")
        if waiter is not None:
            waiter[1].append(reply)
            waiter[0].set()
        return True

    async def on_bad_frame(self, error: ProtocolError) -> bool:
        # The daemon never sends a malformed frame: whatever sent this is not it.
        log.warning(
            "node %s: malformed frame from the daemon (%s), closing", self.options.name, error
        )
        return False

    async def _on_task(self, task: Task) -> None:
        try:
            if task.req == "paired" and task.domain == DOMAIN:
                await self._store_token(task)
            elif task.domain == DOMAIN and task.out == RESULT:
                await self.send(await self._run_action(task))
            else:
                await self.send(
                    _fail(task.id, ErrorCode.UNKNOWN_OP, f"{task.req} IN:{task.domain}")
                )
        except LinkClosed:
            pass

    async def _store_token(self, task: Task) -> None:
        token = task.get("TOKEN") or ""
        write_token(self.options.token_file, token)
        self.heartbeat_s = seconds(task.get("HEARTBEAT_S"), self.heartbeat_s)
        await self.send(ok_reply(Result("stored", ("node",)), task.id))
        log.info("node %s: paired; token stored in %s", self.options.name, self.options.token_file)
        self.paired.set()

    async def _run_action(self, task: Task) -> Reply:
        started = time.monotonic()
        log.info("node %s: running %s (%s)", self.options.name, task.req, task.id)
        backend = self.backends.get(task.req)
        if backend is None:
            return _fail(task.id, ErrorCode.NOT_AVAILABLE, f"{task.req} is not offered here")
        try:
            params = json.loads(task.get("PARAMS") or "{}")
            if not isinstance(params, dict):
                raise BackendError(ErrorCode.INVALID_FIELD, "PARAMS must be a JSON object")
            capture = await backend(params)
        except BackendError as exc:
            return _fail(task.id, exc.code, exc.detail)
        except ValueError:
            return _fail(task.id, ErrorCode.INVALID_FIELD, "PARAMS is not JSON")
        fields: list[tuple[str, str]] = []
        data = capture.data
        if capture.media is not None:
            failure = await self._send_media(task.id or "", capture)
            if failure is not None:
                return failure
            digest = hashlib.sha256(capture.media).hexdigest()
            info = MediaInfo(digest, len(capture.media), capture.mime or "")
            data = "media"
            fields.append(("MEDIA", media_line(info)))
        fields += [*capture.fields, ("WORK_MS", work_ms(started))]
        return ok_reply(Result(data, ("node",), tuple(fields)), task.id)

    async def _send_media(self, for_id: str, capture: Capture) -> Reply | None:
        """Send the capture in chunks, each acknowledged; the daemon's refusal (too_large)
        ends it and becomes the reply."""
        media = capture.media or b""
        for seq, start in enumerate(range(0, max(len(media), 1), CHUNK_BYTES)):
            ack = await self.call(chunk_task(for_id, seq, media[start : start + CHUNK_BYTES]))
            if ack.status is not Status.OK:
                code, _, detail = (ack.get("ERROR") or "node_error:").partition(":")
                return _fail(for_id, code, detail)
        return None


_CODES = {str(code): code for code in ErrorCode}


def _print_code(code: str) -> None:
    """The pairing code for the operator: on stdout, for a script or a terminal that reads
    the command's output, and on stderr beside the log, where a supervisor keeps it; once
    when both are the same file (a terminal)."""
    line = f"pairing code: {code} (approve on the daemon: csp-web nodes approve {code})"
    print(line, flush=True)
    if not _same_file(sys.stdout, sys.stderr):
        print(line, file=sys.stderr, flush=True)


def _same_file(one: TextIO, other: TextIO) -> bool:
    try:
        return os.path.samestat(os.fstat(one.fileno()), os.fstat(other.fileno()))
    except (OSError, ValueError):  # no descriptor (io.UnsupportedOperation: a capture)
        return False


def _fail(task_id: str | None, code: ErrorCode | str, detail: str) -> Reply:
    known = code if isinstance(code, ErrorCode) else _CODES.get(code, ErrorCode.NODE_ERROR)
    return fail_reply(OpError(known, detail, scope=("node",)), task_id)


def read_token(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as file:
            return file.read().strip() or None
    except FileNotFoundError:
        return None


def write_token(path: str, token: str) -> None:
    """Store ``token`` 0600 (its folder made 0700), replacing any older one atomically."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, mode=0o700, exist_ok=True)
    temporary = f"{path}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as file:
        file.write(token + "\n")
    os.replace(temporary, path)


async def run_node(options: NodeOptions, *, on_code: Callable[[str], None] | None = None) -> int:
    """Run the reference node until its link ends; returns its exit code. ``on_code`` is
    given the pairing code (default: print it on stdout and stderr for the operator)."""
    backends = detect(options.backends)
    try:
        stream = await open_link(options)
    except (OSError, ValueError) as exc:
        log.error("node %s: cannot connect to %s: %s", options.name, options.connect, exc)
        return EXIT_UNREACHABLE
    return await NodeAgent(stream, options, backends, on_code=on_code).run()
