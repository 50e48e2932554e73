"""How the MCP face reaches the daemon core: a running daemon's socket, or one in process.

Either way the face is a CSP/1 client, so every tool call is a task the daemon admits,
validates, guards, caches, rate-limits, audits and logs to memory as any other. A running
daemon may restart under the face: ``DaemonLink`` then reconnects in the background, with
a bounded backoff, and a call made while it is down waits a bounded time for it. Every
connection, the first and each reconnect, is checked to be served by our own uid
(``check_own_daemon``): whoever binds the socket path while the daemon is down would
otherwise receive every tool call the face makes.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import struct
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Protocol

import trio

from csp_web.client.matcher import new_id_prefix
from csp_web.client.trio_client import Client, ClientClosed, running_beside
from csp_web.config import Config
from protocol import Limits, Reply, Task

log = logging.getLogger(__name__)

# As ``open_client``'s: a daemon's reply may carry a whole page.
_LIMITS = Limits(max_line_bytes=64 << 20, max_frame_bytes=64 << 20, max_fields=100_000)
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid (unix(7))


class DaemonCaller(Protocol):
    """What the face calls the daemon through: ``Client`` (in process) or ``DaemonLink``."""

    async def call(self, task: Task, *, timeout_s: float = 60.0) -> Reply: ...


class ForeignDaemon(OSError):
    """The socket is served by a process of another uid than the one expected (ours)."""


def check_own_daemon(
    sock: socket.socket | trio.socket.SocketType, path: str, expected_uid: int
) -> None:
    """Raise ForeignDaemon unless the process at the other end of the Unix socket ``sock``
    (connected to ``path``) runs as ``expected_uid``, by the kernel's word (SO_PEERCRED);
    OSError when the kernel cannot say."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    uid = _PEERCRED.unpack(creds)[1]
    if uid != expected_uid:
        raise ForeignDaemon(f"{path} is served by uid {uid}, not uid {expected_uid}")


class DaemonDown(Exception):
    """The daemon's socket does not answer, or the connection ended before the reply; the
    message says which (the detail of ``daemon_unavailable``)."""


@dataclass(frozen=True)
class Reconnect:
    """How ``DaemonLink`` reconnects: the backoff between attempts doubles from
    ``backoff_initial_s`` up to ``backoff_max_s``; one attempt gives up after
    ``connect_timeout_s``; a call waits at most ``call_wait_s`` for the daemon to be back."""

    backoff_initial_s: float = 0.05
    backoff_max_s: float = 2.0
    connect_timeout_s: float = 2.0
    call_wait_s: float = 5.0


