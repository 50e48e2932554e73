"""``csp-web memory ls`` and ``csp-web memory cat``: the real command, as a process, against a
daemon serving a real socket with the reference Memory Specialist behind it (SPEC M-3, M-7,
M-9); ``csp-web memory-sink --config``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from functools import partial
from pathlib import Path

import pytest
import trio
import yaml

from csp_web.cli.memory import PAGE_SIZE, MemoryOptions, run_memory, shown
from csp_web.client.trio_client import open_client
from csp_web.config import Config, SocketConfig
from csp_web.core.api.context import Peer
from csp_web.core.api.replies import Result, ok_reply
from csp_web.core.daemon.statedir import hold_state_dir
from csp_web.core.transports.unix import Lease, serve_unix
from protocol import NEED_DATA, Connection, Status, Task, serialize
from tests.conftest import Daemon, Sink, start_daemon

CLI = [sys.executable, "-m", "csp_web"]
WAIT_S = 120.0  # a child imports the whole daemon on a shared machine


def _env(**extra: str) -> dict[str, str]:
    """No config from the environment: each test says where the daemon is."""
    env = {k: v for k, v in os.environ.items() if k not in ("CSP_WEB_CONFIG", "XDG_RUNTIME_DIR")}
    return {**env, **extra}


async def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(WAIT_S):
        return await trio.run_process(
            [*CLI, *args],
            check=False,
            capture_stdout=True,
            capture_stderr=True,
            env=env or _env(),
        )


def _write_task(task_id: str, path: str, data: str = "x") -> Task:
    fields = (("ID", task_id), ("FROM", "web"), ("TYPE", "note"), ("PATH", path), ("DATA", data))
    return Task("write", "MEMORY", "ACK", None, fields)


async def _write(daemon: Daemon, *items: tuple[str, str]) -> None:
    """Relayed writes, as a client sends them to the daemon."""
    async with open_client(daemon.socket_path) as client:
        for n, (path, data) in enumerate(items):
            task = _write_task(f"cli-{n}", path, data)
            assert (await client.call(task, timeout_s=20)).status is Status.OK


@pytest.mark.slow  # the command as a process: it imports the daemon
async def test_memory_ls_prints_every_path_under_the_prefix_over_many_pages(
    daemon: Daemon, sink: Sink, config: Config
) -> None:
    """More paths than one REQ:list page holds: ls follows NEXT_START to the last one."""
    paths = await _fill_pages(config)
    done = await _cli("memory", "--socket", daemon.socket_path, "ls", "many/")
    assert (done.returncode, done.stderr) == (0, b"")
    assert done.stdout.decode().splitlines() == paths


async def test_memory_ls_in_process_follows_next_start_across_pages(
    daemon: Daemon, sink: Sink, config: Config, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = await _fill_pages(config)
    code, out, err = await _memory(capsys, daemon.socket_path, "ls", "many/")
    assert (code, err) == (0, "")
    assert out.splitlines() == paths


async def _fill_pages(config: Config) -> list[str]:
    """Store one path more than ls asks per page under ``many/``, and one elsewhere, straight
    at the sink in one pipelined batch; the paths under ``many/``."""
    sink_socket = config.memory.socket_path
    assert sink_socket is not None
    paths = [f"many/{n:04d}.md" for n in range(PAGE_SIZE + 1)]
    writes: list[Task | Mapping[str, str]] = [
        _write_task(f"m-{n}", path) for n, path in enumerate([*paths, "other/x.md"])
    ]
    async with open_client(sink_socket) as client:
        replies = await client.call_many(writes, timeout_s=60)
    assert {reply.status for reply in replies} == {Status.OK}
    return paths


@pytest.mark.slow  # the command as a process: it imports the daemon
async def test_memory_cat_prints_the_writes_at_a_path_in_order(daemon: Daemon, sink: Sink) -> None:
    await _write(daemon, ("notes/tides.md", "High water at 06:12."), ("notes/tides.md", "Low."))
    done = await _cli("memory", "--socket", daemon.socket_path, "cat", "notes/tides.md")
    assert (done.returncode, done.stdout) == (0, b"High water at 06:12.\nLow.\n")


async def _memory(
    capsys: pytest.CaptureFixture[str], path: str, action: str, target: str = ""
) -> tuple[int, str, str]:
    """``csp-web memory`` run in this process: (exit code, stdout, stderr)."""
    code = await run_memory(MemoryOptions(path, action, target, timeout_s=20))
    out, err = capsys.readouterr()
    return code, out, err


async def test_memory_ls_and_cat_of_nothing_exit_1_with_the_daemons_error(
    daemon: Daemon, sink: Sink, capsys: pytest.CaptureFixture[str]
) -> None:
    path = daemon.socket_path
    assert await _memory(capsys, path, "ls", "none/") == (
        1,
        "",
        "csp-web: memory ls: not_found:no writes under PREFIX\n",
    )
    assert await _memory(capsys, path, "cat", "none/x.md") == (
        1,
        "",
        "csp-web: memory cat: not_found:no writes at PATH\n",
    )
    assert await _memory(capsys, path, "ls", "../etc") == (
        1,
        "",
        "csp-web: memory ls: invalid_field:PREFIX must be relative without '..'\n",
    )


async def test_memory_ls_and_cat_answer_in_process_as_the_command_does(
    daemon: Daemon, sink: Sink, capsys: pytest.CaptureFixture[str]
) -> None:
    await _write(daemon, ("in/a.md", "one"), ("in/b.md", "two"))
    path = daemon.socket_path
    assert await _memory(capsys, path, "ls", "in/") == (0, "in/a.md\nin/b.md\n", "")
    assert await _memory(capsys, path, "cat", "in/b.md") == (0, "two\n", "")


async def test_memory_cat_escapes_what_a_terminal_would_act_on_and_keeps_lines_and_tabs(
    daemon: Daemon, sink: Sink, capsys: pytest.CaptureFixture[str]
) -> None:
    """A write holds what a page said: its OSC 52 (clipboard) and bidi override reach the
    screen escaped, its lines and tabs as they are."""
    hostile = "title\x1b]52;c;cm0gLXJmIH4=\x07\tend\u202e"
    await _write(daemon, ("pages/hostile.md", hostile))
    code, out, err = await _memory(capsys, daemon.socket_path, "cat", "pages/hostile.md")
    assert (code, err) == (0, "")
    assert out == "title\\x1b]52;c;cm0gLXJmIH4=\\x07\tend\\u202e\n"


async def test_memory_against_a_socket_nobody_serves_exits_3(
    sock_dir: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = os.path.join(sock_dir, "none.sock")
    code, out, err = await _memory(capsys, path, "cat", "a")
    assert (code, out) == (3, "")
    assert err.startswith(f"csp-web: cannot reach the daemon at {path}: ")


@pytest.mark.slow  # the command as a process: it imports the daemon
async def test_memory_ls_finds_the_running_daemon_without_being_told_its_socket(
    daemon: Daemon, sink: Sink, tmp_path: Path
) -> None:
    """As ``csp-web memory ls`` is typed: the daemon holding the user's state dir
    ($XDG_STATE_HOME/csp-web) named its socket in its lock file."""
    await _write(daemon, ("found/a.md", "x"))
    xdg = tmp_path / "xdg"
    with hold_state_dir(str(xdg / "csp-web"), socket_path=daemon.socket_path):
        done = await _cli("memory", "ls", env=_env(XDG_STATE_HOME=str(xdg)))
    assert (done.returncode, done.stderr) == (0, b"")
    assert "found/a.md" in done.stdout.decode().splitlines()


@pytest.mark.slow  # the command as a process: it imports the daemon
async def test_memory_ls_without_a_daemon_exits_3_saying_where_it_looked(
    tmp_path: Path,
) -> None:
    state = tmp_path / "xdg"
    missing = await _cli("memory", "ls", env=_env(XDG_STATE_HOME=str(state)))
    assert missing.returncode == 3
    assert missing.stderr.decode() == (
        f"csp-web: memory: no running daemon found (looked at the lock file in {state}/csp-web);"
        " pass --socket PATH or set socket.path\n"
    )


async def _backwards_sink(stream: trio.SocketStream, peer: Peer, lease: Lease) -> None:
    """A Memory Specialist whose every page says the next one starts before it."""
    codec = Connection()
    async with stream:
        while True:
            event = codec.next_event()
            if event is NEED_DATA:
                data = await stream.receive_some(65536)
                if not data:
                    return
                codec.receive_data(data)
            elif isinstance(event, Task):
                fields = (("PATH", "b"), ("NEXT_START", "a"))
                page = Result("paths:1", scope=("memory",), fields=fields)
                await stream.send_all(serialize(ok_reply(page, event.id)))


async def test_memory_ls_stops_when_the_memory_specialists_next_start_goes_back(
    nursery: trio.Nursery, config: Config, sock_dir: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A broken or hostile Memory Specialist cannot keep ls paging forever."""
    assert config.memory.socket_path is not None
    serve = partial(
        serve_unix,
        config.memory.socket_path,
        SocketConfig(),
        _backwards_sink,
        handler_nursery=nursery,
    )
    await nursery.start(serve)
    daemon = await start_daemon(nursery, config, os.path.join(sock_dir, "csp.sock"))
    assert await _memory(capsys, daemon.socket_path, "ls") == (
        1,
        "b\n",
        "csp-web: memory ls: NEXT_START 'a' goes back\n",
    )


