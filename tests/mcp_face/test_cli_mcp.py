"""``csp-web mcp`` set-up errors: one line on stderr and the documented exit code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from csp_web.app.mcp_attach import ATTACH_WAIT_S
from csp_web.core.daemon.statedir import hold_state_dir

from .conftest import catalogue_tools, face_env


def _mcp(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "csp_web", "mcp", *args],
        input="",
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **face_env()},
    )


def _error_line(stderr: str) -> str:
    assert "Traceback" not in stderr
    (line,) = [line for line in stderr.splitlines() if line.startswith("csp-web:")]
    return line


def _config(tmp_path: Path) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(f"daemon:\n  state_dir: {tmp_path / 'state'}\n")
    return str(path)


def test_an_unknown_tool_name_exits_2_naming_it_and_the_available_ones(tmp_path: Path) -> None:
    done = _mcp("--config", _config(tmp_path), "--tool", "sys_ping")
    assert done.returncode == 2
    available = ", ".join(catalogue_tools("TOOL", "WEB"))  # exec is not configured
    assert _error_line(done.stderr) == (
        f"csp-web: mcp: no tool named sys_ping (available: {available})"
    )


def test_a_daemon_socket_nobody_serves_exits_3(sock_dir: str) -> None:
    path = os.path.join(sock_dir, "none.sock")
    done = _mcp("--socket", path)
    assert done.returncode == 3
    assert _error_line(done.stderr).startswith("csp-web: mcp: [Errno 2] No such file")


@pytest.mark.slow
def test_a_state_dir_another_daemon_holds_exits_2_pointing_at_socket(tmp_path: Path) -> None:
    """The holder serves no socket where the face looks (it waits ATTACH_WAIT_S for one)."""
    with hold_state_dir(str(tmp_path / "state")):
        done = _mcp("--config", _config(tmp_path))
    assert done.returncode == 2
    assert _error_line(done.stderr) == (
        f"csp-web: state dir {tmp_path / 'state'} is in use by another csp-web daemon "
        f"(pid {os.getpid()}); give each daemon its own daemon.state_dir; no daemon answered "
        f"at {tmp_path / 'state' / 'csp.sock'} in {ATTACH_WAIT_S:g}s: pass --socket"
    )


def test_stdin_at_eof_ends_the_stdio_face_with_exit_0(tmp_path: Path) -> None:
    done = _mcp("--config", _config(tmp_path))
    assert done.returncode == 0
    assert done.stdout == ""
