"""Who is at the other end of an HTTP connection to the face: the same uid rule as the daemon's
socket (``socket.allowed_uids``, else the daemon's own uid).

The face calls the daemon as its own uid, so without this check any local user could reach
the daemon's ops (``shell_exec`` included) through the face's loopback port, past the allow-list
the daemon's socket enforces. A Unix socket peer's uid comes from SO_PEERCRED; a loopback TCP
peer's from the kernel's socket table (``/proc/net/tcp``, ``/proc/net/tcp6``), where the
client's end of the connection is listed with the uid that owns it (as identd reads it).
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable, Iterable

import trio

from csp_web.core.unix import peer_credentials
from csp_web.mcp_face.asgi import Admit

_TABLES = {socket.AF_INET: "/proc/net/tcp", socket.AF_INET6: "/proc/net/tcp6"}


def uid_gate(allowed: Callable[[], frozenset[int]]) -> Admit:
    """An ``Admit`` that serves only peers whose uid is in ``allowed()`` (read per connection,
    so a reloaded allow-list applies to the next one)."""

    def admit(stream: trio.SocketStream) -> str | None:
        uid = peer_uid(stream.socket)
        if uid is None:
            return "the peer's uid cannot be known"
        if uid not in allowed():
            return f"uid {uid} is not allowed (socket.allowed_uids)"
        return None

    return admit


def peer_uid(sock: trio.socket.SocketType) -> int | None:
    """The uid of the process at the other end of ``sock`` (Unix or loopback TCP), or None
    when the kernel does not say (the peer has already gone, or no /proc)."""
    if sock.family == socket.AF_UNIX:
        return peer_credentials(sock)[1]
    table = _TABLES.get(sock.family)
    if table is None:
        return None
    local, remote = sock.getsockname(), sock.getpeername()
    # The client's end: its local address is our peer, its remote address is us.
    wanted = (_hex_address(sock.family, remote), _hex_address(sock.family, local))
    try:
        with open(table, encoding="ascii") as rows:
            return uid_in_table(rows, wanted)
    except OSError:
        return None


def uid_in_table(rows: Iterable[str], wanted: tuple[str, str]) -> int | None:
    for row in rows:
        parts = row.split()
        if len(parts) > 7 and (parts[1], parts[2]) == wanted:
            return int(parts[7])
    return None


def _hex_address(family: int, address: tuple[object, ...]) -> str:
    """``address`` as the kernel's table spells it: the address as 32-bit words in host byte
    order, then the port, in upper-case hex (``0100007F:1F90`` on x86)."""
    packed = socket.inet_pton(family, str(address[0]))
    words = (packed[i : i + 4] for i in range(0, len(packed), 4))
    text = "".join(f"{int.from_bytes(word, sys.byteorder):08X}" for word in words)
    return f"{text}:{int(str(address[1])):04X}"
