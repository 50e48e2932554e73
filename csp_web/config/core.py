"""The daemon core's sections: state, socket, connection budgets, task slots, memory, outbox,
audit. Frozen dataclasses, units in the names; defaults are the embedded configuration."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import ClassVar, Literal


def _default_state_dir() -> str:
    # systemd's StateDirectory= sets STATE_DIRECTORY (a colon-separated list: ours is first).
    if state_directory := os.environ.get("STATE_DIRECTORY", "").split(":")[0]:
        return state_directory
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
    # None: as many as the kernel allows (net.core.somaxconn, 4096 since Linux 5.4), as trio's
    # open_tcp_listeners does: 128 lost 19-31 of a burst of 200 connects (issue 21).
    backlog: int | None = None


@dataclass(frozen=True)
class ConnectionConfig:
    """Per-connection budgets (SPEC L-1 to L-8) and the daemon-wide fair queue (L-10)."""

    max_line_bytes: int = 256 * 1024
    max_frame_bytes: int = 1024 * 1024
    max_fields: int = 128
    max_in_flight: int = 64
    frame_deadline_s: float = 10.0  # slowloris: a started frame must end within this
    idle_timeout_s: float = 300.0  # socket connections only; stdin never idles out
    max_bad_frames: int = 10  # aiosmtpd closes after a similar bogus-command budget
    max_queued_replies: int = 128
    write_timeout_s: float = 10.0  # from when a reply is queued until it is fully written
    # Empty lines in a row between frames (L-8); RFC 9112 2.2 asks servers to skip at least one.
    max_blank_lines: int = field(default=32, metadata={"zero_ok": True})
    # Frames started per scheduler round, daemon-wide, one per connection per round when they
    # contend (L-10): a round then costs about this many frames' work, so it stays short.
    # Its cost in throughput (bench/daemon.py --quick --frames-per-round N, daemon CPU per
    # pipelined frame, 2 runs each on a loaded 2-core host): 4: 125-150 us, 8: 108-114 us,
    # 16: 83-96 us. A smaller value shortens the rounds a fresh ping waits behind busy
    # connections, at that CPU cost: 4 costs a quarter more per frame; 16 saves an eighth
    # and doubles a round's length. 8 it stays.
    frames_per_round: int = 8
    # Frames running at once, daemon-wide (L-10): replies that wait for one outbox commit wake
    # together, and a round must not hold thousands. Above the specialists' slots
    # (3 x (5 running + 10 queued) = 45), so slow ops alone cannot fill it.
    max_running_frames: int = 64


@dataclass(frozen=True)
class SlotLimits:
    """One slot pool: tasks running at once, and waiting beyond those (SPEC C-3)."""

    max_running: int = 5  # the tool seed: "Max concurrent: 5"
    max_queued: int = 10  # the tool seed: "Queue overflow: 10 max"


@dataclass(frozen=True)
class SlotsConfig:
    """Every slot pool by name (``Op.specialist``): a specialist adds its field here, and
    ``Specialist.slots`` names it, so a pool without limits cannot be composed."""

    RELOAD_AS_ONE: ClassVar[bool] = True  # a reload reports "tasks.specialists", as one setting

    # Web work waits on the network, so more of it runs at once: 64 concurrent fetch clients
    # (connection.max_running_frames' 64 frames) wait rather than fail with 32 running and
    # 96 queued (twice those frames, for cron and research work, which L-10 does not hold).
    # The seed's 5 + 10 refused 93 % of 64 clients' slow fetches (bench/overload.py, issue 26).
    web: SlotLimits = field(default_factory=lambda: SlotLimits(max_running=32, max_queued=96))
    tool: SlotLimits = field(default_factory=SlotLimits)  # exec: CPU and memory, the seed's
    memory: SlotLimits = field(default_factory=SlotLimits)
    sys: SlotLimits = field(default_factory=SlotLimits)  # ping, ops, stats

    def pool(self, name: str) -> SlotLimits:
        """The limits of pool ``name``; KeyError for a pool with no field."""
        limits = getattr(self, name, None) if not name.startswith("_") else None
        if not isinstance(limits, SlotLimits):
            raise KeyError(name)
        return limits


@dataclass(frozen=True)
class TasksConfig:
    default_timeout_ms: int = 30_000  # the tool seed's default exec timeout
    max_timeout_ms: int = 600_000
    specialists: SlotsConfig = field(default_factory=SlotsConfig)
    # A peer that hung up reads no reply: its work is cancelled (SPEC C-6), as an HTTP/2
    # server resets the streams of a closed connection. False: it runs to its deadline.
    cancel_on_disconnect: bool = True


@dataclass(frozen=True)
class MemoryConfig:
    """Where the Memory Specialist listens, and how the daemon talks to it.

    Without ``socket_path`` the daemon runs the reference Memory Specialist in process (the
    embedded one) on a store under ``directory``; the retention settings bound that store and
    the one ``csp-web memory-sink`` keeps.
    """

    socket_path: str | None = None
    directory: str | None = None  # default: <state_dir>/memory
    # journald's SystemMaxUse caps a host's whole journal at 4 GiB; one daemon keeps a quarter.
    # The store's file on disk (rows, hashes, indexes), not only its DATA: free pages are
    # returned to the file system (issue 21: it grew to 3x its DATA).
    retention_max_bytes: int = 1024 * 1024 * 1024
    # logrotate's stock policy (weekly, rotate 4) keeps four weeks of logs.
    retention_max_age_s: float = 28 * 86400.0
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
    # One caller (connection) may hold a quarter of the outbox: four busy callers fill it
    # together, one alone cannot starve the rest (issue 8.4: 125 exec runs filled it).
    # A share above max_pending / max_bytes simply never binds.
    max_pending_per_peer: int = 25_000
    max_bytes_per_peer: int = 64 * 1024 * 1024
    # The largest single write (UTF-8 DATA); longer DATA keeps its head and tail. An exec_log
    # of both streams at exec.max_output_bytes (1 MiB each) fits.
    max_write_bytes: int = 2 * 1024 * 1024 + 64 * 1024
    delivery_window: int = 4  # batches of memory.batch_size in flight (pipelined)
    # With no batch in flight, a partial one waits this long for more writes (Kafka's
    # linger.ms): ops answered one at a time sent, stored, ACKed and settled a batch of one
    # write each, 30 % of the daemon's CPU per cache hit (issue 26). It delays only the copy
    # at the Memory Specialist: a write is durable in the outbox before its op answers.
    linger_s: float = field(default=0.02, metadata={"zero_ok": True})
    # "normal" survives kill -9, which is the promise (committed WAL pages are in the OS page
    # cache); "full" also survives power loss, at an fsync per batch (SQLite's PRAGMA names).
    synchronous: Literal["full", "normal"] = "normal"


@dataclass(frozen=True)
class AuditConfig:
    enabled: bool = True
    sys_ops: bool = True  # audit ping/ops/stats too
    # IN:SYS frames are audited in summaries, one open per connection (SPEC O-4): written when
    # it holds this many frames (that frame's reply waits for it), this long after its first
    # frame, and when the connection closes.
    sys_summary_max_frames: int = 1000
    sys_summary_interval_s: float = 1.0
