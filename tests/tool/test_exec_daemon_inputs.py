"""What the daemon reads as configuration or runs is out of a command's reach (issue 22).

The report: a daemon with ``workspace_roots: [$HOME]`` let a command append ``allow_private``
to ``~/.config/csp-web/config.yaml``, and a SIGHUP applied it. The last test replays that on
a real ``csp-web serve`` whose $HOME is a scratch directory.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import yaml

from csp_web.app.catalog import config_from_mapping, load_config
from csp_web.client.trio_client import open_client
from csp_web.config import Config, RedisConfig, daemon_inputs, with_section
from csp_web.config.errors import ConfigError
from protocol import Status, Task
from specialists.browser.config import BrowserConfig
from specialists.node.config import NodesConfig, NodeTlsConfig
from specialists.tool.config import ToolConfig, workspace_overlaps, workspace_unwritable
from specialists.tool.exec.config import ExecConfig
from specialists.tool.mcp.config import McpConfig, StdioServerConfig
from tests.conftest import wait_until

from .exec_support import IS_ROOT, NOBODY, scratch_dir

_REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with scratch_dir() as path:
        monkeypatch.setenv("HOME", path)
        yield path


def _tls(cert_path: str, key_path: str) -> NodeTlsConfig:
    return NodeTlsConfig(cert_path=cert_path, key_path=key_path)


def test_every_file_the_daemon_reads_or_runs_is_a_daemon_input(tmp_path: Path) -> None:
    base = str(tmp_path)
    script = tmp_path / "server.py"
    script.write_text("")
    config = with_section(
        Config(
            sections=(
                ("nodes", NodesConfig(tls=_tls(f"{base}/n.crt", f"{base}/n.key"))),
                ("tool.browser", BrowserConfig(executable=f"{base}/chrome")),
            ),
            redis=RedisConfig(
                url="rediss://h:6380/0",
                tls_ca_file=f"{base}/ca.pem",
                tls_cert_file=f"{base}/c.pem",
                tls_key_file=f"{base}/c.key",
            ),
            source=f"{base}/conf/config.yaml",
        ),
        "tool",
        ToolConfig(
            exec=ExecConfig(shell_program=f"{base}/sh"),
            mcp=McpConfig(
                servers={
                    "toy": StdioServerConfig(
                        command=f"{base}/bin/run", args=("server.py", "-v"), cwd=f"{base}/srv"
                    )
                }
            ),
        ),
    )
    (tmp_path / "srv").mkdir()
    (tmp_path / "srv" / "server.py").write_text("")
    inputs = daemon_inputs(config)
    for path in (
        f"{base}/conf/config.yaml",
        f"{base}/conf/",  # the folder it is read from
        f"{base}/n.crt",
        f"{base}/n.key",
        f"{base}/ca.pem",
        f"{base}/c.pem",
        f"{base}/c.key",
        f"{base}/bin/run",
        f"{base}/chrome",
        f"{base}/sh",
        shutil.which("bwrap"),
        f"{base}/srv/",
        f"{base}/srv/server.py",
        os.path.expanduser("~/.config/systemd/user/"),
        str(_REPO / "csp_web") + "/",  # its own code
        os.path.realpath(sys.executable),
    ):
        assert path in inputs, path
    assert f"{base}/srv/-v" not in inputs  # an option, not a file


def test_the_loader_records_the_file_it_read_and_refuses_source_as_a_key(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("{}\n")
    assert load_config(str(path)).source == str(path)
    with pytest.raises(ConfigError, match="source: unknown key"):
        config_from_mapping({"source": "/etc/passwd"})


def test_check_config_names_each_protected_path_a_workspace_root_holds(
    home: str, tmp_path: Path
) -> None:
    path = os.path.join(home, "config.yaml")
    with open(path, "w") as f:
        f.write(_config_text(home, str(tmp_path / "state")))
    done = subprocess.run(
        [sys.executable, "-m", "csp_web", "check-config", path],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(_REPO)},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    notes = done.stdout.decode().splitlines()[1:]
    for protected in (path, f"{home}/", f"{home}/.bashrc", f"{home}/.config/"):
        line = f"note: tool.exec.workspace_roots: {home} overlaps {protected}: read-only there"
        assert line in notes
    overlapping = [note for note in notes if " overlaps " in note]
    assert len(overlapping) == len(workspace_overlaps(load_config(path)))


def _workspace_config(root: str, *, run_as: int = NOBODY) -> Config:
    exec_config = ExecConfig(workspace_roots=(root,), run_as_uid=run_as, run_as_gid=run_as)
    return with_section(Config(), "tool", ToolConfig(exec=exec_config))


@pytest.mark.parametrize(
    ("owner", "mode", "writable"),
    [
        (0, 0o755, False),  # root's: commands (nobody) could only read it
        (0, 0o777, True),
        (0, 0o773, True),  # other: w and x are what a new file needs
        (0, 0o775, False),
        (NOBODY, 0o755, True),
        (NOBODY, 0o555, False),
    ],
)
def test_a_root_daemon_names_each_workspace_root_its_commands_cannot_write(
    owner: int, mode: int, writable: bool
) -> None:
    if not IS_ROOT:
        pytest.skip("chowns a directory to nobody (run as root, as CI does)")
    with scratch_dir(owner=owner, mode=mode) as root:
        said = workspace_unwritable(_workspace_config(root), euid=0)
        assert said == ([] if writable else [f"{root} {UNWRITABLE_TAIL} {root}"])
        assert workspace_unwritable(_workspace_config(root), euid=1000) == []  # runs as itself


def test_check_config_notes_a_workspace_root_commands_cannot_write(tmp_path: Path) -> None:
    if not IS_ROOT:
        pytest.skip("only a root daemon switches commands to run_as_uid")
    with scratch_dir(owner=0) as root:
        path = tmp_path / "config.yaml"
        path.write_text(_config_text(root, str(tmp_path / "state")))
        argv = [sys.executable, "-m", "csp_web", "check-config", str(path)]
        done = subprocess.run(argv, capture_output=True, timeout=60, check=True)
        note = f"note: tool.exec.workspace_roots: {root} {UNWRITABLE_TAIL} {root}"
        assert note in done.stdout.decode().splitlines()
        os.chown(root, NOBODY, NOBODY)
        done = subprocess.run(argv, capture_output=True, timeout=60, check=True)
        assert "not writable" not in done.stdout.decode()


UNWRITABLE_TAIL = (
    f"is not writable by uid {NOBODY}, which commands run as under a root daemon:"
    f" chown {NOBODY}:{NOBODY}"
)


def _config_text(home: str, state: str, *, clients: tuple[int, ...] = ()) -> str:
    exec_section = {"workspace_roots": [home], "allow_shell": True}
    data = {"daemon": {"state_dir": state}, "tool": {"exec": exec_section}}
    if clients:
        data["socket"] = {"allowed_uids": list(clients)}
    return yaml.safe_dump(data)


def _daemon_argv(config_path: str, socket_path: str, as_nobody: bool) -> list[str]:
    """``csp-web serve``, as nobody when asked (with /usr/bin/python3 and the venv's packages:
    the venv's own interpreter may live where nobody cannot reach, /root/.pyenv)."""
    serve = ["-m", "csp_web", "serve", "--config", config_path, "--socket", socket_path]
    if not as_nobody:
        return [sys.executable, *serve, "--no-stdin"]
    drop = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
    return [*drop, "/usr/bin/python3", *serve, "--no-stdin"]


@pytest.mark.parametrize(
    "as_nobody",
    [
        False,
        pytest.param(
            True,
            marks=pytest.mark.skipif(not IS_ROOT, reason="switches uid to run a non-root daemon"),
        ),
    ],
    ids=["root-daemon", "non-root-daemon"],
)
async def test_a_command_in_a_home_workspace_cannot_rewrite_the_config_a_sighup_reads(
    home: str, as_nobody: bool
) -> None:
    # The non-root daemon is the report's: its commands run as its own uid, which owns the
    # config. /var/tmp, not /tmp: the sandbox's private /tmp would hide it for another reason.
    with scratch_dir(parent="/var/tmp") as base:
        config_dir = os.path.join(home, ".config", "csp-web")
        os.makedirs(config_dir)
        config_path = os.path.join(config_dir, "config.yaml")
        clients = (os.getuid(),) if as_nobody else ()  # this test, which is not nobody
        text = _config_text(home, os.path.join(base, "state"), clients=clients)
        Path(config_path).write_text(text)
        if IS_ROOT:
            for path in (f"{home}/.config", config_dir, config_path):
                os.chown(path, NOBODY, NOBODY)
        sock_dir = os.path.join(base, "sock")
        os.mkdir(sock_dir, 0o700)  # the daemon's own: 0700, as it insists
        if as_nobody:
            os.chown(sock_dir, NOBODY, NOBODY)
        log_path, socket_path = Path(base) / "daemon.log", os.path.join(sock_dir, "csp.sock")
        site = next(p for p in sys.path if p.endswith("site-packages"))
        env = {**os.environ, "PYTHONPATH": f"{_REPO}:{site}", "HOME": home}
        env.pop("CSP_WEB_CONFIG", None)
        argv = _daemon_argv(config_path, socket_path, as_nobody)
        with open(log_path, "wb") as log:
            process = await trio.lowlevel.open_process(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, cwd=base
            )
        try:
            await wait_until(lambda: " ready " in log_path.read_text(), timeout_s=60)
            attack = (
                "echo 'web: {guard: {allow_private: [127.0.0.0/8]}}'"
                " >> .config/csp-web/config.yaml; echo evil >> .bashrc; mv .config .c; true"
            )
            async with open_client(socket_path) as client:
                task = Task("exec", "SHELL", "EXEC_RESULT", attack, (("SHELL", "true"),))
                reply = await client.call(task, timeout_s=30)
                assert reply.status is Status.OK, reply
                stats = await client.call(Task("stats", "SYS", "STATS"), timeout_s=30)
            process.send_signal(signal.SIGHUP)
            await wait_until(lambda: "SIGHUP: settings " in log_path.read_text(), timeout_s=30)
            line = "SIGHUP: settings reloaded; applied: none; needs a restart (kept): none"
            assert line in log_path.read_text()
        finally:
            process.terminate()
            with trio.fail_after(30):
                await process.wait()
    assert Path(config_path).read_text() == text
    assert sorted(os.listdir(home)) == [".config"]  # no .bashrc, no .c
    protected = json.loads(stats.get("EXEC_PROTECTED") or "[]")
    assert {config_path, f"{config_dir}/", f"{home}/.bashrc", f"{home}/.config/"} <= {*protected}
