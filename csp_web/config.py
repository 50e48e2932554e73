"""All of csp-web's settings: frozen dataclasses whose defaults are the embedded configuration.

Units are in the names (``_s``, ``_ms``, ``_bytes``). ``config.yaml`` at the repository root
documents every setting with its default; ``csp_web.config_load`` reads such a file strictly.
The embedded default needs no outside service: without a Memory Specialist socket, memory
writes wait in the durable outbox.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Literal


def _default_state_dir() -> str:
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return os.path.join(base, "csp-web")


@dataclass(frozen=True)
class DaemonConfig:
    state_dir: str = field(default_factory=_default_state_dir)
    grace_period_s: float = 10.0  # systemd's default stop timeout is 90 s; we aim far inside
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_json: bool = False


@dataclass(frozen=True)
class SocketConfig:
    path: str | None = None
    # Empty means only the daemon's own uid may connect (SO_PEERCRED is checked on accept).
    allowed_uids: tuple[int, ...] = ()
    max_connections: int = 1024
    max_connections_per_uid: int = 256
    backlog: int = 128


@dataclass(frozen=True)
class ConnectionConfig:
    """Per-connection budgets (SPEC L-1 to L-7)."""

    max_line_bytes: int = 256 * 1024
    max_frame_bytes: int = 1024 * 1024
    max_fields: int = 128
    max_in_flight: int = 64
    frame_deadline_s: float = 10.0  # slowloris: a started frame must end within this
    idle_timeout_s: float = 300.0  # socket connections only; stdin never idles out
    max_bad_frames: int = 10  # aiosmtpd closes after a similar bogus-command budget
    max_queued_replies: int = 128
    write_timeout_s: float = 10.0


@dataclass(frozen=True)
class SpecialistLimits:
    max_running: int = 5  # the tool seed: "Max concurrent: 5"
    max_queued: int = 10  # the tool seed: "Queue overflow: 10 max"


def _default_specialists() -> dict[str, SpecialistLimits]:
    return {name: SpecialistLimits() for name in ("web", "tool", "memory")}


@dataclass(frozen=True)
class TasksConfig:
    default_timeout_ms: int = 30_000  # the tool seed's default exec timeout
    max_timeout_ms: int = 600_000
    specialists: dict[str, SpecialistLimits] = field(default_factory=_default_specialists)


@dataclass(frozen=True)
class MemoryConfig:
    """Where the external Memory Specialist listens, and how the daemon talks to it."""

    socket_path: str | None = None
    connect_timeout_s: float = 2.0
    ack_timeout_s: float = 10.0
    relay_timeout_s: float = 10.0
    backoff_initial_s: float = 0.1
    backoff_max_s: float = 30.0
    batch_size: int = 256


@dataclass(frozen=True)
class OutboxConfig:
    path: str | None = None  # default: <state_dir>/outbox.sqlite3
    # Ops are refused with outbox_full at max_pending; writes of ops already running may use
    # reserve more, so an admitted op never loses its log.
    max_pending: int = 100_000
    reserve: int = 1_000
    max_bytes: int = 256 * 1024 * 1024
    # "full" survives power loss; "normal" survives kill -9 (WAL pages are in the OS cache).
    synchronous: Literal["full", "normal"] = "full"


@dataclass(frozen=True)
class AuditConfig:
    enabled: bool = True
    sys_ops: bool = True  # audit ping/ops/stats too


@dataclass(frozen=True)
class Config:
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    socket: SocketConfig = field(default_factory=SocketConfig)
    connection: ConnectionConfig = field(default_factory=ConnectionConfig)
    tasks: TasksConfig = field(default_factory=TasksConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    outbox: OutboxConfig = field(default_factory=OutboxConfig)
    audit: AuditConfig = field(default_factory=AuditConfig)

    @property
    def outbox_path(self) -> str:
        return self.outbox.path or os.path.join(self.daemon.state_dir, "outbox.sqlite3")
