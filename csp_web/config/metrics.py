"""The ``metrics:`` section: Prometheus' text format on ``GET /metrics`` (docs/metrics.md).

Off by default: the figures name the ops run and their failures, which a local user who may
not run ops need not read. ``listen`` is a loopback port (``127.0.0.1:9464``, ``[::1]:9464``;
port 0: any free one, logged) or a Unix socket path, where only the uids the daemon's socket
admits are served (``socket.allowed_uids``, else the daemon's own), as the MCP face does.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass

LOOPBACK_HOSTS = ("127.0.0.1", "::1")


@dataclass(frozen=True)
class MetricsConfig:
    # 127.0.0.1:PORT, [::1]:PORT, or an absolute Unix socket path; null: no metrics served.
    # 9464 is the port OpenTelemetry's Prometheus exporter registered, a common local choice.
    listen: str | None = None
    # Scrapes served at once; the rest wait in the listen backlog (a scraper asks every 15 s).
    max_connections: int = 8

    def __post_init__(self) -> None:
        if self.listen is not None:
            tcp_address(self.listen)  # raises ValueError for a bad value

    def private_paths(self, state_dir: str) -> tuple[str, ...]:
        """A Unix socket's folder (``csp_web.config.root.OwnsPaths``): commands never see it."""
        path = self.unix_path
        return (os.path.dirname(os.path.abspath(path)),) if path else ()

    @property
    def unix_path(self) -> str | None:
        """The Unix socket path, when ``listen`` names one."""
        return self.listen if self.listen is not None and self.listen.startswith("/") else None


def tcp_address(listen: str) -> tuple[str, int] | None:
    """``listen``'s (host, port) when it is a loopback address, None for a Unix socket path;
    ValueError otherwise (a public address would serve every host on the network)."""
    if listen.startswith("/"):
        return None
    host, sep, port_text = listen.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not port_text.isdigit() or int(port_text) > 65535:
        raise ValueError(f"listen: expected 127.0.0.1:PORT, [::1]:PORT or /path, not {listen!r}")
    try:
        loopback = ipaddress.ip_address(host).is_loopback and host in LOOPBACK_HOSTS
    except ValueError:
        loopback = False
    if not loopback:
        raise ValueError(f"listen: {host!r} is not 127.0.0.1 or ::1 (metrics stay on this host)")
    return host, int(port_text)
