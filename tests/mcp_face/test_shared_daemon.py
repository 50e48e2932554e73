"""``csp-web mcp`` with the README's one-line host entry, started by two hosts at once: the
first runs the daemon and serves the user's socket, the second is its client (issue 28:
before, the second exited "state dir in use" and its host saw only "Connection closed")."""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult

from csp_web.app.mcp_attach import NoDaemonSocket, daemon_answers, run_mcp_face, user_socket
from csp_web.config import Config, DaemonConfig
from csp_web.core.daemon.statedir import hold_state_dir

from .conftest import WAIT_S, face_command, face_env

pytestmark = pytest.mark.slow


def _host(config: str) -> Client:
    command, argv = face_command("--config", config)
    return Client(StdioServerParameters(command=command, args=argv, env=face_env()))


def _config_file(tmp_path: Path) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(f"daemon:\n  state_dir: {tmp_path / 'state'}\n")
    return str(path)


async def _cron(client: Client, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool("tool_cron", arguments)
    assert isinstance(result, CallToolResult)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    values: dict[str, Any] = result.structured_content
    return values


async def test_two_hosts_with_one_config_both_list_and_call_tools_on_one_daemon(
    tmp_path: Path,
) -> None:
    config = _config_file(tmp_path)
    add = {
        "action": "add",
        "job_id": "tides",
        "schedule": "0 6 * * *",
        "task": "TASK REQ:ping IN:SYS OUT:PONG",
    }
    with trio.fail_after(WAIT_S * 2):
        async with _host(config) as first:
            first_tools = await first.list_tools()
            async with _host(config) as second:
                second_tools = await second.list_tools()
                added = await _cron(second, add)  # the second host's call...
                listed = await _cron(first, {"action": "list"})  # ...is in the first's daemon
    assert [t.name for t in first_tools.tools] == [t.name for t in second_tools.tools]
    assert "tool_cron" in [t.name for t in first_tools.tools]
    assert added["JOB_ADDED"] == "tides"
    (job,) = listed["JOB"]
    assert '"tides"' in job
    assert not os.path.exists(tmp_path / "state" / "csp.sock")  # removed as the first ended


def test_a_held_state_dir_with_no_socket_answering_is_an_error_after_the_wait(
    tmp_path: Path,
) -> None:
    config = Config(daemon=DaemonConfig(state_dir=str(tmp_path / "state")))
    with hold_state_dir(str(tmp_path / "state")), pytest.raises(NoDaemonSocket) as raised:
        run_mcp_face(config, attached=lambda _: 0, own=lambda _: 0, wait_s=0.3)
    assert str(raised.value).endswith(
        f"no daemon answered at {tmp_path / 'state' / 'csp.sock'} in 0.3s: pass --socket"
    )


def test_a_held_state_dir_too_deep_for_a_socket_is_busy_at_once(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 100)
    config = Config(daemon=DaemonConfig(state_dir=str(deep)))
    with hold_state_dir(str(deep)), pytest.raises(NoDaemonSocket) as raised:
        run_mcp_face(config, attached=lambda _: 0, own=lambda _: 0)
    assert str(raised.value).endswith("; or pass --socket to use it")


def test_a_state_dir_too_deep_for_a_socket_path_has_no_shared_socket(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 100)
    config = Config(daemon=DaemonConfig(state_dir=str(deep)))
    assert user_socket(config) is None
    seen: list[Config] = []

    def own(served: Config) -> int:
        seen.append(served)
        return 0

    assert run_mcp_face(config, attached=lambda _: 1, own=own) == 0
    assert seen[0].socket.path is None  # served in process, as before, without a socket


def test_a_daemon_answering_on_the_users_socket_is_used_not_started(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    path = str(state / "csp.sock")
    config = Config(daemon=DaemonConfig(state_dir=str(state)))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen(4)
        used: list[str] = []

        def attached(where: str) -> int:
            used.append(where)
            return 5

        assert run_mcp_face(config, attached=attached, own=lambda _: 0) == 5
    assert used == [path]


SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.mark.skipif(
    os.getuid() != 0 or not os.path.exists(SYSTEM_PYTHON),
    reason="serving as another uid needs root and a python it may run",
)
def test_a_socket_another_uid_serves_is_not_used() -> None:
    """socket.path in a shared folder: whoever binds it first must not get the face's calls."""
    with tempfile.TemporaryDirectory(dir="/tmp") as shared:  # pytest's tmp_path is 0700
        os.chmod(shared, 0o777)
        _other_uid_serves(os.path.join(shared, "csp.sock"))


def _other_uid_serves(path: str) -> None:
    server = (
        "import os, socket, sys; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]);"
        " os.chmod(sys.argv[1], 0o777); s.listen(4); print('up', flush=True); sys.stdin.read()"
    )
    with subprocess.Popen(
        [SYSTEM_PYTHON, "-c", server, path],  # the venv's is under /root, closed to nobody
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        user=65534,
    ) as other:
        assert other.stdout is not None
        assert other.stdout.readline() == b"up\n"
        try:
            assert not daemon_answers(path)
        finally:
            other.communicate(timeout=WAIT_S)
