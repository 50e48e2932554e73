"""The Unix-socket transport: a private socket, peer credentials checked on accept.

The socket is created 0600 inside a 0700 directory the daemon owns; a stale socket is removed
only when it is a socket nobody answers on. Each accepted peer's uid (SO_PEERCRED) must be
allowed, and connections are capped overall and per uid; at a cap the connection idle the
longest is evicted to make room, and only when none is idle is the newcomer refused ``busy``
(so idle hoarders cannot lock a uid out). Served with trio's own
``SocketListener`` and ``serve_listeners``, handlers running in a nursery the caller owns so
that a shutdown can stop accepting while connections finish.
"""

from __future__ import annotations

import errno
import logging
import os
import socket as stdlib_socket
import stat
import struct
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import trio

from csp_web.config import SocketConfig
from csp_web.core.api.context import Peer
from csp_web.core.api.errors import OpError
from csp_web.core.api.ports import allowed_uids
from csp_web.core.api.replies import fail_reply
from csp_web.core.transports.systemd import inherited_unix_listener
from protocol import ErrorCode, serialize

log = logging.getLogger(__name__)
# listen() clamps to net.core.somaxconn, so asking for the most a backlog can be gets the
# kernel's limit, whatever the host set it to (trio's open_tcp_listeners does the same).
_KERNEL_BACKLOG = 0xFFFF
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


class Tenant(Protocol):
    """What the gate needs from a served connection to evict it."""

    def idle_since(self) -> float | None:
        """When it last did anything, or None while it has work, bytes or replies pending."""

    def evict(self) -> None:
        """Close it soon, losing nothing it has received."""


@dataclass(eq=False)
class Lease:
    """One admitted connection; the handler sets ``tenant`` to make it evictable."""

    uid: int
    connection: str
    number: int  # acceptance order: of two equally idle connections the older goes first
    tenant: Tenant | None = None
    released: bool = False


ConnectionHandler = Callable[[trio.SocketStream, Peer, Lease], Awaitable[None]]


class SocketSetupError(Exception):
    """The socket path cannot be used safely; the message says why."""


def peer_credentials(sock: trio.socket.SocketType) -> tuple[int, int]:
    """(pid, uid) of the process at the other end, from the kernel (SO_PEERCRED)."""
    raw = sock.getsockopt(stdlib_socket.SOL_SOCKET, stdlib_socket.SO_PEERCRED, _PEERCRED.size)
    pid, uid, _gid = _PEERCRED.unpack(raw)
    return pid, uid


def _prepare_directory(path: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, mode=0o700, exist_ok=True)
    info = os.stat(directory)
    if info.st_uid != os.geteuid() or info.st_mode & 0o077:
        raise SocketSetupError(
            f"{directory} must be owned by uid {os.geteuid()} and mode 0700"
            f" (it is uid {info.st_uid}, mode {stat.S_IMODE(info.st_mode):04o})"
        )


async def _remove_stale(path: str) -> None:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise SocketSetupError(f"{path} exists and is not a socket; not removing it")
    probe = trio.socket.socket(stdlib_socket.AF_UNIX, stdlib_socket.SOCK_STREAM)
    with probe:
        try:
            await probe.connect(path)
        except OSError as exc:
            if exc.errno not in (errno.ECONNREFUSED, errno.ENOENT):
                raise
        else:
            raise SocketSetupError(f"another process is serving {path}")
    os.unlink(path)


def prepare_socket_directory(path: str) -> None:
    """Create the socket's folder 0700 (or check it is private); raises SocketSetupError."""
    try:
        _prepare_directory(path)
    except OSError as exc:
        raise SocketSetupError(f"cannot create the folder of {path}: {exc.strerror}") from exc


async def open_unix_listener(path: str, *, backlog: int | None) -> trio.SocketListener:
    """Bind a private listening socket at ``path``, holding up to ``backlog`` pending connects
    (None: the kernel's limit); raises SocketSetupError, whose message is one line naming the
    path and the cause."""
    return trio.SocketListener(trio.socket.from_stdlib_socket(await _bind(path, backlog)))


