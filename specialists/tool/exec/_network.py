"""Network by purpose: a command whose program rule lists ``network`` destinations reaches
exactly those, through a lane of the guard proxy, and nothing else.

Every command runs in its own network namespace (bubblewrap ``--unshare-net``): loopback only,
no route, no resolver. For a rule with ``network``, the engine opens a purpose lane of the guard
proxy (csp_web.net.proxy_lanes) on a Unix socket in a fresh directory, which bubblewrap binds
read-only at ``SANDBOX_DIR`` in that command's sandbox alone; the bridge (_bridge.py) listens
on 127.0.0.1:``BRIDGE_PORT`` inside the namespace and copies each connection to that socket,
and the usual proxy variables point there. So every connection the command makes is one proxy
request (CONNECT, or an absolute ``http://`` URL), judged twice: by the rule (the exact
``host:port`` listed), then by the whole guard (the URL gate, every resolved address through
the deny table, the connect pinned). What is refused is named in the reply
(``NETWORK_REFUSED <host>:<port> <reason>``).
Names resolve only in the proxy: the namespace has no route to any DNS server.

Only that command may use its lane. Its directory is made in the daemon's lane root, under the
host's /tmp (``LANE_ROOT_PREFIX``), never under TMPDIR: every sandbox mounts a tmpfs of its own
over /tmp, so no other command can reach the socket's path, and a host process of the sandbox
uid cannot list the root (mode 0711: searchable, since a root daemon's bwrap runs as that uid)
to learn the directory's random name. Reaching the path is still not enough: the lane admits
only the sandbox uid (SO_PEERCRED), from a network namespace other than the daemon's, and pins
the namespace of its first peer, which is the bridge's own connection, made before the command
starts; every command has a network namespace of its own.

The lane lives as long as the command: it is closed, its connections cut and its directory
removed when the command has been reaped. A daemon killed first leaves its root behind; the
next one removes it (``sweep_lane_roots``).
"""

from __future__ import annotations

import atexit
import fcntl
import logging
import os
import shutil
import stat
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

from csp_web.net.guard_proxy import GuardProxy, Lane
from csp_web.net.proxy_lanes import LanePolicy

from ._access import RunAs
from ._destinations import Destination
from ._errors import unavailable

log = logging.getLogger(__name__)

# Inside the command's own network namespace nothing else listens, so a fixed port is free;
# 3128 is squid's, the port tools expect a local proxy on.
BRIDGE_PORT = 3128
SANDBOX_DIR = "/tmp/.csp-net"  # the private /tmp: a mount point there cannot be removed
MAX_REPLY_REFUSALS = 16  # NETWORK_REFUSED lines in one reply; a lane keeps its first 64
# On the host: the root of a daemon's lanes is /tmp/<prefix><random>, whatever TMPDIR says,
# since /tmp is what every sandbox covers with its own tmpfs.
HOST_TMP = "/tmp"
LANE_ROOT_PREFIX = "csp-exec-lanes-"
_LOCK_NAME = ".lock"  # held (flock) by the daemon that owns a root: a root not held is stale
MAX_SWEPT = 64  # stale roots removed at one start; more wait for the next
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

    def refused(self) -> tuple[tuple[str, ...], int]:
        """``<host>:<port> <code>:<detail>`` for each distinct refusal of the lane's first,
        oldest first, at most ``MAX_REPLY_REFUSALS``; and how many refused connections those
        lines do not stand for (a repeat of a shown line does not count)."""
        kept = self.lane.refusals_since(0)
        lines = tuple(dict.fromkeys(f"{r.target} {r.error}" for r in kept))
        shown = lines[:MAX_REPLY_REFUSALS]
        standing = sum(1 for r in kept if f"{r.target} {r.error}" in shown)
        return shown, self.lane.refused_total - standing


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
    try:
        directory = tempfile.mkdtemp(dir=_lane_root())
    except OSError as error:
        raise unavailable(f"network: {error.strerror or error}") from error
    try:
        # Searchable, so the sandbox uid reaches the socket through its bind; writable by the
        # daemon alone, so nothing else can put its own socket in the lane's place.
        os.chmod(directory, 0o755)
        shutil.copyfile(_BRIDGE_SOURCE, os.path.join(directory, "bridge.py"))
        uid = os.getuid() if run_as is None else run_as.uid
        allow = frozenset((d.host, d.port) for d in destinations)
        policy = LanePolicy(allow, network.max_connections, uid=uid, pin_namespace=True)
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


_root_lock = threading.Lock()
_root: dict[str, int] = {}  # this daemon's lane root and its held lock's descriptor


def _lane_root() -> str:
    """This daemon's lane root: a 0711 directory under ``HOST_TMP``, locked for as long as the
    daemon lives (``sweep_lane_roots`` removes the ones no daemon holds). A new one when it is
    gone (a /tmp cleaner removes what an idle daemon has not touched for days) or is not the
    daemon's own directory any more."""
    with _root_lock:
        for root, lock in list(_root.items()):
            if not _owned_directory(root):
                os.close(lock)
                del _root[root]
        if not _root:
            root = tempfile.mkdtemp(prefix=LANE_ROOT_PREFIX, dir=HOST_TMP)
            # Searchable, not listable: a root daemon's bwrap runs as the sandbox uid and
            # must reach its lane's directory, whose name no one else can read here.
            os.chmod(root, 0o711)
            lock = os.open(os.path.join(root, _LOCK_NAME), os.O_CREAT | os.O_RDWR, 0o600)
            fcntl.flock(lock, fcntl.LOCK_EX)  # released by the kernel when the daemon ends
            atexit.register(shutil.rmtree, root, ignore_errors=True)  # a clean exit's part
            _root[root] = lock
        return next(iter(_root))


def _owned_directory(path: str) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()


def sweep_lane_roots(directory: str = HOST_TMP) -> int:
    """Remove the lane roots of daemons that are gone (killed before they removed their
    lanes): at most ``MAX_SWEPT`` of them, only directories named ``LANE_ROOT_PREFIX``...,
    owned by this uid, whose lock no daemon holds. Returns how many were removed."""
    removed = 0
    with os.scandir(directory) as entries:
        for entry in entries:
            if removed >= MAX_SWEPT:
                break
            if entry.name.startswith(LANE_ROOT_PREFIX) and _stale(entry):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed += 1
    if removed:
        log.info("removed %d lane directories left by a daemon that was killed", removed)
    return removed


def _stale(entry: os.DirEntry[str]) -> bool:
    try:
        if not entry.is_dir(follow_symlinks=False) or entry.stat().st_uid != os.geteuid():
            return False
        lock = os.open(os.path.join(entry.path, _LOCK_NAME), os.O_RDWR | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # held: a live daemon's (this one's own too)
    finally:
        os.close(lock)
    return True


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
