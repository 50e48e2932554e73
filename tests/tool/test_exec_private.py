"""The daemon's own state and sockets stay out of every command's reach (issue 8.1).

The last test runs the exec service as a non-root uid, as the security report did: there the
sandbox user *is* the daemon's uid, so only the masks and the working-directory checks stand
between a command and the outbox, the cron store and the daemon's socket.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from dataclasses import replace

import pytest
import trio

from csp_web.config import (
    Config,
    ConfigError,
    DaemonConfig,
    SocketConfig,
    daemon_paths,
    with_section,
)
from csp_web.config.load import serving_socket
from csp_web.core.api.errors import OpError
from protocol import ErrorCode
from specialists.tool.config import ToolConfig
from specialists.tool.exec import ExecRequest, prepare_command

from .exec_support import IS_ROOT, NOBODY, bare_sandbox, make_config, scratch_dir


def test_a_workspace_root_containing_the_state_dir_is_refused_at_load() -> None:
    with scratch_dir() as workspace:
        state = os.path.join(workspace, ".state")
        with pytest.raises(ValueError, match=r"workspace_roots.*overlaps the daemon's own"):
            with_section(
                Config(daemon=DaemonConfig(state_dir=state)),
                "tool",
                ToolConfig(exec=make_config(workspace)),
            )


def test_a_workspace_root_inside_the_state_dir_is_refused_at_load() -> None:
    with scratch_dir() as state:
        inner = os.path.join(state, "w")
        with pytest.raises(ValueError, match="workspace_roots"):
            with_section(
                Config(daemon=DaemonConfig(state_dir=state)),
                "tool",
                ToolConfig(exec=make_config(inner)),
            )


def test_a_workspace_root_equal_to_the_socket_dir_is_refused_at_load() -> None:
    with (
        scratch_dir() as workspace,
        scratch_dir() as state,
        pytest.raises(ValueError, match="workspace_roots"),
    ):
        with_section(
            Config(
                daemon=DaemonConfig(state_dir=state),
                socket=SocketConfig(path=os.path.join(workspace, "csp.sock")),
            ),
            "tool",
            ToolConfig(exec=make_config(workspace)),
        )


def test_a_config_file_with_such_a_root_exits_2_naming_it(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(str(tmp_path), "config.yaml")
    state = os.path.join(str(tmp_path), "state")
    with open(path, "w") as f:
        f.write(
            f"daemon: {{state_dir: {state}}}\ntool: {{exec: {{workspace_roots: [{tmp_path}]}}}}\n"
        )
    done = subprocess.run(
        [sys.executable, "-m", "csp_web", "check-config", path],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert b"workspace_roots" in done.stderr
    assert b"Traceback" not in done.stderr


def test_the_socket_serve_is_given_counts_as_the_daemons_own_path() -> None:
    with scratch_dir() as workspace, scratch_dir() as state, scratch_dir() as elsewhere:
        config = with_section(
            Config(daemon=DaemonConfig(state_dir=state)),
            "tool",
            ToolConfig(exec=make_config(workspace)),
        )
        served = serving_socket(config, os.path.join(elsewhere, "csp.sock"))
        assert elsewhere in daemon_paths(served)  # its folder, as for socket.path
        assert serving_socket(config, None) is config
        with pytest.raises(ConfigError, match=r"workspace_roots.*overlaps the daemon's own"):
            serving_socket(config, os.path.join(workspace, "csp.sock"))


def test_serve_with_a_socket_inside_a_workspace_root_exits_2(tmp_path: os.PathLike[str]) -> None:
    path, workspace = os.path.join(str(tmp_path), "config.yaml"), os.path.join(str(tmp_path), "w")
    os.mkdir(workspace)
    with open(path, "w") as f:
        f.write(
            f"daemon: {{state_dir: {tmp_path}/state}}\n"
            f"tool: {{exec: {{workspace_roots: [{workspace}]}}}}\n"
        )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "csp_web",
            "serve",
            "--config",
            path,
            "--no-stdin",
            "--socket",
            f"{workspace}/csp.sock",
        ],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert b"workspace_roots" in done.stderr
    assert b"Traceback" not in done.stderr


@pytest.mark.parametrize("where", ["equal", "inside", "around"])
def test_a_working_dir_at_in_or_around_a_daemon_path_is_refused_at_run_time(where: str) -> None:
    # The load check keeps roots apart from the daemon's paths; this is the run-time line
    # behind it (a path created or moved under a root after start).
    with scratch_dir() as workspace:
        private = os.path.join(workspace, "state")
        os.makedirs(os.path.join(private, "inner"))
        working_dir = {
            "equal": private,
            "inside": os.path.join(private, "inner"),
            "around": workspace,
        }[where]
        sandbox = replace(bare_sandbox(), private=(private,))
        request = ExecRequest("true", working_dir=working_dir)
        with pytest.raises(OpError) as caught:
            prepare_command(request, make_config(workspace), sandbox=sandbox)
        assert caught.value.code == ErrorCode.PERMISSION_DENIED
        assert caught.value.detail == working_dir
        prepare_command(ExecRequest("true", working_dir=working_dir), make_config(workspace),
                        sandbox=bare_sandbox())  # fmt: skip


_NON_ROOT_DAEMON = textwrap.dedent(
    """
    import json, os, socket, sys
    import trio
    from csp_web.config import Config, DaemonConfig, SocketConfig, with_section
    from csp_web.core.api.context import Peer
    from tests.harness import build_dispatcher
    from csp_web.app.memory_path import outbox_path
    from csp_web.memory.outbox import open_outbox
    from protocol import Task
    from specialists.tool import TOOL
    from specialists.tool.config import ToolConfig
    from specialists.tool.services import ToolServices
    from specialists.tool.ops_exec import open_exec_services
    from tests.tool.exec_support import make_config

    state, workspace = sys.argv[1], sys.argv[2]
    sock_dir = os.path.join(state, "sock")
    os.makedirs(sock_dir, mode=0o700)
    sock_path = os.path.join(sock_dir, "csp.sock")
    out = {}
    try:
        with_section(Config(daemon=DaemonConfig(state_dir=state)),
                     "tool", ToolConfig(exec=make_config(os.path.dirname(state))))
        out["covering_root"] = "accepted"
    except ValueError as error:
        out["covering_root"] = str(error)
    config = with_section(
        Config(daemon=DaemonConfig(state_dir=state), socket=SocketConfig(path=sock_path)),
        "tool", ToolConfig(exec=make_config(workspace)))
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(sock_path)
    listener.listen()
    probe = (
        "import socket, sys\\n"
        "s = socket.socket(socket.AF_UNIX)\\n"
        "s.connect(sys.argv[1]); s.sendall(b'REQ:ping\\\\n\\\\n'); print('connected')"
    )
    commands = {
        "read_outbox": f"cat {state}/outbox.sqlite3",
        "list_state": f"ls -A {state}",
        "write_state": f"touch {state}/planted",
        "connect_socket": f"python3 -c {json.dumps(probe)} {sock_path}",
        "uid": "id -u",
    }

    async def main():
        async with (
            open_outbox(config.outbox_path, config.outbox, config.memory) as outbox,
            open_exec_services(config) as services,
        ):
            out["sandbox"] = services.sandbox.kind
            memory = outbox_path(config, outbox)
            tool = ToolServices(services, None, None)
            dispatcher = build_dispatcher(config, memory, TOOL.ops, tool)
            for name, command in commands.items():
                reply = await dispatcher.run(
                    Task("exec", "SHELL", "EXEC_RESULT", command, ()), Peer("t", os.getuid(), 1)
                )
                out[name] = [reply.status.value, reply.get("DATA"), reply.get("STDOUT_SUMMARY")]
            reply = await dispatcher.run(
                Task("exec", "SHELL", "EXEC_RESULT", "true", (("WORKING_DIR", state),)),
                Peer("t", os.getuid(), 1),
            )
            out["working_dir_state"] = [reply.status.value, reply.get("ERROR")]

    trio.run(main)
    out["planted"] = os.path.exists(os.path.join(state, "planted"))
    out["state_entries"] = sorted(os.listdir(state))
    print(json.dumps(out))
    """
)


@pytest.mark.skipif(not IS_ROOT, reason="switches to another uid to run as a non-root daemon")
async def test_a_non_root_daemon_keeps_its_state_and_socket_from_commands() -> None:
    # /usr/bin/python3 with the venv's packages: the venv's own interpreter may live where
    # the non-root uid cannot reach (/root/.pyenv). /var/tmp, not /tmp: the sandbox's private
    # /tmp would hide the state for a reason that has nothing to do with the masks.
    if shutil.which("python3", path="/usr/bin") is None:
        pytest.fail("/usr/bin/python3 is required (scripts/install-system-deps)")
    site = next(p for p in sys.path if p.endswith("site-packages"))
    with scratch_dir(parent="/var/tmp") as base, scratch_dir(parent="/var/tmp") as workspace:
        state = os.path.join(base, "state")
        os.mkdir(state, 0o700)
        os.chown(state, NOBODY, NOBODY)
        argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
        argv += ["/usr/bin/python3", "-c", _NON_ROOT_DAEMON, state, workspace]
        env = {"PYTHONPATH": f"{os.getcwd()}:{site}", "PATH": "/usr/bin:/bin", "HOME": base}
        with trio.fail_after(120):
            done = await trio.run_process(
                argv, env=env, cwd=workspace, capture_stdout=True, capture_stderr=True,
                check=False,
            )  # fmt: skip
        assert done.returncode == 0, done.stderr.decode()
        out = json.loads(done.stdout)
    assert "overlaps the daemon's own" in out["covering_root"]
    assert out["sandbox"] == "bwrap"
    assert out["uid"] == ["OK", "exit:0", str(NOBODY)]  # the daemon's own uid: masks only
    assert "outbox.sqlite3" in out["state_entries"]  # there to be read, were it visible
    assert out["read_outbox"][:2] == ["FAIL", "exit:1"]
    assert out["list_state"] == ["OK", "exit:0", ""]
    assert out["write_state"][:2] == ["FAIL", "exit:1"]
    assert out["connect_socket"][:2] == ["FAIL", "exit:1"]
    assert out["working_dir_state"] == ["FAIL", f"permission_denied:{state}"]
    assert out["planted"] is False
