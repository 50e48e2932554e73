"""Every transcript in tests/transcripts/ replays in memory and over a real Unix socket; those
with a cassette beside them (recorded upstreams) replay in memory, offline, from a local origin
serving the cassette through the real guard and client."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from csp_web.app.catalog import SPECIALISTS
from csp_web.app.compose import open_app_daemon
from csp_web.app.memory_path import outbox_path
from csp_web.cli.cassette import cassette_path
from csp_web.cli.cassette_run import replay_with_cassette
from csp_web.cli.replay import replay_in_memory, replay_over_socket
from csp_web.cli.transcript import TranscriptError, line_matches, parse_transcript
from csp_web.config import Config
from csp_web.core.daemon.compose import open_daemon
from csp_web.memory.outbox import open_outbox
from tests.conftest import Daemon, Sink
from tests.harness import build_dispatcher

ALL_TRANSCRIPTS = sorted((Path(__file__).parent / "transcripts").glob("*.csp"))
RECORDED = [path for path in ALL_TRANSCRIPTS if Path(cassette_path(str(path))).exists()]
# A running daemon's client cannot be pointed at a cassette: those replay in process only.
TRANSCRIPTS = [path for path in ALL_TRANSCRIPTS if path not in RECORDED]


def test_transcript_folder_is_not_empty() -> None:
    assert len(TRANSCRIPTS) >= 3
    assert {path.stem for path in RECORDED} >= {"web_fetch_article", "web_search_brave"}


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda p: p.stem)
async def test_transcript_replays_over_the_unix_socket(
    path: Path, daemon: Daemon, sink: Sink
) -> None:
    transcript = parse_transcript(path.read_text("utf-8"), path.name)
    assert await replay_over_socket(transcript, daemon.socket_path) == []


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda p: p.stem)
async def test_transcript_replays_in_memory(
    path: Path, config: Config, sink: Sink, tmp_path: Path
) -> None:
    config = replace(config, daemon=replace(config.daemon, state_dir=str(tmp_path / "mem")))
    transcript = parse_transcript(path.read_text("utf-8"), path.name)
    async with (
        open_outbox(config.outbox_path, config.outbox, config.memory) as outbox,
        open_daemon(config, SPECIALISTS, memory=outbox_path(config, outbox)) as daemon,
    ):
        assert await replay_in_memory(transcript, daemon.dispatcher) == []


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.stem)
async def test_recorded_transcript_replays_offline_from_its_cassette(
    path: Path, config: Config, sink: Sink, tmp_path: Path
) -> None:
    """Issue 15's done-when: web_fetch_article replays a fetch (robots.txt, a redirect, the
    article) with no network: only the cassette's hosts resolve, to its local origin."""
    config = replace(config, daemon=replace(config.daemon, state_dir=str(tmp_path / "rec")))
    transcript = parse_transcript(path.read_text("utf-8"), path.name)
    diffs = await replay_with_cassette(
        transcript, cassette_path(str(path)), config, replay_in_memory, open_daemon=open_app_daemon
    )
    assert diffs == []


async def test_a_wrong_expectation_is_reported_as_a_difference(
    config: Config, tmp_path: Path
) -> None:
    transcript = parse_transcript(
        "> TASK REQ:ping IN:SYS OUT:PONG\n>\n< STATUS OK\n< SCOPE [sys]\n< DATA ping\n<\n"
    )
    async with open_outbox(config.outbox_path, config.outbox, config.memory) as outbox:
        diffs = await replay_in_memory(
            transcript, build_dispatcher(config, outbox_path(config, outbox), [], None)
        )
    assert diffs == [
        f"step 1: {line}"
        for line in (
            "reply 1:",
            "  - STATUS OK",
            "  - SCOPE [sys]",
            "  - DATA ping",
            "  + STATUS OK",
            "  + SCOPE [sys]",
            "  + DATA pong",
        )
    ]


@pytest.mark.parametrize(
    ("expected", "actual", "ok"),
    [
        ("EXEC_TIME {{int}}", "EXEC_TIME 12", True),
        ("EXEC_TIME {{int}}", "EXEC_TIME 1.5", False),
        ("P {{num}}ms", "P 0.25ms", True),
        ("ERROR busy:{{any}}", "ERROR busy:web full", True),
        ("ID {{re:w-[0-9]+}}", "ID w-42", True),
        ("ID {{re:w-[0-9]+}}", "ID x-42", False),
        ("DATA [a.b]", "DATA [a.b]", True),
        ("DATA [a.b]", "DATA [axb]", False),
    ],
)
def test_placeholders_match_what_varies(expected: str, actual: str, ok: bool) -> None:
    assert line_matches(expected, actual) is ok


def test_malformed_transcript_names_the_line() -> None:
    with pytest.raises(TranscriptError, match=r"x\.csp:2"):
        parse_transcript("> TASK REQ:ping IN:SYS OUT:PONG\nSTATUS OK\n", "x.csp")


def test_replay_cli_runs_transcripts_in_process(tmp_path: Path) -> None:
    import subprocess
    import sys

    # memory_relay too: replay brings its own sink; the recorded ones replay from cassettes.
    files = [str(p) for p in ALL_TRANSCRIPTS]
    done = subprocess.run(
        [sys.executable, "-m", "csp_web", "replay", *files],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "XDG_STATE_HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("ok ") == len(files)


def test_replay_cli_exits_1_on_a_difference(tmp_path: Path) -> None:
    import subprocess
    import sys

    bad = tmp_path / "bad.csp"
    bad.write_text("> TASK REQ:ping IN:SYS OUT:PONG\n>\n< STATUS FAIL\n<\n")
    done = subprocess.run(
        [sys.executable, "-m", "csp_web", "replay", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "XDG_STATE_HOME": str(tmp_path)},
    )
    assert done.returncode == 1
    assert "FAIL" in done.stdout
