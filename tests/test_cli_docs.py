"""Every shell example in README.md and docs/*.md runs as written against the real CLI.

Each ```sh block after the README's first-run commands is read: a line ``$ command`` is
followed by its expected output, a line without ``$`` is a command that must exit 0. Commands
that serve until stopped are started, not awaited: the README's ``serve --socket`` runs while
the ``send`` examples talk to it. The one change made to what is written: the socket path
``/run/user/$UID/csp-web/csp.sock`` is replaced by a private temporary one, so the test never
touches the user's real socket and runs beside other runs of itself.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
README_SOCKET = "/run/user/$UID/csp-web/csp.sock"
# Examples that serve until stopped, and the test that runs each as written.
SERVERS = {
    "csp-web serve --socket": "this file's daemon fixture",
    "csp-web memory-sink": "tests/test_cli.py::test_the_readmes_memory_sink_example_serves_...",
}


@dataclass(frozen=True)
class Example:
    where: str
    command: str
    expected: str | None  # None: only exit 0 is expected


def examples() -> list[Example]:
    found = []
    for doc in DOCS:
        text = doc.read_text("utf-8")
        blocks = re.findall(r"^```sh\n(.*?)^```", text, flags=re.S | re.M)
        if doc.name == "README.md":
            blocks = blocks[1:]  # the first-run commands: tests/test_cli_first_run.py
        for number, block in enumerate(blocks, 1):
            found += _parse_block(f"{doc.name} block {number}", block)
    return found


def _parse_block(where: str, block: str) -> list[Example]:
    found: list[Example] = []
    command: str | None = None
    output: list[str] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            if command is not None:
                found.append(Example(where, command, "\n".join(output).strip("\n")))
            command, output = line[2:], []
        elif command is not None:
            output.append(line)
        else:
            found.append(Example(where, line, None))
    if command is not None:
        found.append(Example(where, command, "\n".join(output).strip("\n")))
    return found


def _is_server(command: str) -> bool:
    return any(command.startswith(prefix) for prefix in SERVERS)


@pytest.fixture(scope="module")
def shell_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """``csp-web`` on PATH as this checkout's command; state in a temporary folder."""
    bin_dir = tmp_path_factory.mktemp("bin")
    shim = bin_dir / "csp-web"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m csp_web "$@"\n')
    shim.chmod(0o755)
    return {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHONPATH": str(REPO),
        "XDG_STATE_HOME": str(tmp_path_factory.mktemp("state")),
    }


@pytest.fixture(scope="module")
def readme_socket(shell_env: dict[str, str]) -> Iterator[str]:
    """The README's own ``serve --socket`` example, running on a private socket path."""
    (serve,) = [e.command for e in examples() if e.command.startswith("csp-web serve --socket")]
    folder = tempfile.mkdtemp(prefix="csp-docs-", dir="/tmp")  # short: a socket path's cap
    path = os.path.join(folder, "csp-web", "csp.sock")
    # Its own state dir: the stdin examples run daemons beside it, and a state dir has one.
    env = {**shell_env, "XDG_STATE_HOME": os.path.join(folder, "state")}
    process = subprocess.Popen(
        ["bash", "-c", serve.replace(README_SOCKET, path)],
        env=env,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(path):  # a process: its socket file is polled, bounded
            assert process.poll() is None, "the README's serve example exited"
            assert time.monotonic() < deadline, "the README's serve example never listened"
            time.sleep(0.05)
        yield path
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
        shutil.rmtree(folder, ignore_errors=True)


def test_the_docs_hold_the_examples_the_issue_names() -> None:
    commands = " ".join(example.command for example in examples())
    for needed in ("csp-web serve", "REQ:nope", "csp-web send", "--json", "csp-web replay"):
        assert needed in commands
    assert "csp-web check-config" in commands
    assert "csp-web config --default" in commands


def test_every_server_example_is_known() -> None:
    servers = [e.command for e in examples() if e.command.startswith("csp-web memory-sink")]
    assert servers, "the README's memory-sink example moved: update tests/test_cli.py"
    for example in examples():
        if "--no-stdin" in example.command or "memory-sink" in example.command:
            assert _is_server(example.command), example


@pytest.mark.parametrize(
    "example",
    [e for e in examples() if not _is_server(e.command)],
    ids=lambda e: f"{e.where}: {e.command[:50]}",
)
def test_example_runs_as_written(
    example: Example, shell_env: dict[str, str], readme_socket: str
) -> None:
    done = subprocess.run(
        ["bash", "-c", example.command.replace(README_SOCKET, readme_socket)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=shell_env,
    )
    assert "Traceback" not in done.stderr
    if example.expected is None:
        assert done.returncode == 0, done.stdout + done.stderr
    else:
        assert done.stdout.strip("\n") == example.expected
