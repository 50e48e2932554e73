"""Every path the daemon keeps for itself is out of a command's reach, not only the state dir.

Found by the hostile pass: a non-root daemon (its commands run as its own uid, so the masks
are all that hides its files) showed commands a ``memory.directory`` outside the state dir
(the memory store: audit records, exec logs, File Cabinet), the nodes' socket directory, and
the socket ``csp-web serve --socket`` serves (a command could connect and run any op). These
tests run the real ``csp-web serve`` as nobody, as the security report on issue 8.1 did.
"""

from __future__ import annotations

import os
import shutil
import sys

import pytest
import trio

from csp_web.config import (
    CacheConfig,
    Config,
    DaemonConfig,
    MemoryConfig,
    RedisConfig,
    daemon_paths,
    with_section,
)
from csp_web.cron.config import CronConfig
from specialists.node.config import NodesConfig, NodeTlsConfig
from specialists.tool.config import ToolConfig, tool_section
from specialists.web.config import WebConfig, web_section

from .exec_support import IS_ROOT, NOBODY, make_config, scratch_dir

_PROBE = """\
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b"TASK REQ:ping IN:SYS OUT:PONG\\n\\n")
print(s.recv(100).decode().split("\\n")[0])
"""


def _nodes(daemon: DaemonConfig, nodes: NodesConfig) -> Config:
    return Config(daemon=daemon, sections=(("nodes", nodes),))


def _private_configs(base: str, state_dir: str = "/var/lib/csp-web-test") -> dict[str, Config]:
    """One config per setting that names a daemon path, each pointing it under ``base``."""
    state = DaemonConfig(state_dir=state_dir)
    return {
        "memory-directory": Config(daemon=state, memory=MemoryConfig(directory=base)),
        "nodes-socket": _nodes(state, NodesConfig(socket_path=f"{base}/n.sock")),
        "nodes-media": _nodes(state, NodesConfig(media_dir=base)),
        "nodes-tls-key": _nodes(
            state, NodesConfig(tls=NodeTlsConfig(cert_path=f"{base}/c.pem", key_path=f"{base}/k"))
        ),
        "redis-socket": Config(daemon=state, redis=RedisConfig(url=f"unix://{base}/r.sock?db=1")),
        "redis-tls-key": Config(daemon=state, redis=RedisConfig(tls_key_file=f"{base}/k.pem")),
        "cron-store": with_section(
            Config(daemon=state), "tool", ToolConfig(cron=CronConfig(f"{base}/cron.json"))
        ),
        "cache-directory": with_section(
            Config(daemon=state), "web", WebConfig(cache=CacheConfig(base))
        ),
    }


@pytest.mark.parametrize("setting", sorted(_private_configs("/x")))
def test_each_daemon_path_setting_is_a_daemon_path(setting: str) -> None:
    base = "/srv/elsewhere"
    paths = daemon_paths(_private_configs(base)[setting])
    assert any(path == base or path.startswith(base + "/") for path in paths), paths


@pytest.mark.parametrize("setting", sorted(_private_configs("/x")))
def test_a_workspace_root_holding_any_daemon_path_is_refused_at_load(setting: str) -> None:
    with scratch_dir() as workspace, scratch_dir() as state:
        config = _private_configs(workspace, state)[setting]
        with pytest.raises(ValueError, match=r"workspace_roots.*overlaps the daemon's own"):
            with_section(
                with_section(
                    Config(
                        daemon=config.daemon,
                        memory=config.memory,
                        sections=config.sections,
                        redis=config.redis,
                    ),
                    "web",
                    web_section(config),
                ),
                "tool",
                ToolConfig(exec=make_config(workspace), cron=tool_section(config).cron),
            )


