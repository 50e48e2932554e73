"""The core's settings, one package: its sections' frozen dataclasses, the root ``Config``,
the one strict loader (``load``), the one ``ConfigError``, what a reload may change
(``reload``), and the hooks through which a specialist's own section tells the core what it
must know (``OwnsPaths``, ``ReadsInputs``, ``OpensWorkspaces``, ``ChecksConfig``). A
specialist keeps its section in its own folder and names it in its
``Specialist.own_section`` (``SectionSpec``); the loader reads it from the catalogue
(docs/adding-an-op.md), as tool (``tool``), node (``nodes``) and browser (``tool.browser``)
do. The web section here predates that."""

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
from specialists.web.docs.config import DocsConfig
from csp_web.config.errors import ConfigError
from csp_web.config.guard import GuardConfig
from csp_web.config.inputs import daemon_inputs, expand_protected
from csp_web.config.redis import RedisConfig
from csp_web.config.root import (
    ChecksConfig,
    Config,
    OpensWorkspaces,
    OwnsPaths,
    ReadsInputs,
    SectionSpec,
    daemon_paths,
    own_sections,
    section_of,
    with_section,
    workspace_roots,
)
from specialists.web.config import (
    ApiConfig,
    CacheConfig,
    FetchConfig,
    RateConfig,
    SearchConfig,
    SearchProvider,
    SummarizeConfig,
    WebConfig,
)

__all__ = [
    "ApiConfig",
    "AuditConfig",
    "CacheConfig",
    "ChecksConfig",
    "Config",
    "ConfigError",
    "ConnectionConfig",
    "DaemonConfig",
    "DocsConfig",
    "FetchConfig",
    "GuardConfig",
    "MemoryConfig",
    "OutboxConfig",
    "OpensWorkspaces",
    "OwnsPaths",
    "RateConfig",
    "ReadsInputs",
    "RedisConfig",
    "SearchConfig",
    "SearchProvider",
    "SectionSpec",
    "SlotLimits",
    "SlotsConfig",
    "SocketConfig",
    "SummarizeConfig",
    "TasksConfig",
    "WebConfig",
    "daemon_inputs",
    "daemon_paths",
    "expand_protected",
    "own_sections",
    "section_of",
    "with_section",
    "workspace_roots",
]
