"""Configuration of the MCP pool: which servers exist, and the budgets every call runs under.

Frozen dataclasses with units in their names; each default cites its precedent. It is
``mcp`` in the tool specialist's own section (``tool.mcp``, specialists/tool/config.py). Its
server kinds (stdio or HTTP) are a tagged union: each kind's ``TAG`` is the key only it has,
and the one loader (``csp_web.config.load``) picks the kind by it.

Secrets never stand in the configuration: a server's environment and HTTP headers may name
the daemon's environment variables (``env_from``, ``headers_from_env``) whose values are read
when the server starts, so rotating a token needs no config edit and no secret lands in a file.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import ClassVar

from csp_web.config.errors import ConfigError

# A SERVER field value: one token on a CSP/1 line, safe in logs and in a process title.
_SERVER_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 token


def _frozen(mapping: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True, kw_only=True)
class StdioServerConfig:
    """A server the pool runs as a child process, speaking MCP on its stdin/stdout.

    ``env`` holds plain additions; ``env_from`` maps a child variable to the name of one of
    the daemon's variables (``{"GITHUB_TOKEN": "CSP_GITHUB_TOKEN"}``). Both are layered over
    the SDK's safe default environment (HOME, PATH, USER...), never the daemon's whole one.

    ``command`` must not ask for a parent-death signal (``bwrap --die-with-parent``,
    ``setpriv --pdeathsig``): the SDK forks the server from one of trio's worker threads, the
    signal fires when that *thread* exits, and trio retires an idle one after 10 s (checked:
    ``setpriv --pdeathsig KILL -- sleep 15`` started that way dies at 10.0 s). The pool closes
    the server itself (stdin, then its process group) when it stops.
    """

    TAG: ClassVar[str] = "command"

    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    env_from: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None

    def __post_init__(self) -> None:
        if not self.command:
            raise ConfigError("command: must not be empty")
        _check_names("env", self.env, _ENV_NAME)
        _check_names("env_from", self.env_from, _ENV_NAME, values=True)
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "env", _frozen(self.env))
        object.__setattr__(self, "env_from", _frozen(self.env_from))


@dataclass(frozen=True, kw_only=True)
class HttpServerConfig:
    """A server reached over streamable HTTP at ``url``.

    ``headers_from_env`` maps a header to the daemon variable holding its value
    (``{"Authorization": "CSP_SEARCH_AUTH"}``); there are deliberately no literal headers.
    """

    TAG: ClassVar[str] = "url"

    url: str
    headers_from_env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ConfigError("url: must be an http:// or https:// URL")
        _check_names("headers_from_env", self.headers_from_env, _HEADER_NAME)
        _check_names("headers_from_env", self.headers_from_env, _ENV_NAME, values=True)
        object.__setattr__(self, "headers_from_env", _frozen(self.headers_from_env))


ServerConfig = StdioServerConfig | HttpServerConfig


@dataclass(frozen=True, kw_only=True)
class McpConfig:
    """The servers by SERVER name, and the budgets of every session and call."""

    servers: Mapping[str, ServerConfig] = field(default_factory=dict)
    # The seed: "Timeout all exec calls (default 30s)".
    call_timeout_s: float = 30.0
    # A cold `npx`/`uvx` launch takes seconds before the handshake, on top of the SDK's own
    # 10 s discover probe budget (mcp.client.session.DISCOVER_TIMEOUT_SECONDS).
    start_timeout_s: float = 20.0
    # After a call times out, one tools/list must answer within this or the session restarts;
    # a live server answers in milliseconds, 5 s tolerates a loaded host.
    probe_timeout_s: float = 5.0
    # Restart delays double from the first to the cap and reset after a healthy run, as
    # Kubernetes' CrashLoopBackOff (10 s doubling to 5 min, reset after 10 min), scaled down
    # so the cap never exceeds one call's default deadline.
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    backoff_reset_after_s: float = 60.0
    # Runs in a row that end before backoff_reset_after_s (failed starts included) before the
    # server is given up on until a restart or reload: systemd's StartLimitBurst default, 5.
    max_failures: int = 5
    # DATA carries at most this much tool text; the brief's 2000, four seed summaries' worth.
    max_text_chars: int = 2000
    # The seed: "Max stdout/stderr summary: 500 chars each"; error text is such a summary.
    max_error_chars: int = 500
    # Structured content larger than this is left out (truncated JSON would not parse).
    max_structured_chars: int = 8000
    # Pages of tools/list followed, as the SDK's own relisting cap (_RELIST_PAGE_CAP).
    max_tool_pages: int = 100
    # A listing is one TOOL line per tool and must fit CSP/1's 128 fields and 1 MiB a frame
    # (protocol.Limits): 100 lines of at most ~4.3 kB leave room for the rest of the reply.
    max_listed_tools: int = 100
    max_schema_chars: int = 4000
    max_description_chars: int = 300

    def __post_init__(self) -> None:
        for name in self.servers:
            if not _SERVER_NAME.fullmatch(name):
                raise ConfigError(f"servers.{name}: name must match {_SERVER_NAME.pattern}")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "servers" and not value > 0:
                raise ConfigError(f"{f.name}: must be positive")
        if self.backoff_initial_s > self.backoff_max_s:
            raise ConfigError("backoff_initial_s: cannot exceed backoff_max_s")
        object.__setattr__(self, "servers", MappingProxyType(dict(self.servers)))

    def input_paths(self) -> tuple[str, ...]:
        """Each stdio server's program, working folder and the files its arguments name
        (``csp_web.config.ReadsInputs``): no command may change what the daemon starts."""
        found: list[str | None] = []
        for server in self.servers.values():
            if isinstance(server, StdioServerConfig):
                found += _server_files(server)
        return tuple(path for path in found if path)


def _server_files(server: StdioServerConfig) -> list[str | None]:
    """The server's program (as the daemon's PATH finds it), its working folder, and each
    argument naming an existing file or folder (relative ones from its working folder)."""
    base = server.cwd or os.getcwd()
    program = (
        os.path.join(base, server.command) if os.sep in server.command else None
    ) or shutil.which(server.command)
    found: list[str | None] = [program, server.cwd and server.cwd.rstrip("/") + "/"]
    for arg in server.args:
        candidate = os.path.join(base, arg)
        if (os.sep in arg and os.path.exists(candidate)) or os.path.isfile(candidate):
            found.append(candidate + ("/" if os.path.isdir(candidate) else ""))
    return found


def _check_names(
    path: str, mapping: Mapping[str, str], pattern: re.Pattern[str], *, values: bool = False
) -> None:
    for key, value in mapping.items():
        name = value if values else key
        if not isinstance(value, str) or not pattern.fullmatch(name):
            raise ConfigError(f"{path}.{key}: {name!r} is not a valid name")
