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
import sys
import sysconfig
from collections.abc import Iterable
from typing import TYPE_CHECKING

from csp_web.config.root import ReadsInputs, own_sections

if TYPE_CHECKING:
    from csp_web.config.root import Config

# The daemon's own code: a rewritten module runs as the daemon at its next start.
_PACKAGES = ("csp_web", "protocol", "specialists")
# Where a systemd user service's units live (a root daemon's are in /etc, out of reach).
_USER_UNITS = "~/.config/systemd/user/"


def daemon_inputs(config: Config) -> tuple[str, ...]:
    """The absolute paths of what the daemon reads as configuration or runs: its config file
    and the folder it is read from, every file a section declares (``ReadsInputs``: TLS
    certificates and keys, Chromium, the exec shell and bwrap, each MCP server's command and
    the scripts and folder it names), Redis's TLS files, its systemd user units, and its own
    code (interpreter, packages, site-packages). A trailing slash marks a directory."""
    paths: list[str | None] = []
    if config.source is not None:
        paths += [config.source, os.path.dirname(os.path.abspath(config.source)) + "/"]
    paths += [
        p for s in own_sections(config) if isinstance(s, ReadsInputs) for p in s.input_paths()
    ]
    paths += [config.redis.tls_ca_file, config.redis.tls_cert_file, config.redis.tls_key_file]
    paths += [_USER_UNITS, *_code_paths()]
    return expand_protected(_absolute(path) for path in paths if path)


def expand_protected(paths: Iterable[str]) -> tuple[str, ...]:
    """``paths`` with ``~/`` made the daemon user's home on the host ($HOME, else its passwd
    entry), each normalised; a trailing slash (a directory) is kept."""
    expanded = []
    for path in paths:
        full = os.path.normpath(os.path.expanduser(path))
        expanded.append(full + "/" if path.endswith("/") and full != "/" else full)
    return tuple(dict.fromkeys(expanded))


def _absolute(path: str) -> str:
    full = os.path.abspath(os.path.expanduser(path))
    return full + "/" if path.endswith("/") and full != "/" else full


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
