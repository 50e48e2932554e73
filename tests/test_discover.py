"""How a client command finds the daemon's socket (csp_web.cli.discover): --socket, then
socket.path, then the socket the daemon holding the state dir recorded in its lock file,
then $XDG_RUNTIME_DIR/csp-web/csp.sock; a guessed path only when a socket is bound there."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from csp_web.cli.discover import NoDaemonFound, client_socket, daemon_socket
from csp_web.config import Config
from csp_web.core.daemon.statedir import LOCK_FILE, hold_state_dir, served_socket


@pytest.fixture
def bound(sock_dir: str) -> Iterator[str]:
    """A Unix socket bound (not served: only its file matters here)."""
    path = os.path.join(sock_dir, "daemon.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    try:
        yield path
    finally:
        listener.close()


@pytest.fixture
def no_runtime_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)


def _bare(config: Config, state_dir: str) -> Config:
    """``config`` as a client without socket.path sees it, its state dir ``state_dir``."""
    return replace(
        config,
        socket=replace(config.socket, path=None),
        daemon=replace(config.daemon, state_dir=state_dir),
    )


def test_a_given_socket_then_socket_path_come_first_used_as_they_are(
    config: Config, tmp_path: Path, bound: str
) -> None:
    """Neither is checked: a wrong one fails to connect (exit 3), with its path named."""
    state_dir = str(tmp_path / "state")
    configured = replace(config, socket=replace(config.socket, path="/nowhere/set.sock"))
    with hold_state_dir(state_dir, socket_path=bound):
        assert daemon_socket("/nowhere/given.sock", configured) == "/nowhere/given.sock"
        assert daemon_socket(None, configured) == "/nowhere/set.sock"


def test_the_socket_the_running_daemon_recorded_is_found(
    config: Config, tmp_path: Path, bound: str, no_runtime_dir: None
) -> None:
    state_dir = str(tmp_path / "state")
    with hold_state_dir(state_dir, socket_path=bound):
        assert served_socket(state_dir) == bound
        assert daemon_socket(None, _bare(config, state_dir)) == bound
    assert served_socket(state_dir) is None  # released: it names no socket any more


def test_a_recorded_socket_nobody_binds_any_more_is_passed_over(
    config: Config, tmp_path: Path, bound: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon killed with SIGKILL leaves its line: the next place is tried."""
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    (state_dir / LOCK_FILE).write_text(f"4242\n{tmp_path / 'gone.sock'}\n")
    runtime = tmp_path / "run"
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    readme_path = runtime / "csp-web" / "csp.sock"
    readme_path.parent.mkdir(parents=True)
    os.symlink(bound, readme_path)  # the README's path, bound (stat follows the link)
    assert daemon_socket(None, _bare(config, str(state_dir))) == str(readme_path)


@pytest.mark.parametrize(
    "content",
    ["", "4242\n", "4242\nrelative.sock\n", "4242\n/no/newline/after"],
)
def test_a_lock_file_without_a_socket_line_names_none(tmp_path: Path, content: str) -> None:
    (tmp_path / LOCK_FILE).write_text(content)
    assert served_socket(str(tmp_path)) is None


def test_a_state_dir_without_a_lock_file_names_none(tmp_path: Path) -> None:
    assert served_socket(str(tmp_path / "never")) is None


def test_nothing_found_says_where_it_looked(
    config: Config,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    state_dir = str(tmp_path / "state")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    with pytest.raises(NoDaemonFound) as caught:
        daemon_socket(None, _bare(config, state_dir))
    looked = f"the lock file in {state_dir}, {tmp_path / 'run' / 'csp-web' / 'csp.sock'}"
    assert str(caught.value) == (
        f"no running daemon found (looked at {looked}); pass --socket PATH or set socket.path"
    )
    assert client_socket("nodes", None, _bare(config, state_dir)) is None
    assert capsys.readouterr().err == f"csp-web: nodes: {caught.value}\n"


def test_without_a_runtime_dir_only_the_state_dir_is_looked_at(
    config: Config, tmp_path: Path, no_runtime_dir: None
) -> None:
    state_dir = str(tmp_path / "state")
    with pytest.raises(NoDaemonFound, match=r"looked at the lock file in \S+\);"):
        daemon_socket(None, _bare(config, state_dir))