class DaemonLink:
    """A client of the daemon at ``path`` that outlives the daemon's restarts.

    ``keep`` (run by ``open_daemon_link`` on its first connection) holds one connection at a
    time and, when it ends, connects again with backoff until the link closes. Each
    connection gets fresh automatic IDs. A call that finds no connection waits up to
    ``Reconnect.call_wait_s`` for one. A connection not served by ``expected_uid`` (else
    ours) is closed and counts as no daemon.
    """

    def __init__(self, path: str, policy: Reconnect, *, expected_uid: int | None = None) -> None:
        self.path = path
        self.policy = policy
        self.expected_uid = os.getuid() if expected_uid is None else expected_uid
        self.connects = 0  # connections made, the first included
        self._client: Client | None = None
        self._up = trio.Event()
        self._gone = trio.Event()  # set when the current connection ends
        self._connected = trio.Event()  # set (then replaced) at each new connection
        self._why = "not connected yet"

    @property
    def connected(self) -> bool:
        return self._client is not None

    async def wait_connection(self, after: int) -> int:
        """Until a connection later than the ``after``-th is up (``connects`` counts them);
        returns its number."""
        while self.connects <= after:
            await self._connected.wait()
        return self.connects

    async def wait_gone(self) -> None:
        """Until the connection held now (if any) has ended."""
        if self._client is not None:
            await self._gone.wait()

    async def call(self, task: Task, *, timeout_s: float = 60.0) -> Reply:
        """The daemon's reply to ``task``. Raises DaemonDown when no connection comes within
        ``call_wait_s`` or the connection ends before the reply, trio.TooSlowError after
        ``timeout_s``."""
        client = self._client
        if client is None:
            with trio.move_on_after(self.policy.call_wait_s):
                await self._up.wait()
            client = self._client
        if client is None:
            raise DaemonDown(
                f"no daemon answers at {self.path} ({self._why}); "
                f"reconnecting every {self.policy.backoff_max_s:g}s at most"
            )
        try:
            return await client.call(task, timeout_s=timeout_s)
        except ClientClosed:
            raise DaemonDown(
                f"the daemon at {self.path} closed the connection before the reply"
            ) from None

    async def keep(self, stream: trio.SocketStream) -> None:
        """Serve replies on ``stream`` until the daemon goes, connect again (backoff), and so
        on until cancelled."""
        while True:
            await self._serve(stream)
            delay = self.policy.backoff_initial_s
            while True:
                try:
                    stream = await self.connect()
                    break
                except (OSError, trio.TooSlowError) as exc:
                    self._why = str(exc) or type(exc).__name__
                    await trio.sleep(delay)
                    delay = min(delay * 2, self.policy.backoff_max_s)
            log.info("reconnected to the daemon at %s", self.path)

    async def connect(self) -> trio.SocketStream:
        """A new connection to the daemon, served by ``expected_uid``; raises ForeignDaemon
        (logged; the connection closed) when another uid serves it, OSError, or
        trio.TooSlowError after ``connect_timeout_s``."""
        with trio.fail_after(self.policy.connect_timeout_s):
            stream = await trio.open_unix_socket(self.path)
        try:
            check_own_daemon(stream.socket, self.path, self.expected_uid)
        except OSError as exc:
            stream.socket.close()  # nothing was sent: no graceful close owed
            log.warning("not using the daemon socket: %s", exc)
            raise
        return stream

    async def _serve(self, stream: trio.SocketStream) -> None:
        async with stream:
            client = Client(stream, _LIMITS, id_prefix=new_id_prefix())
            self._client, self._gone = client, trio.Event()
            self.connects += 1
            self._up.set()
            self._connected.set()
            self._connected = trio.Event()
            await client.serve_replies()  # returns when the daemon closes or goes
        self._client, self._up = None, trio.Event()
        self._gone.set()
        self._why = "the connection ended"
        log.warning("the daemon at %s closed the connection; reconnecting", self.path)


@asynccontextmanager
async def open_daemon_link(
    path: str, policy: Reconnect | None = None, *, expected_uid: int | None = None
) -> AsyncIterator[DaemonLink]:
    """A ``DaemonLink`` to ``path`` (served by ``expected_uid``, else ours), connected; it
    stops reconnecting when the block ends. Raises OSError (ForeignDaemon for another uid's
    socket) or trio.TooSlowError when the socket does not answer at first."""
    link = DaemonLink(path, policy or Reconnect(), expected_uid=expected_uid)
    stream = await link.connect()
    async with running_beside(functools.partial(link.keep, stream)):
        yield link


# A client of a daemon core run in this process, as the composition root runs it
# (csp_web.app.compose.open_in_process_daemon); the caller holds the state directory's lock.
OpenInProcess = Callable[[Config], AbstractAsyncContextManager[Client]]


@asynccontextmanager
async def open_daemon_client(
    config: Config, socket_path: str | None, *, in_process: OpenInProcess
) -> AsyncIterator[DaemonCaller]:
    """A link to the daemon at ``socket_path`` (reconnecting), else a client of a daemon core
    run in process by ``in_process``.

    Raises OSError or trio.TooSlowError when the socket does not answer at first. The
    in-process daemon stops when the block ends (its stream sees EOF, as ``csp-web serve`` at
    the end of stdin: in-flight work finishes, the outbox is flushed) or on SIGTERM/SIGINT,
    which then cancels the block.
    """
    if socket_path is not None:
        async with open_daemon_link(socket_path) as link:
            yield link
        return
    async with in_process(config) as client:
        yield client
