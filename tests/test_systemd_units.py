"""The shipped systemd units (deploy/systemd) as systemd itself reads them: ``systemd-analyze
verify`` on each, with nothing to say, on the systemd this project installs from (252,
Debian 12: no ``Type=notify-reload``); and the socket's folder is the service user's."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DEPLOY = Path(__file__).resolve().parent.parent / "deploy" / "systemd"
UNITS = sorted(p for p in DEPLOY.iterdir() if p.suffix in (".service", ".socket"))
SHIPPED_BINARY = "/opt/csp-web/.venv/bin/csp-web"  # docs/systemd.md's install path

needs_analyze = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None,
    reason="systemd-analyze is not installed (Debian: apt-get install systemd)",
)


def _entries(path: Path) -> dict[str, str]:
    lines = path.read_text("utf-8").splitlines()
    pairs = (line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))
    return dict(pairs)


def _installed_copy(tmp_path: Path) -> list[Path]:
    """The units as installed here: verify checks that ExecStart's program exists, so the
    shipped /opt path becomes this checkout's csp-web."""
    program = Path(sys.executable).parent / "csp-web"
    copies = []
    for unit in UNITS:
        copy = tmp_path / unit.name
        copy.write_text(unit.read_text("utf-8").replace(SHIPPED_BINARY, str(program)), "utf-8")
        copies.append(copy)
    return copies


@needs_analyze
def test_systemd_analyze_verifies_every_shipped_unit_without_a_word(tmp_path: Path) -> None:
    assert {u.name for u in UNITS} == {"csp-web.service", "csp-web.socket"}
    done = subprocess.run(
        ["systemd-analyze", "verify", *map(str, _installed_copy(tmp_path))],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # A key systemd does not know (notify-reload on 252) is only a warning: rc 0, one line.
    assert (done.returncode, done.stderr, done.stdout) == (0, "", "")


def test_the_service_reloads_by_sighup_as_systemd_252_can() -> None:
    service = _entries(DEPLOY / "csp-web.service")
    assert service["Type"] == "notify"
    assert service["ExecReload"] == "/bin/kill -HUP $MAINPID"


def test_the_socket_folder_is_the_service_users_and_outlives_a_stop() -> None:
    service, socket_unit = _entries(DEPLOY / "csp-web.service"), _entries(DEPLOY / "csp-web.socket")
    folder = Path(socket_unit["ListenStream"]).parent
    assert folder == Path("/run") / service["RuntimeDirectory"]
    assert service["RuntimeDirectoryPreserve"] == "yes"  # a stop keeps the socket systemd holds
    assert socket_unit["SocketUser"] == service["User"]
