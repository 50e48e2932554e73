"""Every file the daemon reads as configuration or runs: what no command may change.

A sandboxed command that could rewrite one of them would act as the daemon at its next reload
or start (issue 22: ``allow_private`` appended to config.yaml, applied by a SIGHUP). Inside a
working directory they are read-only (the exec sandbox binds them so, see
``specialists/tool/exec/_protect.py``); secrets among them are hidden besides
(``daemon_paths``). ``csp-web check-config`` names each one a workspace root holds.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import sysconfig
from collections.abc import Iterable
from typing import TYPE_CHECKING

from specialists.tool.exec.config import expand_protected, overlaps
from specialists.tool.mcp.config import StdioServerConfig
from csp_web.config.root import ReadsInputs, own_sections

if TYPE_CHECKING:
    from csp_web.config.root import Config

# The daemon's own code: a rewritten module runs as the daemon at its next start.
_PACKAGES = ("csp_web", "protocol", "specialists")
# Where a systemd user service's units live (a root daemon's are in /etc, out of reach).
_USER_UNITS = "~/.config/systemd/user/"


def daemon_inputs(config: Config) -> tuple[str, ...]:
    """The absolute paths of what the daemon reads as configuration or runs: its config file
    and the folder it is read from, TLS certificates, keys and CA files, the programs it
    starts (Chromium, the exec shell, bwrap, each MCP server's command and the scripts and
    folder it names), its systemd user units, and its own code (interpreter, packages,
    site-packages). A trailing slash marks a directory."""
    paths: list[str | None] = []
    if config.source is not None:
        paths += [config.source, os.path.dirname(os.path.abspath(config.source)) + "/"]
    paths += [
        p for s in own_sections(config) if isinstance(s, ReadsInputs) for p in s.input_paths()
    ]
    paths += [config.redis.tls_ca_file, config.redis.tls_cert_file, config.redis.tls_key_file]
    paths.append(config.tool.exec.shell_program)
    if config.tool.exec.bwrap_program is not None:
        paths.append(_program(config.tool.exec.bwrap_program))
    for server in config.tool.mcp.servers.values():
        if isinstance(server, StdioServerConfig):
            paths += _server_files(server)
    paths += [_USER_UNITS, *_code_paths()]
    return expand_protected(_absolute(path) for path in paths if path)


def protected_paths(config: Config) -> tuple[str, ...]:
    """``tool.exec.protected_paths`` (``~`` expanded) and every daemon input, deduplicated."""
    return expand_protected((*config.tool.exec.protected_paths, *daemon_inputs(config)))


def workspace_overlaps(config: Config) -> list[tuple[str, str]]:
    """(workspace root, protected path) for each protected path a root holds or lies in:
    commands may not change it there (check-config reports each)."""
    pairs = []
    for root in config.tool.exec.workspace_roots:
        real = os.path.realpath(root)
        for path in protected_paths(config):
            if overlaps(real, os.path.realpath(path.rstrip("/") or "/")):
                pairs.append((root, path))
    return pairs


def _absolute(path: str) -> str:
    full = os.path.abspath(os.path.expanduser(path))
    return full + "/" if path.endswith("/") and full != "/" else full


def _program(name: str) -> str | None:
    """Where the daemon's PATH finds ``name`` (a path is kept as it is); None if nowhere."""
    if not name or os.sep in name:
        return name or None
    return shutil.which(name)


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


def _code_paths() -> Iterable[str]:
    """The interpreter, the standard library, site-packages and scripts, and the folders
    of the daemon's own packages (an editable or source checkout lies outside site-packages)."""
    yield os.path.realpath(sys.executable)
    for name in ("stdlib", "platstdlib", "purelib", "platlib", "scripts"):
        if path := sysconfig.get_paths().get(name):
            yield path + "/"
    for package in _PACKAGES:
        spec = importlib.util.find_spec(package)
        for location in (spec and spec.submodule_search_locations) or ():
            yield location + "/"
