"""The csp-web command: one-line set-up errors with documented exit codes, --version,
``python -m csp_web``, ``config --default``, help texts, in-process replay with its own sink."""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from csp_web import __version__
from csp_web.app.catalog import config_from_mapping, config_sections
from csp_web.app.main import _parser
from csp_web.config import Config
from tests.conftest import Sink

REPO = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "csp_web"]
TRANSCRIPTS = sorted(str(p) for p in (REPO / "tests" / "transcripts").glob("*.csp"))


def _run(
    *args: str, stdin: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def _one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if line.startswith("csp-web:")]
    assert len(errors) == 1, stderr
    return errors[0]


def test_serve_on_a_socket_whose_folder_is_not_private_exits_2_with_one_line(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "open"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    done = _run("serve", "--no-stdin", "--socket", str(folder / "s.sock"))
    uid = os.geteuid()
    assert done.returncode == 2
    assert _one_error_line(done.stderr) == (
        f"csp-web: cannot serve: {folder} must be owned by uid {uid} and mode 0700"
        f" (it is uid {uid}, mode 0755)"
    )


@pytest.mark.parametrize(
    ("path", "cause"),
    [
        ("/proc/csp.sock", "/proc must be owned by uid"),
        ("/proc/1/none/csp.sock", "cannot create the folder of /proc/1/none/csp.sock: "),
    ],
)
def test_serve_on_a_socket_in_proc_exits_2_with_one_line(path: str, cause: str) -> None:
    done = _run("serve", "--no-stdin", "--socket", path)
    assert done.returncode == 2
    assert _one_error_line(done.stderr).startswith(f"csp-web: cannot serve: {cause}")


async def test_serve_on_a_live_socket_exits_2_with_one_line(sink: Sink, config: Config) -> None:
    path = config.memory.socket_path
    assert path is not None
    with trio.fail_after(60):
        done = await trio.run_process(
            [*CLI, "serve", "--no-stdin", "--socket", path],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 2
    assert _one_error_line(done.stderr.decode()) == (
        f"csp-web: cannot serve: another process is serving {path}"
    )


async def test_the_readmes_memory_sink_example_serves_with_both_folders_private(
    sock_dir: str,
) -> None:
    """`--dir` beside the socket used to make the socket's folder 0755 first, then refuse it."""
    mem = os.path.join(sock_dir, "mem")
    socket_path = os.path.join(mem, "m.sock")
    process = await trio.lowlevel.open_process(
        [*CLI, "memory-sink", "--socket", socket_path, "--dir", os.path.join(mem, "data")],
        stderr=subprocess.PIPE,
    )
    try:
        with trio.fail_after(60):
            while not os.path.exists(socket_path):  # a process: its socket file is polled
                assert process.poll() is None, "memory-sink exited"
                await trio.sleep(0.05)
            process.send_signal(signal.SIGINT)
            assert await process.wait() == 0
    finally:
        process.kill()
        await process.wait()
    assert os.stat(mem).st_mode & 0o777 == 0o700
    assert os.stat(os.path.join(mem, "data")).st_mode & 0o777 == 0o700


def test_memory_sink_in_a_non_private_folder_exits_2_with_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "mem"
    folder.mkdir()
    folder.chmod(0o755)
    done = _run("memory-sink", "--socket", str(folder / "m.sock"), "--dir", str(folder / "d"))
    assert done.returncode == 2
    assert "mode 0700 (it is uid" in _one_error_line(done.stderr)


def test_version_is_printed() -> None:
    done = _run("--version")
    assert (done.returncode, done.stdout) == (0, f"csp-web {__version__}\n")


def test_python_m_csp_web_is_the_command(tmp_path: Path) -> None:
    ping = "TASK REQ:ping IN:SYS OUT:PONG\n\n"
    done = _run("serve", stdin=ping, env={"XDG_STATE_HOME": str(tmp_path)})
    assert (done.returncode, done.stdout) == (0, "STATUS OK\nSCOPE [sys]\nDATA pong\n\n")


def test_config_default_prints_the_documented_embedded_default() -> None:
    import yaml

    done = _run("config", "--default")
    assert done.returncode == 0
    assert done.stdout == (REPO / "config.yaml").read_text("utf-8")
    loaded = config_from_mapping(yaml.safe_load(done.stdout), sections=config_sections())
    assert dataclasses.replace(loaded, sections=()) == Config()


def _parsers() -> list[argparse.ArgumentParser]:
    parser = _parser()
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return [parser, *(sub for action in subs for sub in action.choices.values())]


def test_every_option_and_command_has_help_without_rst_backticks() -> None:
    for parser in _parsers():
        assert "``" not in parser.format_help(), parser.prog
        for action in parser._actions:
            assert action.help, f"{parser.prog} {action.dest} has no help"
            if isinstance(action, argparse._SubParsersAction):
                assert all(choice.help for choice in action._choices_actions)


def test_replay_runs_every_transcript_in_process_with_its_own_sink(tmp_path: Path) -> None:
    """memory_relay.csp needs a Memory Specialist; a second run must not find the first's IDs."""
    for _ in range(2):
        done = _run("replay", *TRANSCRIPTS, env={"XDG_STATE_HOME": str(tmp_path)})
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.splitlines() == [f"ok   {name}" for name in TRANSCRIPTS]
