"""``csp-web mcp`` without ``--socket``: a client of the user's running daemon, or that daemon.

The README's one-line host entry starts one ``csp-web mcp`` per MCP host. The first finds no
daemon: it takes the state directory's lock, runs the daemon core in process and serves its
client socket too (``socket.path``, else ``<state_dir>/csp.sock``). Each later one finds that
socket answering and is its client, as with ``--socket``, so any number of hosts share one
daemon, its cache and its rate limits. A host that starts while the lock's holder is still
opening its socket waits for it (ATTACH_WAIT_S) rather than failing with "state dir in use".
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable

from csp_web.config import Config
from csp_web.config.load import serving_socket
from csp_web.core.daemon.statedir import StateDirBusy, hold_state_dir
from csp_web.mcp_face.daemon_link import ForeignDaemon, check_own_daemon

log = logging.getLogger(__name__)

SOCKET_NAME = "csp.sock"
_SUN_PATH_MAX = 107  # sockaddr_un.sun_path holds 108 bytes with the final NUL (unix(7))
# How long a host waits for the lock's holder to answer on its socket: an in-process daemon
# opens its specialists (Chromium's driver, the outbox) before it listens, seconds on a cold
# start; past this, the holder is taken to be a daemon with no socket here.
ATTACH_WAIT_S = 15.0
_RETRY_S = 0.1
_PROBE_S = 1.0


class NoDaemonSocket(Exception):
    """The state directory is held, and nothing answered on the user's socket in time."""

    def __init__(self, busy: StateDirBusy, path: str | None, wait_s: float) -> None:
        super().__init__(busy, path, wait_s)
        self.busy = busy
        self.path = path
        self.wait_s = wait_s

    def __str__(self) -> str:
        if self.path is None:
            return f"{self.busy}; or pass --socket to use it"
        return f"{self.busy}; no daemon answered at {self.path} in {self.wait_s:g}s: pass --socket"


def user_socket(config: Config) -> str | None:
    """The client socket of the user's daemon: ``socket.path``, else ``<state_dir>/csp.sock``;
    None (logged) when that path is too long for a Unix socket."""
    path = config.socket.path or os.path.join(config.daemon.state_dir, SOCKET_NAME)
    if len(os.fsencode(path)) > _SUN_PATH_MAX:
        log.warning("no shared daemon socket: %s is longer than a Unix socket path may be", path)
        return None
    return path


def daemon_answers(path: str) -> bool:
    """Whether a process of our own uid accepts a connection at ``path`` now (within
    _PROBE_S). Another uid's listener is refused (logged): with ``socket.path`` in a shared
    folder, whoever binds it first would otherwise get every call the face makes."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(_PROBE_S)
    try:
        probe.connect(path)
        check_own_daemon(probe, path, os.getuid())
    except ForeignDaemon as exc:
        log.warning("not using the daemon socket: %s", exc)
        return False
    except OSError:
        return False
    finally:
        probe.close()
    return True


def run_mcp_face(
    config: Config,
    *,
    attached: Callable[[str], int],
    own: Callable[[Config], int],
    wait_s: float = ATTACH_WAIT_S,
) -> int:
    """``attached(path)`` when a daemon answers on the user's socket, else ``own(config)``
    (serving that socket) while holding the state directory; returns their exit code.
    Raises NoDaemonSocket when the directory stays held and no socket answers within
    ``wait_s``, ConfigError when the socket overlaps a workspace root."""
    path = user_socket(config)
    deadline = time.monotonic() + wait_s
    while True:
        if path is not None and daemon_answers(path):
            log.info("using the running daemon at %s", path)
            return attached(path)
        try:
            with hold_state_dir(config.daemon.state_dir):
                return own(serving_socket(config, path))
        except StateDirBusy as busy:
            if path is None or time.monotonic() >= deadline:
                raise NoDaemonSocket(busy, path, wait_s) from None
        time.sleep(_RETRY_S)
