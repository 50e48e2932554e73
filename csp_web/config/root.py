"""The root of csp-web's settings: one frozen tree of the sections, and its derived paths.

Units are in the names (``_s``, ``_ms``, ``_bytes``). ``config.yaml`` at the repository root
documents every setting with its default; ``csp_web.config.load`` reads such a file strictly.
The embedded default needs no outside service: without a Memory Specialist socket, memory
writes go to the embedded one, whose store under the state dir is bounded by retention.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol, TypeVar, runtime_checkable

from csp_web.config.budgets import BudgetsConfig
from csp_web.config.cache import CacheConfig
from csp_web.config.core import (
    AuditConfig,
    ConnectionConfig,
    DaemonConfig,
    MemoryConfig,
    OutboxConfig,
    SocketConfig,
    TasksConfig,
)
from csp_web.config.metrics import MetricsConfig
from csp_web.config.otel import OtelConfig
from csp_web.config.redis import RedisConfig


@dataclass(frozen=True)
class Config:
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    socket: SocketConfig = field(default_factory=SocketConfig)
    connection: ConnectionConfig = field(default_factory=ConnectionConfig)
    tasks: TasksConfig = field(default_factory=TasksConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    outbox: OutboxConfig = field(default_factory=OutboxConfig)
    audit: AuditConfig = field(default_factory=AuditConfig)
    redis: RedisConfig = field(default_factory=RedisConfig)  # shared state; url null: none
    metrics: MetricsConfig = field(default_factory=MetricsConfig)  # Prometheus; listen null: off
    otel: OtelConfig = field(default_factory=OtelConfig)  # OpenTelemetry traces; off by default
    budgets: BudgetsConfig = field(default_factory=BudgetsConfig)  # BUDGET_IDs, per-uid defaults
    # The sections of specialists that own theirs (``SectionSpec``), by top-level key, as the
    # loader built them from the catalogue; ``section_of`` reads one (its defaults if absent).
    sections: tuple[tuple[str, object], ...] = field(default=(), metadata={"internal": True})
    # The file these settings were read from (set by the loader, never a key in it): the
    # daemon reads it again on SIGHUP, so commands may not change it (daemon_inputs).
    source: str | None = field(default=None, compare=False, metadata={"internal": True})

    def __post_init__(self) -> None:
        """Each own section's check against the whole (``ChecksConfig``): ValueError."""
        for section in own_sections(self):
            if isinstance(section, ChecksConfig):
                section.check_config(self)

    @property
    def outbox_path(self) -> str:
        return self.outbox.path or os.path.join(self.daemon.state_dir, "outbox.sqlite3")

    @property
    def memory_dir(self) -> str:
        return self.memory.directory or os.path.join(self.daemon.state_dir, "memory")

    @property
    def cache_dir(self) -> str:
        return shared_section(self, CacheConfig).store_dir(self.daemon.state_dir)


T = TypeVar("T")


@dataclass(frozen=True)
class SectionSpec:
    """A specialist's own config section: the dataclass ``cls`` (frozen, in the specialist's
    folder) read from the top-level key ``key`` of config.yaml by the one strict loader."""

    key: str
    cls: type


def section_of(config: Config, key: str, cls: type[T]) -> T:
    """The section the loader built at ``key`` (``SectionSpec``), else ``cls()``: its
    defaults when the file has none. TypeError when ``key`` holds another class's section."""
    for name, section in config.sections:
        if name == key:
            if not isinstance(section, cls):
                raise TypeError(f"config section {key} is a {type(section).__name__}")
            return section
    return cls()


def shared_section(config: Config, cls: type[T]) -> T:
    """The settings of shared infrastructure that a specialist's own section holds (the
    web's guard and cache, the tool's cron), found by their class ``cls``: the first one in
    the own sections, else ``cls()``. The core and the programs below the specialists read
    them so without knowing the section that holds them."""
    for section in own_sections(config):
        if isinstance(section, cls):
            return section
    return cls()


def with_shared(config: Config, cls: type[T], change: Callable[[T], T]) -> Config:
    """``config`` with each ``cls`` in the own sections (``shared_section``) replaced by
    ``change`` of it: replay opens the guard and moves the cache without naming the web.
    LookupError when no section holds one and the change would alter its defaults: there is
    nowhere to keep it (a daemon's config holds every section: ``load.complete_sections``)."""
    sections = tuple((key, _replaced(section, cls, change)) for key, section in config.sections)
    if sections == config.sections and not any(isinstance(s, cls) for s in own_sections(config)):
        if change(cls()) != cls():
            raise LookupError(f"no config section holds a {cls.__name__}")
        return config
    return dataclasses.replace(config, sections=sections)


def _replaced(value: object, cls: type[T], change: Callable[[T], T]) -> object:
    if isinstance(value, cls):
        return change(value)
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return value
    changes = {}
    for item in dataclasses.fields(value):
        before = getattr(value, item.name)
        after = _replaced(before, cls, change)
        if after is not before:
            changes[item.name] = after
    return dataclasses.replace(value, **changes) if changes else value


def with_section(config: Config, key: str, section: object) -> Config:
    """``config`` with ``section`` as its own section at ``key`` (added, or in place)."""
    sections = dict(config.sections)
    sections[key] = section
    return dataclasses.replace(config, sections=tuple(sections.items()))


