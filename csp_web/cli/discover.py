"""Which socket a client command (``send``, ``health``, ``nodes``, ``memory``) talks to.

In order: ``--socket``; ``socket.path``; the socket the daemon holding ``daemon.state_dir``
serves (it records it in its lock file, ``csp_web.core.daemon.statedir.served_socket``), so
``csp-web nodes approve CODE`` typed as the README shows it reaches the user's running
daemon; then the README's own path, ``$XDG_RUNTIME_DIR/csp-web/csp.sock``, when something
is bound there. A path that is given is used as it is (a wrong one fails to connect, exit 3);
one that is guessed is used only when a socket file is there.
"""

from __future__ import annotations

import os
import stat
import sys

from csp_web.config import Config
from csp_web.core.daemon.statedir import served_socket

RUNTIME_SOCKET = ("csp-web", "csp.sock")  # under $XDG_RUNTIME_DIR, as README.md serves it
SOCKET_HELP = "daemon socket (default: socket.path, else the running daemon's, found)"


class NoDaemonFound(Exception):
    """No socket was given and none was found; ``str`` says where the command looked."""


def client_socket(command: str, given: str | None, config: Config) -> str | None:
    """``daemon_socket``, or None after one line on stderr saying where ``command`` looked
    (the caller exits 3: no daemon could be reached)."""
    try:
        return daemon_socket(given, config)
    except NoDaemonFound as exc:
        print(f"csp-web: {command}: {exc}", file=sys.stderr)
        return None


def daemon_socket(given: str | None, config: Config) -> str:
    """The socket to reach the daemon at (see the module's order); raises NoDaemonFound."""
    chosen = given or config.socket.path
    if chosen:
        return chosen
    candidates = [served_socket(config.daemon.state_dir), _runtime_socket()]
    for path in candidates:
        if path is not None and _is_socket(path):
            return path
    looked = [f"the lock file in {config.daemon.state_dir}"]
    looked += [path for path in candidates[1:] if path is not None]
    raise NoDaemonFound(
        f"no running daemon found (looked at {', '.join(looked)}); "
        "pass --socket PATH or set socket.path"
    )


def _runtime_socket() -> str | None:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return os.path.join(runtime, *RUNTIME_SOCKET) if runtime else None


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False
