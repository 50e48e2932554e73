"""The root of csp-web's settings: one frozen tree of the sections, and its derived paths.

Units are in the names (``_s``, ``_ms``, ``_bytes``). ``config.yaml`` at the repository root
documents every setting with its default; ``csp_web.config.load`` reads such a file strictly.
The embedded default needs no outside service: without a Memory Specialist socket, memory
writes go to the embedded one, whose store under the state dir is bounded by retention.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from csp_web.config.core import (
    AuditConfig,
    ConnectionConfig,
    DaemonConfig,
    MemoryConfig,
    OutboxConfig,
    SocketConfig,
    TasksConfig,
)
from csp_web.config.exec import refuse_private_workspaces
from csp_web.config.nodes import NodesConfig, media_dir
from csp_web.config.redis import RedisConfig
from csp_web.config.tool import ToolConfig
from csp_web.config.web import WebConfig


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
    # The file these settings were read from (set by the loader, never a key in it): the
    # daemon reads it again on SIGHUP, so commands may not change it (daemon_inputs).
    source: str | None = field(default=None, compare=False, metadata={"internal": True})

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


def daemon_paths(config: Config) -> tuple[str, ...]:
    """The daemon's own paths: the state, cache, memory store and media directories, those of
    its sockets (clients', nodes', the Memory Specialist's, a unix:// Redis), outbox and cron
    store, and its private key files (node TLS, Redis TLS). No command may see them or work in
    them: a non-root daemon's commands run as its own uid, so only a mask hides them."""
    files = (
        config.socket.path,
        config.memory.socket_path,
        config.outbox_path,
        config.tool.cron.store_path,
        config.nodes.socket_path,
        _redis_socket(config.redis.url),
    )
    paths = [config.daemon.state_dir, config.cache_dir, config.memory_dir]
    paths += [media_dir(config.nodes, config.daemon.state_dir)]
    paths += [os.path.dirname(os.path.abspath(path)) for path in files if path]
    keys = (config.nodes.tls.key_path, config.redis.tls_key_file)
    paths += [path for path in keys if path]
    return tuple(dict.fromkeys(os.path.abspath(path) for path in paths))


def _redis_socket(url: str | None) -> str | None:
    """The socket file of a ``unix://`` Redis URL (its query, such as ``?db=1``, dropped)."""
    if url is None or not url.startswith("unix://"):
        return None
    return url.removeprefix("unix://").partition("?")[0] or None