async def _serve_as_nobody(base: str, frames: str, *args: str) -> str:
    """Run ``csp-web serve --config <base>/cfg.yaml *args`` as nobody with ``frames`` on stdin
    and return its stdout. /usr/bin/python3 with the venv's packages: the venv's own
    interpreter may live where nobody cannot reach (/root/.pyenv)."""
    if shutil.which("python3", path="/usr/bin") is None:
        pytest.fail("/usr/bin/python3 is required (scripts/install-system-deps)")
    site = next(p for p in sys.path if p.endswith("site-packages"))
    argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
    argv += ["/usr/bin/python3", "-m", "csp_web", "serve", "--config", f"{base}/cfg.yaml", *args]
    env = {"PYTHONPATH": f"{os.getcwd()}:{site}", "PATH": "/usr/bin:/bin", "HOME": base}
    with trio.fail_after(120):
        done = await trio.run_process(
            argv, stdin=frames.encode(), env=env, cwd=base, capture_stdout=True,
            capture_stderr=True, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


def _exec_frame(command: str, workspace: str) -> str:
    return f"TASK REQ:exec IN:SHELL OUT:EXEC_RESULT\nCOMMAND {command}\nWORKING_DIR {workspace}\n\n"


def _layout(base: str) -> tuple[str, str]:
    """A state dir, memory store, nodes socket dir and client socket dir, all 0700 and nobody's
    (outside /tmp: the sandbox's private /tmp would hide them for another reason), and a
    workspace holding the socket probe; returns (workspace, client socket path)."""
    for name in ("state", "mem", "nsock", "sock", "ws"):
        os.mkdir(os.path.join(base, name), 0o755 if name == "ws" else 0o700)
        os.chown(os.path.join(base, name), NOBODY, NOBODY)
    with open(os.path.join(base, "ws", "probe.py"), "w") as f:
        f.write(_PROBE)
    with open(os.path.join(base, "cfg.yaml"), "w") as f:
        f.write(
            f"daemon: {{state_dir: {base}/state}}\n"
            f"memory: {{directory: {base}/mem}}\n"
            f"nodes: {{socket_path: {base}/nsock/nodes.sock}}\n"
            f"tool: {{exec: {{workspace_roots: [{base}/ws], allowed_programs: [{{program: ls}},"
            " {program: python3}]}}\n"
        )
    return os.path.join(base, "ws"), os.path.join(base, "sock", "csp.sock")


def _data_lines(replies: str) -> list[str]:
    return [line for line in replies.splitlines() if line.startswith("DATA ")]


@pytest.mark.skipif(not IS_ROOT, reason="switches to another uid to run as a non-root daemon")
async def test_a_non_root_daemon_hides_its_memory_store_and_nodes_socket_from_commands() -> None:
    with scratch_dir(parent="/var/tmp") as base:
        workspace, _socket = _layout(base)
        frames = "".join(
            _exec_frame(command, workspace)
            for command in (f"ls -A {base}/mem", f"ls -A {base}/nsock", f"ls -A {base}/state")
        )
        replies = await _serve_as_nobody(base, frames)
        assert "memory.sqlite3" in os.listdir(os.path.join(base, "mem"))  # there, were it seen
    # Each listing is OK and empty: an empty read-only tmpfs lies over each of them.
    assert _data_lines(replies) == ["DATA exit:0"] * 3, replies
    assert replies.count('STDOUT_SUMMARY ""') == 3, replies


@pytest.mark.skipif(not IS_ROOT, reason="switches to another uid to run as a non-root daemon")
async def test_a_non_root_daemon_hides_the_socket_given_by_dash_dash_socket_from_commands() -> None:
    with scratch_dir(parent="/var/tmp") as base:
        workspace, socket_path = _layout(base)
        frames = _exec_frame(f"python3 probe.py {socket_path}", workspace)
        replies = await _serve_as_nobody(base, frames, "--socket", socket_path)
    # The probe cannot even find the socket (exit 1, FileNotFoundError), let alone run ops.
    assert _data_lines(replies) == ["DATA exit:1"], replies
    assert "FileNotFoundError" in replies, replies
    assert not [line for line in replies.splitlines() if "SUMMARY" in line and "STATUS" in line]