@runtime_checkable
class ReadsInputs(Protocol):
    """A section naming files the daemon reads as configuration (TLS certificates, keys):
    ``daemon_inputs`` keeps commands from changing them without knowing the section."""

    def input_paths(self) -> tuple[str, ...]:
        """The files it names (absolute or relative to the working directory)."""
        ...


def own_sections(config: Config) -> Iterator[object]:
    """Every section dataclass of the specialists' own sections, each and all under it."""
    for _, section in config.sections:
        yield section
        yield from _sections(section)


@runtime_checkable
class ChecksConfig(Protocol):
    """A section with a check that needs the rest of the configuration (exec's workspace
    roots against the daemon's own paths): run whenever a Config is built or changed."""

    def check_config(self, config: Config) -> None:
        """ValueError, naming the setting, when the section does not fit ``config``."""
        ...


@runtime_checkable
class OpensWorkspaces(Protocol):
    """A section naming the folders commands work in and files may be written to (exec's
    workspace roots): other specialists read them through ``workspace_roots``."""

    def workspaces(self) -> tuple[str, ...]:
        """The folders, as configured."""
        ...


@runtime_checkable
class MasksPaths(Protocol):
    """A section naming paths hidden from what works in the workspaces (exec's
    masked_paths): other specialists reading workspace files refuse them through
    ``masked_paths``."""

    def masked(self) -> tuple[str, ...]:
        """The paths, as configured."""
        ...


@runtime_checkable
class RunsWorkAs(Protocol):
    """A section naming the uid and gid work in the workspaces runs as when the daemon is
    root (exec's run_as_uid/gid): other specialists reading workspace files read only what
    that identity could, through ``workspace_identity``."""

    def runs_as(self) -> tuple[int, int]:
        """(uid, gid), as configured."""
        ...


@runtime_checkable
class RoutesEgress(Protocol):
    """A section naming the forward proxy the daemon's web egress goes through (``web.proxy``):
    the browser's guard proxy sends its upstream connections there too."""

    def egress_proxy(self) -> str | None:
        """The proxy URL (``http://host:port``), or None for direct connections."""
        ...


def egress_proxy(config: Config) -> str | None:
    """The forward proxy an own section declares (``RoutesEgress``); None for none."""
    for section in own_sections(config):
        if isinstance(section, RoutesEgress):
            return section.egress_proxy()
    return None


def workspace_roots(config: Config) -> tuple[str, ...]:
    """Every workspace root an own section declares (``OpensWorkspaces``); () for none."""
    roots = [
        root
        for section in own_sections(config)
        if isinstance(section, OpensWorkspaces)
        for root in section.workspaces()
    ]
    return tuple(dict.fromkeys(roots))


def workspace_identity(config: Config) -> tuple[int, int] | None:
    """The (uid, gid) the first section declaring one (``RunsWorkAs``) runs work as; None for
    none."""
    for section in own_sections(config):
        if isinstance(section, RunsWorkAs):
            return section.runs_as()
    return None


def masked_paths(config: Config) -> tuple[str, ...]:
    """Every path an own section masks (``MasksPaths``) and the daemon's own paths
    (``daemon_paths``): what a command cannot see, nothing else may read from a workspace."""
    paths = [
        path
        for section in own_sections(config)
        if isinstance(section, MasksPaths)
        for path in section.masked()
    ]
    return tuple(dict.fromkeys([*paths, *daemon_paths(config)]))


@runtime_checkable
class NamesSecrets(Protocol):
    """A section reading credentials from environment variables (``api_key_env``): replay
    knows which ones a recording had set without knowing the section."""

    def secret_variables(self) -> tuple[str, ...]:
        """The variables' names."""
        ...


def secret_variables(config: Config) -> tuple[str, ...]:
    """Every environment variable the configuration reads a credential from, sorted: those
    the own sections name (``NamesSecrets``) and Redis's password."""
    names = {config.redis.password_env}
    for section in own_sections(config):
        if isinstance(section, NamesSecrets):
            names.update(section.secret_variables())
    return tuple(sorted(name for name in names if name))


@runtime_checkable
class OwnsPaths(Protocol):
    """A section whose specialist keeps private files (state-dir files, keys, sockets): it
    declares them here, and ``daemon_paths`` hides them from commands without knowing them."""

    def private_paths(self, state_dir: str) -> tuple[str, ...]:
        """The directories and key files to hide (a socket's folder, not the socket)."""
        ...


def daemon_paths(config: Config) -> tuple[str, ...]:
    """The daemon's own paths: the state and memory store directories, the folders of the
    client socket, the Memory Specialist's socket and the outbox, and every path a section
    declares private (``OwnsPaths``: nodes' keys and sockets, a unix:// Redis, the cache, the
    cron store). No command may see them or work in them: a non-root daemon's commands run as
    its own uid, so only a mask hides them."""
    files = (config.socket.path, config.memory.socket_path, config.outbox_path)
    paths = [config.daemon.state_dir, config.memory_dir]
    paths += [os.path.dirname(os.path.abspath(path)) for path in files if path]
    for section in [*_sections(config), *own_sections(config)]:
        if isinstance(section, OwnsPaths):
            paths += section.private_paths(config.daemon.state_dir)
    return tuple(dict.fromkeys(os.path.abspath(path) for path in paths))


def _sections(section: object) -> Iterator[object]:
    """Every section dataclass under ``section``, in field order (mappings not entered)."""
    for item in dataclasses.fields(section):  # type: ignore[arg-type]
        value = getattr(section, item.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            yield value
            yield from _sections(value)
