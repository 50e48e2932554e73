"""All of csp-web's settings, one package: each section's frozen dataclasses, the root
``Config``, the one strict loader (``load``), the one ``ConfigError`` and what a reload may
change (``reload``). A new specialist keeps its section in its own folder and names it in
its ``Specialist.own_section`` (``SectionSpec``); the loader reads it from the catalogue
(docs/adding-an-op.md), as node (``nodes``) and browser (``tool.browser``) do. The web and
tool sections here predate that."""

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
from csp_web.config.docs import DocsConfig
from csp_web.config.errors import ConfigError
from specialists.tool.exec.config import ExecConfig, ProgramRule
from csp_web.config.guard import GuardConfig
from csp_web.config.inputs import daemon_inputs, protected_paths, workspace_overlaps
from specialists.tool.mcp.config import HttpServerConfig, McpConfig, ServerConfig, StdioServerConfig
from csp_web.config.redis import RedisConfig
from csp_web.config.root import (
    Config,
    OwnsPaths,
    ReadsInputs,
    SectionSpec,
    daemon_paths,
    own_sections,
    section_of,
    with_section,
)
from specialists.tool.config import CronConfig, ToolConfig
from csp_web.config.web import (
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
    "Config",
    "ConfigError",
    "ConnectionConfig",
    "CronConfig",
    "DaemonConfig",
    "DocsConfig",
    "ExecConfig",
    "FetchConfig",
    "GuardConfig",
    "HttpServerConfig",
    "McpConfig",
    "MemoryConfig",
    "OutboxConfig",
    "OwnsPaths",
    "ProgramRule",
    "RateConfig",
    "ReadsInputs",
    "RedisConfig",
    "SearchConfig",
    "SearchProvider",
    "SectionSpec",
    "ServerConfig",
    "SlotLimits",
    "SlotsConfig",
    "SocketConfig",
    "StdioServerConfig",
    "SummarizeConfig",
    "TasksConfig",
    "ToolConfig",
    "WebConfig",
    "daemon_inputs",
    "daemon_paths",
    "own_sections",
    "protected_paths",
    "section_of",
    "with_section",
    "workspace_overlaps",
]
