"""Who may use the guard proxy: only sockets held by one process tree (for the browser, the
Playwright driver's).

A connection to the proxy (its main port or a context's lane) is served only when the client
end of its socket (found in /proc/net/tcp) is held by the driver or a descendant: Chromium.
Another local process is closed without a byte. Linux /proc only.
"""

from __future__ import annotations

import os
from collections.abc import Callable

PeerCheck = Callable[[tuple[str, int], tuple[str, int]], bool]


def owned_by_tree(root_pid: Callable[[], int | None]) -> PeerCheck:
    """A peer check: the connecting socket must be held by ``root_pid()`` or a descendant
    (the Playwright driver and the Chromium processes it launched). Linux /proc only."""

    def check(peer: tuple[str, int], local: tuple[str, int]) -> bool:
        root = root_pid()
        if root is None:
            return False
        inode = _socket_inode(peer, local)
        if inode is None:
            return False
        return any(_holds(pid, inode) for pid in _tree(root))

    return check


def _hex_endpoint(address: tuple[str, int]) -> str:
    octets = [int(part) for part in address[0].split(".")]
    return f"{octets[3]:02X}{octets[2]:02X}{octets[1]:02X}{octets[0]:02X}:{address[1]:04X}"


def _socket_inode(peer: tuple[str, int], local: tuple[str, int]) -> str | None:
    """The inode of the client's end: the socket whose local end is our peer."""
    want_local, want_remote = _hex_endpoint(peer), _hex_endpoint(local)
    try:
        with open("/proc/net/tcp", encoding="ascii") as table:
            for line in table:
                cols = line.split()
                if len(cols) > 9 and cols[1] == want_local and cols[2] == want_remote:
                    return cols[9]
    except OSError:
        return None
    return None


def _tree(root: int) -> list[int]:
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as children:
                    todo += [int(child) for child in children.read().split()]
        except OSError:
            continue
    return found


def _holds(pid: int, inode: str) -> bool:
    want = f"socket:[{inode}]"
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == want:
                return True
        except OSError:
            continue
    return False
