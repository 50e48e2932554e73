"""Paired nodes' settings: the node specialist's own ``nodes`` section (protocol/NODES.md).

Both node transports are off by default: nodes connect on their own Unix socket
(``socket_path``) or, for remote machines, a TCP listener with TLS (``tls.enabled``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

MIB = 1024 * 1024


@dataclass(frozen=True)
class NodeTlsConfig:
    """The TCP+TLS listener for remote nodes. Without ``cert_path`` a self-signed certificate
    is made at first start under ``<state_dir>/nodes/tls``; nodes pin its SHA-256."""

    enabled: bool = False
    host: str = "127.0.0.1"  # widen to 0.0.0.0 (or an interface's address) on purpose
    port: int = field(default=7443, metadata={"zero_ok": True})  # 0: any free port (tests)
    cert_path: str | None = None
    key_path: str | None = None

    def input_paths(self) -> tuple[str, ...]:
        """Its certificate and key (``csp_web.config.ReadsInputs``): no command may change
        them."""
        return tuple(path for path in (self.cert_path, self.key_path) if path)

    def __post_init__(self) -> None:
        if (self.cert_path is None) != (self.key_path is None):
            raise ValueError("nodes.tls: cert_path and key_path go together")
        if not 0 <= self.port <= 65535:
            raise ValueError("nodes.tls.port: must be 0 to 65535")


@dataclass(frozen=True)
class NodesConfig:
    """Pairing, liveness and media budgets of the node links (NODES.md N-1 to N-14)."""

    # The nodes' own Unix socket (never the clients' one): None serves none.
    socket_path: str | None = None
    # Empty: only the daemon's own uid may connect there (SO_PEERCRED, as socket.allowed_uids).
    allowed_uids: tuple[int, ...] = ()
    tls: NodeTlsConfig = field(default_factory=NodeTlsConfig)
    max_nodes: int = 256  # paired nodes kept in the store
    max_links: int = 512  # node connections at once (paired, pairing or saying hello)
    # Pairing codes live as long as Bluetooth's and Matter's commissioning windows (minutes).
    pair_code_ttl_s: float = 300.0
    max_pending_pairs: int = 16
    # Codes one source (uid or IP address) may hold at once: a node and its retry. Without
    # it one source pacing requests under pair_attempts held all 16 for good (issue 22).
    max_pending_per_source: int = 2
    # Pair requests and refused hellos per source (uid or IP address) in a window: 5 per
    # minute, the pace of a person typing codes, not of a guesser.
    pair_attempts: int = 5
    pair_window_s: float = 60.0
    hello_timeout_s: float = 10.0  # a new connection must say hello or ask to pair within it
    heartbeat_interval_s: float = 10.0  # told to the node in the welcome
    heartbeat_timeout_s: float = 30.0  # a link silent this long is cut (3 missed beats)
    max_media_bytes: int = 64 * MIB  # one capture, all chunks together
    max_chunk_bytes: int = 96 * 1024  # raw bytes per chunk: its base64 fits the 256 KiB line
    media_dir: str | None = None  # default: <state_dir>/media
    # Captures kept in media_dir, trimmed after each capture as the browser's screenshots are
    # (csp_web/infra/media.py): 1 GiB holds 16 captures at max_media_bytes (clips) and
    # thousands of photos; a day is the browser's own media_max_age_s.
    media_max_bytes: int = 1024 * MIB
    media_max_age_s: float = 86_400.0
    max_reply_text_chars: int = 4096  # a node's DATA or text field in a reply
    # Node tasks other daemons forward here at once (redis.url); past it they are busy. As
    # max_links: a daemon gives its peers no more than it gives its own node links.
    max_forwarded_tasks: int = 64

    def __post_init__(self) -> None:
        if self.heartbeat_timeout_s <= self.heartbeat_interval_s:
            raise ValueError("nodes: heartbeat_timeout_s must exceed heartbeat_interval_s")
        if self.max_pending_per_source > self.max_pending_pairs:
            raise ValueError("nodes: max_pending_per_source cannot exceed max_pending_pairs")
        if self.max_chunk_bytes > 192 * 1024:
            raise ValueError("nodes.max_chunk_bytes: at most 196608 (its base64 fits a line)")

    def private_paths(self, state_dir: str) -> tuple[str, ...]:
        """The media folder, the node socket's folder and the TLS key
        (``csp_web.config.root.OwnsPaths``)."""
        paths = [media_dir(self, state_dir)]
        if self.socket_path:
            paths.append(os.path.dirname(os.path.abspath(self.socket_path)))
        return (*paths, *([self.tls.key_path] if self.tls.key_path else []))


def nodes_dir(state_dir: str) -> str:
    """Where the pairing store and the generated certificate live (0700)."""
    return os.path.join(state_dir, "nodes")


def media_dir(config: NodesConfig, state_dir: str) -> str:
    return config.media_dir or os.path.join(state_dir, "media")