@pytest.mark.parametrize(
    ("path", "printed"),
    [
        ("notes/a.md", "notes/a.md"),
        ("notes/\x1b[2Jclear", "notes/\\x1b[2Jclear"),
        ("notes/\u202egnp.exe", "notes/\\u202egnp.exe"),
        ("notes/\U000e0001tag", "notes/\\U000e0001tag"),
        ("notes/été\tx", "notes/été\\x09x"),
    ],
)
def test_a_listed_path_is_printed_with_its_control_characters_escaped(
    path: str, printed: str
) -> None:
    """A client may store a path holding terminal escapes; ls never sends them raw."""
    assert shown(path) == printed


# --- csp-web memory-sink --config ---------------------------------------------------------


def _sink_config(directory: Path, settings: dict[str, object]) -> str:
    path = directory / "sink.yaml"
    path.write_text(yaml.safe_dump(settings))
    return str(path)


@pytest.mark.slow  # the command as a process: it imports the daemon
async def test_memory_sink_reads_its_retention_settings_from_config(
    tmp_path: Path, sock_dir: str
) -> None:
    """``memory-sink --config`` was refused by the argument parser (exit 2): now the file's
    memory settings bound the store, so a write past retention_max_bytes is too_large."""
    config = _sink_config(
        tmp_path, {"daemon": {"log_level": "info"}, "memory": {"retention_max_bytes": 4096}}
    )
    socket_path = os.path.join(sock_dir, "m", "m.sock")
    argv = [*CLI, "memory-sink", "--config", config, "--socket", socket_path]
    argv += ["--dir", str(tmp_path / "data")]
    process = await trio.lowlevel.open_process(
        argv, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env()
    )
    try:
        assert process.stderr is not None
        log = b""
        with trio.fail_after(WAIT_S):
            while b"csp-web memory-sink ready" not in log:
                chunk = await process.stderr.receive_some(65536)
                assert chunk, log
                log += chunk
        fields = (("ID", "big-1"), ("FROM", "web"), ("TYPE", "note"), ("PATH", "a"))
        async with open_client(socket_path) as client:
            big = await client.call(
                Task("write", "MEMORY", "ACK", None, (*fields, ("DATA", "x" * 5000))), timeout_s=20
            )
    finally:
        process.terminate()
        with trio.fail_after(WAIT_S):
            await process.wait()
    assert big.get("ERROR") == "too_large:DATA of 5000 bytes; retention 4096"


@pytest.mark.slow  # the command as a process: it imports the daemon
async def test_memory_sink_with_a_bad_config_exits_2_with_one_line(
    tmp_path: Path, sock_dir: str
) -> None:
    config = _sink_config(tmp_path, {"memory": {"retention_max_byte": 1}})
    done = await _cli(
        "memory-sink",
        "--config",
        config,
        "--socket",
        os.path.join(sock_dir, "m.sock"),
        "--dir",
        str(tmp_path / "data"),
    )
    assert (done.returncode, done.stderr) == (
        2,
        b"csp-web: config: memory.retention_max_byte: unknown key\n",
    )