async def _bind(path: str, backlog: int | None) -> stdlib_socket.socket:
    """The listening socket of ``open_unix_listener``, as the stdlib object (non-blocking)."""
    prepare_socket_directory(path)
    try:
        await _remove_stale(path)
    except OSError as exc:
        raise SocketSetupError(f"cannot check the old socket {path}: {exc.strerror}") from exc
    sock = stdlib_socket.socket(stdlib_socket.AF_UNIX, stdlib_socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        sock.bind(path)
        os.chmod(path, 0o600)
        sock.listen(_KERNEL_BACKLOG if backlog is None else backlog)
    except OSError as exc:
        sock.close()
        raise SocketSetupError(f"cannot listen on {path}: {exc.strerror or exc}") from exc
    except BaseException:
        sock.close()
        raise
    return sock


def _unlink_if_ours(path: str, inode: int) -> None:
    # Another daemon may have replaced the file since; only remove the socket we bound.
    try:
        if os.stat(path).st_ino == inode:
            os.unlink(path)
    except FileNotFoundError:
        pass


class Gate:
    """Who may connect, and how many at once (overall and per uid).

    ``allowed`` gives the uids that may connect now (default: ``config``'s, fixed); the
    daemon passes its running settings' so a reload judges every later accept. ``revoke``
    closes the connections of uids a reload removed."""

    def __init__(
        self, config: SocketConfig, allowed: Callable[[], frozenset[int]] | None = None
    ) -> None:
        self.config = config
        self._allowed = allowed or (lambda: allowed_uids(config))
        self.leases: set[Lease] = set()
        self.per_uid: Counter[int] = Counter()

    @property
    def open(self) -> int:
        return len(self.leases)

    @property
    def allowed(self) -> frozenset[int]:
        return self._allowed()

    def revoke(self, allowed: frozenset[int]) -> None:
        """Close the connections of uids not in ``allowed`` as eviction does: no frame is read
        after this, frames already received are answered, then the connection closes."""
        for lease in [lease for lease in self.leases if lease.uid not in allowed]:
            log.warning("closing %s: uid %d may no longer connect", lease.connection, lease.uid)
            if lease.tenant is not None:
                lease.tenant.evict()

    def admit(self, uid: int, connection: str, number: int) -> Lease | OpError:
        """A lease for a new connection, evicting an idle one at a cap; else the refusal."""
        if uid not in self.allowed:
            return OpError(ErrorCode.PERMISSION_DENIED, f"uid {uid} may not connect")
        if self.per_uid[uid] >= self.config.max_connections_per_uid and not self._evict(uid):
            return OpError(ErrorCode.BUSY, f"too many connections for uid {uid}")
        if self.open >= self.config.max_connections and not self._evict(None):
            return OpError(ErrorCode.BUSY, "too many connections")
        lease = Lease(uid, connection, number)
        self.leases.add(lease)
        self.per_uid[uid] += 1
        return lease

    def release(self, lease: Lease) -> None:
        if not lease.released:
            lease.released = True
            self.leases.discard(lease)
            self.per_uid[lease.uid] -= 1

    def _evict(self, uid: int | None) -> bool:
        """Evict the longest-idle connection (of ``uid``, if given); False if none is idle."""
        idle = [
            (since, lease.number, lease)
            for lease in self.leases
            if (uid is None or lease.uid == uid)
            and lease.tenant is not None
            and (since := lease.tenant.idle_since()) is not None
        ]
        if not idle:
            return False
        *_, victim = min(idle, key=lambda entry: entry[:2])
        assert victim.tenant is not None
        log.info("evicting idle %s (uid %d) to admit a new connection", victim.connection, uid)
        victim.tenant.evict()
        self.release(victim)
        return True


async def serve_unix(
    path: str,
    config: SocketConfig,
    handler: ConnectionHandler,
    *,
    handler_nursery: trio.Nursery,
    gate: Gate | None = None,
    task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Accept connections at ``path`` until cancelled, then remove the socket file; ``gate``
    (default: one over ``config``) admits them. A socket systemd passed for ``path`` (socket
    activation) is served instead of binding one, and its file is left to systemd."""
    raw, inode = await _listen(path, config)
    listener = trio.SocketListener(trio.socket.from_stdlib_socket(raw))
    gate = gate or Gate(config)
    counter = iter(range(1, 1 << 62))

    async def accept(stream: trio.SocketStream) -> None:
        pid, uid = peer_credentials(stream.socket)
        number = next(counter)
        peer = Peer(f"unix-{number}", uid, pid)
        lease = gate.admit(uid, peer.connection, number)
        if isinstance(lease, OpError):
            log.warning("refused %s (uid %d pid %d): %s", peer.connection, uid, pid, lease)
            with trio.move_on_after(1):
                await stream.send_all(serialize(fail_reply(lease, None)))
            await trio.aclose_forcefully(stream)
            return
        try:
            await handler(stream, peer, lease)
        finally:
            gate.release(lease)

    try:
        log.info("listening on %s", path)
        task_status.started([listener])
        await _accept_forever(listener, raw, accept, handler_nursery)
    finally:
        with trio.CancelScope(shield=True):
            await listener.aclose()
        if inode is not None:
            _unlink_if_ours(path, inode)


# Pending connects accepted per scheduler round. trio's serve_listeners accepts one per round,
# and under load a round is long: a burst of 1,000 connects then took 1,000 rounds, and a fresh
# client's connect waited 17 s behind them (bench/fairness.py, issue 21). 64 per round drains
# that burst in 16 rounds, while a round still does a bounded amount of accepting.
_ACCEPT_BATCH = 64
# What accept(2) fails with when the process or the system is out of descriptors or memory:
# the connect stays pending; accept again after a pause (as trio's serve_listeners does).
_ACCEPT_RESOURCE_ERRORS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}


async def _accept_forever(
    listener: trio.SocketListener,
    raw: stdlib_socket.socket,
    handle: Callable[[trio.SocketStream], Awaitable[None]],
    nursery: trio.Nursery,
) -> None:
    """Start ``handle`` for each accepted connection in ``nursery`` until cancelled, up to
    ``_ACCEPT_BATCH`` connects per scheduler round."""
    while True:
        await trio.lowlevel.wait_readable(listener.socket)
        for _ in range(_ACCEPT_BATCH):
            try:
                conn, _ = raw.accept()
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno not in _ACCEPT_RESOURCE_ERRORS:
                    raise
                log.error("accept failed, pausing 100 ms: %s", exc)
                await trio.sleep(0.1)
                break
            stream = trio.SocketStream(trio.socket.from_stdlib_socket(conn))
            nursery.start_soon(_run_handler, handle, stream)


async def _run_handler(
    handle: Callable[[trio.SocketStream], Awaitable[None]], stream: trio.SocketStream
) -> None:
    """``handle(stream)``, then close the stream whatever happened (as serve_listeners)."""
    try:
        await handle(stream)
    finally:
        await trio.aclose_forcefully(stream)


async def _listen(path: str, config: SocketConfig) -> tuple[stdlib_socket.socket, int | None]:
    """The listening socket for ``path`` and the inode to remove at exit (None: systemd's)."""
    inherited = _inherited_listener(path)
    if inherited is None:
        sock = await _bind(path, config.backlog)
        return sock, os.stat(path).st_ino
    inherited.setblocking(False)
    return inherited, None


def _inherited_listener(path: str) -> stdlib_socket.socket | None:
    """The socket systemd passed, if any; raises SocketSetupError when it is not ``path``."""
    inherited = inherited_unix_listener()
    if inherited is None:
        return None
    bound = inherited.getsockname()
    if bound != os.path.abspath(path):
        raise SocketSetupError(f"systemd passed the socket {bound}, not {path}: set socket.path")
    log.info("serving the socket systemd passed: %s", bound)
    return inherited
