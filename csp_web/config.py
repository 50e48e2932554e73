"""All of csp-web's settings: frozen dataclasses whose defaults are the embedded configuration.

Units are in the names (``_s``, ``_ms``, ``_bytes``). ``config.yaml`` at the repository root
documents every setting with its default; ``csp_web.config_load`` reads such a file strictly.
The embedded default needs no outside service: without a Memory Specialist socket, memory
writes go to the embedded one, whose store under the state dir is bounded by retention.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Literal

from .config_browser import BrowserConfig
from .config_docs import DocsConfig
from .config_exec import ExecConfig, daemon_paths, refuse_private_workspaces
from .config_mcp import McpConfig
from .config_nodes import NodesConfig
from .config_redis import RedisConfig
from .net.config import GuardConfig


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
    backlog: int = 128


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
    frames_per_round: int = 8
    # Frames running at once, daemon-wide (L-10): replies that wait for one outbox commit wake
    # together, and a round must not hold thousands. Above the specialists' slots
    # (3 x (5 running + 10 queued) = 45), so slow ops alone cannot fill it.
    max_running_frames: int = 64


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
    """Where the Memory Specialist listens, and how the daemon talks to it.

    Without ``socket_path`` the daemon runs the reference Memory Specialist in process (the
    embedded one) on a store under ``directory``; the retention settings bound that store and
    the one ``csp-web memory-sink`` keeps.
    """

    socket_path: str | None = None
    directory: str | None = None  # default: <state_dir>/memory
    # journald's SystemMaxUse caps a host's whole journal at 4 GiB; one daemon keeps a quarter.
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
    # "normal" survives kill -9, which is the promise (committed WAL pages are in the OS page
    # cache); "full" also survives power loss, at an fsync per batch (SQLite's PRAGMA names).
    synchronous: Literal["full", "normal"] = "normal"


@dataclass(frozen=True)
class AuditConfig:
    enabled: bool = True
    sys_ops: bool = True  # audit ping/ops/stats too


@dataclass(frozen=True)
class RateConfig:
    """A token bucket: ``per_minute`` tokens refill continuously up to ``burst``."""

    per_minute: float
    burst: int


@dataclass(frozen=True)
class CacheConfig:
    directory: str | None = None  # default: <state_dir>/cache
    size_limit_bytes: int = 256 * 1024 * 1024
    memory_bytes: int = 32 * 1024 * 1024  # hot entries kept in process, in front of the disk
    search_ttl_s: float = 3600.0  # seed 000: "Cached results valid for 1h"
    fetch_ttl_s: float = 86400.0  # seed 000: fetched content, 24 hours
    api_ttl_s: float = 300.0  # seed 000: API responses, default 5 minutes


@dataclass(frozen=True)
class SearchProvider:
    """One search backend. Secrets are read from the environment variable ``api_key_env``."""

    kind: Literal["brave", "duckduckgo", "searxng", "perplexity"]
    base_url: str | None = None  # default per kind; required for searxng
    api_key_env: str | None = None
    monthly_quota: int | None = None
    rate: RateConfig = field(default_factory=lambda: RateConfig(10, 10))  # seed 000: 10/min


def _default_providers() -> dict[str, SearchProvider]:
    return {
        # seed 000: Brave's free tier, 1,000 requests a month at 10 a minute.
        "brave": SearchProvider("brave", api_key_env="BRAVE_API_KEY", monthly_quota=1000),
        "duckduckgo": SearchProvider("duckduckgo"),  # seed 001: no key needed
    }


@dataclass(frozen=True)
class SearchConfig:
    # Tried in order; a provider whose key is unset is skipped.
    order: tuple[str, ...] = ("brave", "duckduckgo")
    providers: dict[str, SearchProvider] = field(default_factory=_default_providers)
    default_results: int = 5  # seed 000: "Max 5 results per query (configurable)"
    max_results: int = 10  # seed 003: count max 10
    breaker_failures: int = 3  # consecutive failures that open a provider's circuit
    breaker_reset_s: float = 60.0
    # seed 004 prefetches the top 3 results into the fetch cache; off by default here.
    prefetch_top: int = field(default=0, metadata={"zero_ok": True})


@dataclass(frozen=True)
class FetchConfig:
    default_max_chars: int = 8000  # seed 000: "Max 2000 tokens per fetch (~8000 chars)"
    max_chars_cap: int = 50_000  # seed 001: "Maximum text extraction: 50,000 characters"
    rate: RateConfig = field(default_factory=lambda: RateConfig(20, 20))  # seed 001: 20/min


@dataclass(frozen=True)
class ApiConfig:
    """A configured API for ``REQ:api``; its credential comes from ``auth_env``."""

    base_url: str
    auth_env: str | None = None
    auth_header: str = "Authorization"
    auth_scheme: str = "Bearer"
    headers: dict[str, str] = field(default_factory=dict)  # fixed, non-secret headers
    rate: RateConfig = field(default_factory=lambda: RateConfig(60, 10))
    cache_ttl_s: float = 300.0  # seed 000: "Default TTL: 5 minutes"


def _default_apis() -> dict[str, ApiConfig]:
    return {
        "github": ApiConfig(
            "https://api.github.com/",
            auth_env="GITHUB_TOKEN",
            headers={"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"},
        ),
        "openai": ApiConfig("https://api.openai.com/v1/", auth_env="OPENAI_API_KEY"),
    }


@dataclass(frozen=True)
class SummarizeConfig:
    default_bullets: int = 5
    max_bullets: int = 20
    max_text_chars: int = 200_000
    # An OpenAI-compatible chat endpoint; unset means extractive, deterministic summaries.
    llm_base_url: str | None = None
    llm_model: str = "gpt-4o-mini"
    llm_api_key_env: str | None = None
    rate: RateConfig = field(default_factory=lambda: RateConfig(20, 20))  # seed 001: 20/min


@dataclass(frozen=True)
class WebConfig:
    guard: GuardConfig = field(default_factory=GuardConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    fetch: FetchConfig = field(default_factory=FetchConfig)
    apis: dict[str, ApiConfig] = field(default_factory=_default_apis)
    summarize: SummarizeConfig = field(default_factory=SummarizeConfig)
    docs: DocsConfig = field(default_factory=DocsConfig)  # csp_web/config_docs.py


@dataclass(frozen=True)
class CronConfig:
    store_path: str | None = None  # default: <state_dir>/cron.json
    max_jobs: int = 100
    history: int = 10  # outcomes kept per job and shown by ACTION list
    # Missed runs while the daemon was down: "skip" them, or "run_once" for all of them.
    default_missed: Literal["skip", "run_once"] = "skip"


@dataclass(frozen=True)
class ToolConfig:
    exec: ExecConfig = field(default_factory=ExecConfig)
    cron: CronConfig = field(default_factory=CronConfig)
    mcp: McpConfig = field(default_factory=McpConfig)
    browser: BrowserConfig = field(default_factory=BrowserConfig)


@dataclass(frozen=True)
class Config:
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    socket: SocketConfig = field(default_factory=SocketConfig)
    connection: ConnectionConfig = field(default_factory=ConnectionConfig)
    tasks: TasksConfig = field(default_factory=TasksConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    outbox: OutboxConfig = field(default_factory=OutboxConfig)
    audit: AuditConfig = field(default_factory=AuditConfig)
    web: WebConfig = field(default_factory=WebConfig)
    tool: ToolConfig = field(default_factory=ToolConfig)
    nodes: NodesConfig = field(default_factory=NodesConfig)
    redis: RedisConfig = field(default_factory=RedisConfig)  # shared state; url null: none

    def __post_init__(self) -> None:  # exec's one check that needs the daemon's own paths
        refuse_private_workspaces(self.tool.exec.workspace_roots, daemon_paths(self))

    @property
    def outbox_path(self) -> str:
        return self.outbox.path or os.path.join(self.daemon.state_dir, "outbox.sqlite3")

    @property
    def memory_dir(self) -> str:
        return self.memory.directory or os.path.join(self.daemon.state_dir, "memory")

    @property
    def cache_dir(self) -> str:
        return self.web.cache.directory or os.path.join(self.daemon.state_dir, "cache")
