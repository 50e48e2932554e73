"""The csp-web command run in this process (``tests.inprocess.run_main``): its one-line
set-up errors and exit codes, check-config, config --default and the health probe against a
real daemon. tests/test_cli.py and tests/test_health.py run the same as a subprocess; these
are measured by coverage."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio
import yaml

from csp_web.cli.health import HealthOptions, probe
from csp_web.core.daemon.statedir import StateDirBusy, hold_state_dir
from tests.conftest import Daemon
from tests.inprocess import run_main
from tests.test_cli import _one_error_line
from tests.test_health import wait_stats

REPO = Path(__file__).resolve().parent.parent


def _config(tmp_path: Path, **sections: object) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"daemon": {"state_dir": str(tmp_path / "state")}, **sections}))
    return str(path)


@pytest.fixture(autouse=True)
def _own_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No configuration from the environment; state under tmp_path."""
    for name in [name for name in os.environ if name.startswith("CSP_WEB")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def test_serve_no_stdin_without_a_socket_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main(["serve", "--no-stdin"]) == 2
    assert capsys.readouterr() == ("", "csp-web: --no-stdin needs --socket or socket.path\n")


def test_serve_on_a_socket_whose_folder_is_not_private_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "open"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    assert run_main(["serve", "--no-stdin", "--socket", str(folder / "s.sock")]) == 2
    uid = os.geteuid()
    out, err = capsys.readouterr()
    assert (out, _one_error_line(err)) == (
        "",
        f"csp-web: cannot serve: {folder} must be owned by uid {uid} and mode 0700"
        f" (it is uid {uid}, mode 0755)",
    )


def test_memory_sink_in_a_non_private_folder_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "mem"
    folder.mkdir()
    folder.chmod(0o755)
    argv = ["memory-sink", "--socket", str(folder / "m.sock"), "--dir", str(folder / "d")]
    assert run_main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("csp-web: memory-sink: ")
    assert "mode 0700 (it is uid" in err
    assert err.count("\n") == 1


def test_check_config_reports_a_good_file_and_refuses_a_bad_one_by_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_main(["check-config", str(REPO / "config.yaml")]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"ok: {REPO / 'config.yaml'}"
    bad = tmp_path / "bad.yaml"
    bad.write_text("daemon:\n  no_such_key: 1\n", "utf-8")
    assert run_main(["check-config", str(bad)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("csp-web: config: ")
    assert "no_such_key" in err


def test_config_default_prints_the_repositorys_config_yaml(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run_main(["config", "--default"]) == 0
    assert capsys.readouterr().out == (REPO / "config.yaml").read_text("utf-8")


def test_health_with_no_daemon_found_or_listening_exits_3(
    sock_dir: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_main(["health"]) == 3
    out, err = capsys.readouterr()
    assert out.startswith("unreachable: no running daemon found (looked at the lock file in ")
    assert (out.count("\n"), err) == (1, "")
    path = os.path.join(sock_dir, "none.sock")
    assert run_main(["health", "--socket", path, "--timeout", "5"]) == 3
    out, err = capsys.readouterr()
    assert out.startswith(f"unreachable: {path}: ")
    assert (out.count("\n"), err) == (1, "")


async def test_the_health_probe_of_a_daemon_with_its_sink_connected_is_healthy(
    daemon: Daemon,
) -> None:
    with trio.fail_after(60):
        await wait_stats(daemon.socket_path, "OUTBOX", "connected:true")
        assert await probe(HealthOptions(daemon.socket_path, 10.0)) == (0, "healthy")


def test_serve_on_a_socket_inside_a_workspace_root_exits_2_before_binding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workspace = tmp_path / "work"
    workspace.mkdir(mode=0o700)
    config = _config(tmp_path, tool={"exec": {"workspace_roots": [str(workspace)]}})
    socket_path = workspace / "csp.sock"
    assert run_main(["serve", "--config", config, "--socket", str(socket_path), "--no-stdin"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert _one_error_line(err).startswith(
        f"csp-web: config: tool.exec.workspace_roots: {workspace} overlaps"
    )
    assert not socket_path.exists()


def test_serve_on_a_state_dir_another_daemon_holds_exits_2_naming_it(
    tmp_path: Path, sock_dir: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path)
    socket_path = os.path.join(sock_dir, "csp.sock")
    busy = StateDirBusy(str(tmp_path / "state"), os.getpid())
    with hold_state_dir(str(tmp_path / "state")):
        assert run_main(["serve", "--config", config, "--socket", socket_path, "--no-stdin"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert _one_error_line(err) == f"csp-web: {busy}"
    assert not os.path.exists(socket_path)


def test_check_config_notes_a_workspace_root_that_overlaps_a_configured_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workspace = tmp_path / "work"
    workspace.mkdir(mode=0o700)
    secret = str(workspace / "keys")
    exec_section = {"workspace_roots": [str(workspace)], "protected_paths": [secret]}
    config = _config(tmp_path, tool={"exec": exec_section})
    assert run_main(["check-config", config]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"ok: {config}"
    assert (
        f"note: tool.exec.workspace_roots: {workspace} overlaps {secret}: read-only there"
        in (lines[1:])
    )
