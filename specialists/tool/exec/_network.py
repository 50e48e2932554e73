"""Network by purpose: a command whose program rule lists ``network`` destinations reaches
exactly those, through a lane of the guard proxy, and nothing else.

Every command runs in its own network namespace (bubblewrap ``--unshare-net``): loopback only,
no route, no resolver. For a rule with ``network``, the engine opens a purpose lane of the guard
proxy (csp_web.net.proxy_lanes) on a Unix socket in a fresh directory, which bubblewrap binds
read-only at ``SANDBOX_DIR``; the bridge (_bridge.py) listens on 127.0.0.1:``BRIDGE_PORT``
inside the namespace and copies each connection to that socket, and the usual proxy variables
point there. So every connection the command makes is one proxy request (CONNECT, or an
absolute ``http://`` URL), judged twice: by the rule (the exact ``host:port`` listed), then by
the whole guard (the URL gate, every resolved address through the deny table, the connect
pinned). What is refused is named in the reply (``NETWORK_REFUSED <host>:<port> <reason>``).
Names resolve only in the proxy: the namespace has no route to any DNS server.

The lane lives as long as the command: it is closed, its connections cut and its directory
removed when the command has been reaped.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

from csp_web.net.guard_proxy import GuardProxy, Lane
from csp_web.net.proxy_lanes import LanePolicy

from ._access import RunAs
from ._destinations import Destination
from ._errors import unavailable

# Inside the command's own network namespace nothing else listens, so a fixed port is free;
# 3128 is squid's, the port tools expect a local proxy on.
BRIDGE_PORT = 3128
SANDBOX_DIR = "/tmp/.csp-net"  # the private /tmp: a mount point there cannot be removed
MAX_REPLY_REFUSALS = 16  # NETWORK_REFUSED lines in one reply; a lane keeps its latest 64
_BRIDGE_SOURCE = os.path.join(os.path.dirname(__file__), "_bridge.py")
_PROXY_NAMES = (
    *("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"),
    *("npm_config_proxy", "npm_config_https_proxy"),
)


@dataclass(frozen=True)
class ExecNetwork:
    """Where exec's lanes are opened: the guard proxy (the guard in effect, its resolver, the
    ``web.proxy`` upstream) and the cap on one lane's connections."""

    proxy: GuardProxy
    max_connections: int


@dataclass(frozen=True)
class Bridge:
    """One command's open lane and how the command is wired to it."""

    lane: Lane
    directory: str  # on the host; SANDBOX_DIR inside
    interpreter: str

    def argv(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run behind the bridge, which becomes it once it listens."""
        script, socket_path = f"{SANDBOX_DIR}/bridge.py", f"{SANDBOX_DIR}/lane.sock"
        return [self.interpreter, "-I", "-S", script, str(BRIDGE_PORT), socket_path, "--", *argv]

    def env(self, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` with every proxy variable pointing at the bridge and none bypassing it."""
        url = f"http://127.0.0.1:{BRIDGE_PORT}"
        return {**env, **dict.fromkeys(_PROXY_NAMES, url), "NO_PROXY": "", "no_proxy": ""}

    def mounts(self) -> list[str]:
        """bubblewrap's options placing the lane's directory in the sandbox."""
        return ["--ro-bind", self.directory, SANDBOX_DIR]

    def refused(self) -> tuple[str, ...]:
        """``<host>:<port> <code>:<detail>`` for each distinct refusal so far, oldest first,
        at most ``MAX_REPLY_REFUSALS``."""
        lines = dict.fromkeys(f"{r.target} {r.error}" for r in self.lane.refusals_since(0))
        return tuple(lines)[:MAX_REPLY_REFUSALS]


@asynccontextmanager
async def open_bridge(
    network: ExecNetwork,
    destinations: Sequence[Destination],
    *,
    run_as: RunAs | None,
    hidden: Sequence[str],
    search_path: str,
) -> AsyncIterator[Bridge]:
    """A lane to ``destinations`` for one command, which only its uid (``run_as``, else the
    daemon's) may use, in a directory only the daemon may write; closed, and the directory
    removed, on exit.

    Raises NOT_AVAILABLE when no Python the sandbox can see runs the bridge (see
    ``_interpreter``) or the lane's socket cannot be made.
    """
    interpreter = _interpreter(search_path, hidden)
    directory = tempfile.mkdtemp(prefix="csp-exec-net-")
    try:
        # The daemon's, and no one else may write there: a host process of the sandbox uid
        # (nobody) could otherwise put its own socket in the lane's place. Who may use the
        # lane is the lane's own check (SO_PEERCRED).
        os.chmod(directory, 0o755)
        shutil.copyfile(_BRIDGE_SOURCE, os.path.join(directory, "bridge.py"))
        uid = os.getuid() if run_as is None else run_as.uid
        allow = frozenset((d.host, d.port) for d in destinations)
        policy = LanePolicy(allow, network.max_connections, uid=uid)
        socket_path = os.path.join(directory, "lane.sock")
        opened = False
        try:
            async with network.proxy.open_unix_lane(socket_path, policy) as lane:
                opened = True
                yield Bridge(lane, directory, interpreter)
        except OSError as error:
            if opened:  # the command's own failure, not the lane's
                raise
            raise unavailable(f"network: {error.strerror or error}") from error
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _interpreter(search_path: str, hidden: Sequence[str]) -> str:
    """The Python that runs the bridge: ``python3`` on the sandbox's search path (the host's,
    read-only), else the daemon's own; NOT_AVAILABLE when the sandbox sees neither (a daemon
    run from a venv under /home or /root, which are masked, on a host without python3)."""
    found = shutil.which("python3", path=search_path)
    for candidate in (found, sys.executable):
        if candidate is None:
            continue
        real = os.path.realpath(candidate)
        if not any(_inside(real, path) for path in hidden):
            return real
    raise unavailable("network: no python3 the sandbox can see runs the bridge")


def _inside(path: str, directory: str) -> bool:
    directory = os.path.realpath(directory)
    return path == directory or path.startswith(directory.rstrip("/") + "/")
