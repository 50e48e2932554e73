"""Who is at the other end of an HTTP connection to the face: the same uid rule as the daemon's
socket (``socket.allowed_uids``, else the daemon's own uid).

The face calls the daemon as its own uid, so without this check any local user could reach
the daemon's ops (``shell_exec`` included) through the face's loopback port, past the allow-list
the daemon's socket enforces. A Unix socket peer's uid comes from SO_PEERCRED; a loopback TCP
peer's from the kernel's socket table (``/proc/net/tcp``, ``/proc/net/tcp6``), where the
client's end of the connection is listed with the uid that owns it (as identd reads it).

The table holds every socket on the host, so it is read in a worker thread (a few at a time),
never on the event loop, and only until the wanted row; a read that takes longer than the
gate's deadline refuses the peer (fail closed), as does a table that cannot be read.
"""

from __future__ import annotations

import ipaddress
import socket
import sys
from collections.abc import Callable, Iterable
from contextlib import suppress

import trio

from csp_web.core.transports.unix import peer_credentials
from csp_web.mcp_face.asgi import Admit
from protocol import NumberError, parse_uint

# The two rows a connection's client end may be listed as: (table, (local, remote)).
Wanted = tuple[tuple[str, tuple[str, str]], ...]
# Reads the tables and returns the uid of the first wanted row found, or None.
TableReader = Callable[[Wanted], int | None]

TCP_TABLE = "/proc/net/tcp"
TCP6_TABLE = "/proc/net/tcp6"
# Reading a table row for a new connection normally takes microseconds, even with tens of
# thousands of sockets listed; a second is a table (or kernel) that is not answering.
LOOKUP_TIMEOUT_S = 1.0
# Threads reading the tables at once: a stuck read holds one until it ends, so a hung /proc
# costs at most this many threads, and later peers are refused at their deadline.
LOOKUP_THREADS = 2


def uid_gate(
    allowed: Callable[[], frozenset[int]],
    *,
    timeout_s: float = LOOKUP_TIMEOUT_S,
    read_tables: TableReader | None = None,
) -> Admit:
    """An ``Admit`` that serves only peers whose uid is in ``allowed()`` (read per connection,
    so a reloaded allow-list applies to the next one), giving the uid it admits.
    ``read_tables`` (default: the kernel's, ``read_uid``) runs in a worker thread, at most
    ``LOOKUP_THREADS`` at once; a peer whose uid is not known within ``timeout_s`` is
    refused."""
    reader = read_tables or read_uid
    limiter = trio.CapacityLimiter(LOOKUP_THREADS)

    async def admit(stream: trio.SocketStream) -> str | int:
        with trio.move_on_after(timeout_s):
            uid = await peer_uid(stream.socket, reader, limiter)
            if uid is None:
                return "the peer's uid cannot be known"
            if uid not in allowed():
                return f"uid {uid} is not allowed (socket.allowed_uids)"
            return uid
        return f"the peer's uid was not known within {timeout_s:g}s"

    return admit


async def peer_uid(
    sock: trio.socket.SocketType,
    read_tables: TableReader | None = None,
    limiter: trio.CapacityLimiter | None = None,
) -> int | None:
    """The uid of the process at the other end of ``sock`` (Unix or loopback TCP), or None
    when the kernel does not say (the peer has already gone, or no /proc). A TCP peer's is
    read by ``read_tables`` in a worker thread under ``limiter``; cancelling abandons it."""
    if sock.family == socket.AF_UNIX:
        return peer_credentials(sock)[1]
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return None
    try:
        wanted = client_rows(sock.getsockname(), sock.getpeername())
    except OSError:  # reset before the gate ran (ENOTCONN): no peer left to name
        return None
    return await trio.to_thread.run_sync(
        read_tables or read_uid, wanted, limiter=limiter, abandon_on_cancel=True
    )


def client_rows(local: tuple[object, ...], remote: tuple[object, ...]) -> Wanted:
    """Where the client's end of our connection (``local`` is us, ``remote`` the peer) may
    be listed: its local address is our peer, its remote address is us. An IPv4 peer is in
    ``tcp`` when its socket is IPv4 and in ``tcp6``, IPv4-mapped, when its socket is IPv6,
    whichever family our own socket is."""
    ours, theirs = _ip(local[0]), _ip(remote[0])
    ports = int(str(remote[1])), int(str(local[1]))
    if isinstance(ours, ipaddress.IPv6Address) and ours.ipv4_mapped is not None:
        ours = ours.ipv4_mapped
    if isinstance(theirs, ipaddress.IPv6Address) and theirs.ipv4_mapped is not None:
        theirs = theirs.ipv4_mapped
    if isinstance(ours, ipaddress.IPv6Address) or isinstance(theirs, ipaddress.IPv6Address):
        return ((TCP6_TABLE, (_hex(theirs, ports[0]), _hex(ours, ports[1]))),)
    mapped = ipaddress.IPv6Address(f"::ffff:{theirs}"), ipaddress.IPv6Address(f"::ffff:{ours}")
    return (
        (TCP_TABLE, (_hex(theirs, ports[0]), _hex(ours, ports[1]))),
        (TCP6_TABLE, (_hex(mapped[0], ports[0]), _hex(mapped[1], ports[1]))),
    )


def read_uid(wanted: Wanted) -> int | None:
    """The uid of the first ``wanted`` row in the kernel's tables, each read line by line only
    until that row; None when no table lists it or none can be read. Blocking: run it in a
    thread."""
    for table, row in wanted:
        try:
            with open(table, encoding="ascii") as rows:
                uid = uid_in_table(rows, row)
        except OSError:
            continue
        if uid is not None:
            return uid
    return None


def uid_in_table(rows: Iterable[str], wanted: tuple[str, str]) -> int | None:
    for row in rows:
        parts = row.split()
        if len(parts) > 7 and (parts[1], parts[2]) == wanted:
            with suppress(NumberError):  # a row we cannot read names no uid
                return parse_uint(parts[7], max_digits=10)
    return None


def _ip(host: object) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(str(host).partition("%")[0])  # drop an IPv6 scope id


def _hex(address: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int) -> str:
    """``address`` as the kernel's table spells it: the address as 32-bit words in host byte
    order, then the port, in upper-case hex (``0100007F:1F90`` on x86)."""
    packed = address.packed
    words = (packed[i : i + 4] for i in range(0, len(packed), 4))
    text = "".join(f"{int.from_bytes(word, sys.byteorder):08X}" for word in words)
    return f"{text}:{port:04X}"
