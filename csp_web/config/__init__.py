"""The core's settings, one package: its sections' frozen dataclasses, the root ``Config``,
the one strict loader (``load``), the one ``ConfigError``, what a reload may change
(``reload``), and the hooks through which a specialist's own section tells the core what it
must know (``OwnsPaths``, ``ReadsInputs``, ``OpensWorkspaces``, ``ChecksConfig``). A
specialist keeps its section in its own folder and names it in its
``Specialist.own_section`` (``SectionSpec``); the loader reads it from the catalogue
(docs/adding-an-op.md), as web (``web``), tool (``tool``), node (``nodes``) and browser
(``tool.browser``) do. Shared infrastructure's settings that a specialist's section holds
(the guard, the cache) are here, found by their class (``shared_section``)."""

from csp_web.config.budgets import BudgetsConfig
from csp_web.config.cache import CacheConfig
from csp_web.config.core import (
    AuditConfig,
    ConnectionConfig,
    DaemonConfig,
    MemoryConfig,
    OutboxConfig,
    SlotLimits,
    SlotsConfig,
    SocketConfig,
    TasksConfig,
)
from csp_web.config.errors import ConfigError
from csp_web.config.guard import GuardConfig, TlsConfig, proxy_address
from csp_web.config.inputs import daemon_inputs, expand_protected
from csp_web.config.metrics import MetricsConfig
from csp_web.config.otel import OtelConfig
from csp_web.config.redis import RedisConfig
from csp_web.config.root import (
    ChecksConfig,
    Config,
    MasksPaths,
    NamesSecrets,
    OpensWorkspaces,
    OwnsPaths,
    ReadsInputs,
    RoutesEgress,
    RunsWorkAs,
    SectionSpec,
    daemon_paths,
    egress_proxy,
    masked_paths,
    own_sections,
    secret_variables,
    section_of,
    shared_section,
    with_section,
    with_shared,
    workspace_identity,
    workspace_roots,
)

__all__ = [
    "AuditConfig",
    "BudgetsConfig",
    "CacheConfig",
    "ChecksConfig",
    "Config",
    "ConfigError",
    "ConnectionConfig",
    "DaemonConfig",
    "GuardConfig",
    "MasksPaths",
    "MemoryConfig",
    "MetricsConfig",
    "NamesSecrets",
    "OpensWorkspaces",
    "OtelConfig",
    "OutboxConfig",
    "OwnsPaths",
    "ReadsInputs",
    "RedisConfig",
    "RoutesEgress",
    "RunsWorkAs",
    "SectionSpec",
    "SlotLimits",
    "SlotsConfig",
    "SocketConfig",
    "TasksConfig",
    "TlsConfig",
    "daemon_inputs",
    "daemon_paths",
    "egress_proxy",
    "expand_protected",
    "masked_paths",
    "own_sections",
    "proxy_address",
    "secret_variables",
    "section_of",
    "shared_section",
    "with_section",
    "with_shared",
    "workspace_identity",
    "workspace_roots",
]
