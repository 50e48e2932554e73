"""The csp-web command refuses usage it cannot honour with exit 2 and one line naming what to
change, before it opens a socket or any state: a send with nowhere to send, a replay asked
to record against a daemon, a socket a sandboxed command could reach."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

CLI = [sys.executable, "-m", "csp_web"]


def _run(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "CSP_WEB_CONFIG"}
    return subprocess.run(
        [*CLI, *args], input=stdin, capture_output=True, env=env, timeout=60, check=False
    )


def _config(tmp_path: Path, **sections: object) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"daemon": {"state_dir": str(tmp_path / "state")}, **sections}))
    return str(path)


def test_send_with_no_socket_given_configured_or_found_exits_3(tmp_path: Path) -> None:
    done = _run("send", "--config", _config(tmp_path), "-e", "TASK REQ:ping IN:SYS OUT:PONG")
    assert done.returncode == 3
    assert done.stdout == b""
    [line] = done.stderr.decode().splitlines()
    assert line.startswith("csp-web: send: no running daemon found (looked at the lock file in ")
    assert line.endswith("; pass --socket PATH or set socket.path")


def test_replay_record_against_a_daemon_socket_is_refused(tmp_path: Path) -> None:
    """Recording calls the live upstreams from this process; a daemon's would not be seen."""
    transcript = tmp_path / "t.csp"
    transcript.write_text("")
    socket_path = str(tmp_path / "csp.sock")
    done = _run("replay", "--record", "--socket", socket_path, str(transcript))
    assert done.returncode == 2
    assert done.stderr.decode().splitlines() == [
        "csp-web replay: --record and --record-mode run in-process; drop --socket"
    ]
    assert not (tmp_path / "t.cassette.json").exists()


def test_serve_on_a_socket_inside_a_workspace_root_exits_2_before_binding(
    tmp_path: Path,
) -> None:
    """A sandboxed command may write in its workspace: the daemon's socket there would let
    it talk to the daemon as the daemon's own user."""
    workspace = tmp_path / "work"
    workspace.mkdir(mode=0o700)
    config = _config(tmp_path, tool={"exec": {"workspace_roots": [str(workspace)]}})
    socket_path = workspace / "csp.sock"
    done = _run("serve", "--config", config, "--socket", str(socket_path), "--no-stdin")
    assert done.returncode == 2
    (line,) = done.stderr.decode().splitlines()
    assert line.startswith(f"csp-web: config: tool.exec.workspace_roots: {workspace} overlaps")
    assert not socket_path.exists()


def test_check_config_of_a_misspelt_key_exits_2_naming_its_path(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("socket:\n  pth: /tmp/x.sock\n")
    done = _run("check-config", str(path))
    assert done.returncode == 2
    assert done.stdout == b""
    (line,) = done.stderr.decode().splitlines()
    assert line.startswith("csp-web: config: ")
    assert "socket.pth: unknown key" in line
