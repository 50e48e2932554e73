"""A transcript's edges: raw bytes that are not one byte per character, a reply left open,
and a peer that hangs up or never answers (the replay reports the replies it missed)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio
import trio.testing

from csp_web.app.compose import open_app_daemon
from csp_web.cli.replay import replay_files
from csp_web.cli.transcript import TranscriptError, parse_transcript, replay
from csp_web.config import Config
from tests.inprocess import run_main
from tests.test_cli_send_peers import _hang_up_at_once, _serving

PING = "> TASK REQ:ping IN:SYS OUT:PONG\n>\n< STATUS OK\n<\n"


@pytest.mark.parametrize("literal", ['"\\u0100"', "5", "not json"])
def test_raw_bytes_take_a_json_string_of_chars_below_256(literal: str) -> None:
    with pytest.raises(TranscriptError) as caught:
        parse_transcript(f"# raw\n>! {literal}\n", "t.csp")
    assert str(caught.value) == "t.csp:2: '>!' takes a JSON string of chars below 256"


def test_raw_bytes_are_sent_one_byte_per_char() -> None:
    (step,) = parse_transcript('>! "\\u00ff\\r\\n"\n< STATUS OK\n<\n').steps
    assert step.sent == b"\xff\r\n"


def test_a_reply_left_open_at_the_end_is_refused() -> None:
    with pytest.raises(TranscriptError) as caught:
        parse_transcript("> TASK REQ:ping IN:SYS OUT:PONG\n>\n< STATUS OK\n", "t.csp")
    assert str(caught.value) == "t.csp: last expected reply has no closing '<' line"


async def test_a_peer_that_hangs_up_misses_every_reply_and_later_steps_are_not_played() -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    await theirs.aclose()
    with trio.fail_after(10):
        diffs = await replay(parse_transcript(PING + PING), ours)
    assert diffs == [
        "step 1: expected 1 replies, got 0",
        "step 1: reply 1:",
        "step 1:   - STATUS OK",
    ]


async def test_a_peer_that_never_answers_misses_the_reply_at_the_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ours, _theirs = trio.testing.memory_stream_pair()
    with trio.fail_after(60):
        diffs = await replay(parse_transcript(PING), ours, timeout_s=5.0)
    assert diffs[0] == "step 1: expected 1 replies, got 0"


async def test_replay_against_a_socket_that_hangs_up_fails_the_file_without_a_traceback(
    sock_dir: str, tmp_path: Path, config: Config, capsys: pytest.CaptureFixture[str]
) -> None:
    """``csp-web replay --socket`` on a peer that accepts and closes: the file FAILs with the
    replies it missed (it used to end in BrokenResourceError's traceback)."""
    path = os.path.join(sock_dir, "slam.sock")
    transcript = tmp_path / "t.csp"
    transcript.write_text(PING, "utf-8")
    async with _serving(path, _hang_up_at_once):
        with trio.fail_after(60):
            failures = await replay_files(
                [str(transcript)], config, path, open_daemon=open_app_daemon
            )
    assert failures == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"FAIL   {transcript}"
    assert out[1] == "step 1: expected 1 replies, got 0"


def test_replay_against_no_daemon_exits_3_with_one_line(
    sock_dir: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``csp-web replay --socket`` where nothing listens (it used to end in a traceback)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.delenv("CSP_WEB_CONFIG", raising=False)
    path = os.path.join(sock_dir, "none.sock")
    transcript = tmp_path / "t.csp"
    transcript.write_text(PING, "utf-8")
    assert run_main(["replay", "--socket", path, str(transcript)]) == 3
    assert capsys.readouterr() == (
        "",
        f"csp-web: replay: cannot reach {path}: No such file or directory\n",
    )
