"""Helpers for the exec engine's tests: real workspaces, real sandboxes, /proc lookups.

Plain functions rather than conftest fixtures: tests/tool is shared with the MCP tests, and
fixtures here would leak into their namespace. Workspaces are made under /tmp, not pytest's
tmp_path, whose 0700 root base the sandbox user (nobody, when the suite runs as root) cannot
enter. Bubblewrap is required (CI installs the ``bubblewrap`` package): a missing one fails
the bwrap tests loudly instead of skipping them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import trio

from specialists.tool.exec import Sandbox, probe_sandbox
from specialists.tool.exec._access import RunAs
from specialists.tool.exec.config import ExecConfig, ProgramRule

NOBODY = 65534
IS_ROOT = os.geteuid() == 0
SANDBOX_UID = NOBODY if IS_ROOT else os.getuid()  # whom commands run as
KINDS = ("bwrap", "none")
TEST_PROGRAMS = ("python3", "sleep", "yes", "dd", "id", "printenv", "touch", "cat")


@contextlib.contextmanager
def scratch_dir(
    *, owner: int | None = NOBODY, mode: int = 0o755, parent: str = "/tmp"
) -> Iterator[str]:
    """A fresh directory (chowned to ``owner`` when the suite is root), removed afterwards."""
    path = tempfile.mkdtemp(prefix="csp-exec-", dir=parent)
    os.chmod(path, mode)
    if owner is not None and IS_ROOT:
        os.chown(path, owner, owner)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def make_config(workspace: str, **overrides: Any) -> ExecConfig:
    """The default policy plus the test tools, rooted at ``workspace``; shell allowed."""
    allowed = (*ExecConfig().allowed_programs, *(ProgramRule(name) for name in TEST_PROGRAMS))
    config = ExecConfig(workspace_roots=(workspace,), allowed_programs=allowed, allow_shell=True)
    return replace(config, **overrides)


def bare_sandbox() -> Sandbox:
    """A sandbox description for checks that spawn nothing (no probe)."""
    run_as = RunAs(NOBODY, NOBODY) if IS_ROOT else None
    return Sandbox("none", "/usr/bin/prlimit", "/usr/bin/setpriv", run_as)


async def probe(config: ExecConfig, kind: str) -> Sandbox:
    """The real sandbox of ``kind``; fails the test if bubblewrap cannot run here."""
    if kind == "none":
        return await probe_sandbox(replace(config, bwrap_program=None))
    sandbox = await probe_sandbox(config)
    if sandbox.kind != "bwrap":
        pytest.fail(f"bubblewrap is required for this test: {sandbox.reason}")
    return sandbox


def live_pids(marker: str) -> list[int]:
    """Host pids of live (not zombie) processes whose command line contains ``marker``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{name}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in cmdline and state != b"Z":
            found.append(int(name))
    return found


async def wait_for_pid(marker: str, *, timeout_s: float = 10.0) -> int:
    """The pid of the first live process whose command line holds ``marker``, once it runs."""
    with trio.fail_after(timeout_s):
        while not (pids := live_pids(marker)):
            await trio.sleep(0.01)
    return pids[0]
