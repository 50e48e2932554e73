"""``csp-web send`` run in this process (``run_send``, and ``main`` for the command line)
against a real daemon and real misbehaving peers on Unix sockets: what it prints and its exit
code. tests/test_cli_send.py and test_cli_send_peers.py run the same as a subprocess; these
are measured by coverage."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import trio

from csp_web.cli.send import SendOptions, run_send, send_main
from tests.conftest import Daemon
from tests.inprocess import run_main, run_main_in_thread
from tests.test_cli_send_peers import _hang_up_after_one_frame, _never_answer, _serving

PING = "TASK REQ:ping IN:SYS OUT:PONG"
WAIT_S = 60.0


async def _run(options: SendOptions) -> int:
    with trio.fail_after(WAIT_S):
        return await run_send(options)


async def test_frames_given_with_e_are_sent_and_each_reply_printed_whole(
    daemon: Daemon, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    options = SendOptions(daemon.socket_path, (f"{PING}\\nID a1",), wait=True)
    assert await _run(options) == 0
    assert capsysbinary.readouterr() == (b"STATUS OK\nID a1\nSCOPE [sys]\nDATA pong\n\n", b"")


async def test_a_fail_reply_exits_1_and_json_prints_it_as_one_object(
    daemon: Daemon, capsys: pytest.CaptureFixture[str]
) -> None:
    frame = "TASK REQ:nosuch IN:SYS OUT:PONG\\nID f1"
    assert await _run(SendOptions(daemon.socket_path, (frame,), as_json=True)) == 1
    out, err = capsys.readouterr()
    (line,) = out.splitlines()
    record = json.loads(line)
    assert (record["STATUS"], record["ID"], record["ERROR"].split(":")[0], err) == (
        "FAIL",
        "f1",
        "unknown_op",
        "",
    )


@contextmanager
def _stdin(data: bytes) -> Iterator[None]:
    """File descriptor 0 reads ``data`` from a real pipe for the block, as a shell's
    ``printf ... | csp-web send`` gives it."""
    read, write = os.pipe()
    os.write(write, data)
    os.close(write)
    saved = os.dup(0)
    os.dup2(read, 0)
    os.close(read)
    try:
        yield
    finally:
        os.dup2(saved, 0)
        os.close(saved)


async def test_frames_read_from_stdin_are_sent_until_its_end(
    daemon: Daemon, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    with _stdin(f"{PING}\nID s1\n\n{PING}\nID s2\n\n".encode()):
        assert await _run(SendOptions(daemon.socket_path, None, wait=True)) == 0
    assert capsysbinary.readouterr().out == (
        b"STATUS OK\nID s1\nSCOPE [sys]\nDATA pong\n\nSTATUS OK\nID s2\nSCOPE [sys]\nDATA pong\n\n"
    )


async def test_a_reply_given_as_input_is_refused_with_exit_2_and_nothing_is_sent(
    sock_dir: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = os.path.join(sock_dir, "mute.sock")
    async with _serving(path, _never_answer):
        assert await _run(SendOptions(path, ("STATUS OK\\nID r1",))) == 2
    assert capsys.readouterr() == (
        "",
        "csp-web: send: not a valid frame: send takes TASK frames, not replies\n",
    )


async def test_a_malformed_frame_exits_2_after_printing_the_replies_before_it(
    daemon: Daemon, capsys: pytest.CaptureFixture[str]
) -> None:
    options = SendOptions(daemon.socket_path, (f"{PING}\\nID m1", "GARBAGE here"), wait=True)
    assert await _run(options) == 2
    out, err = capsys.readouterr()
    assert out == "STATUS OK\nID m1\nSCOPE [sys]\nDATA pong\n\n"
    assert err.startswith("csp-web: send: not a valid frame: ")
    assert err.count("\n") == 1


async def test_a_reused_pending_id_is_refused_and_the_unanswered_one_named(
    sock_dir: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = os.path.join(sock_dir, "mute.sock")
    frame = f"{PING}\\nID dup"
    async with _serving(path, _never_answer):
        assert await _run(SendOptions(path, (frame, frame), timeout_s=0.2)) == 2
    assert capsys.readouterr().err.splitlines() == [
        "csp-web: send: not a valid frame: ID dup is already awaiting a reply (a repeated ID)",
        "csp-web: no reply to dup within 0.2 s",
    ]


async def test_a_reply_that_does_not_come_within_the_timeout_exits_3(
    sock_dir: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = os.path.join(sock_dir, "mute.sock")
    async with _serving(path, _never_answer):
        assert await _run(SendOptions(path, (f"{PING}\\nID t1",), timeout_s=0.2)) == 3
    assert capsys.readouterr() == ("", "csp-web: no reply to t1 within 0.2 s\n")


async def test_a_peer_that_hangs_up_before_replying_exits_3_naming_the_socket(
    sock_dir: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = os.path.join(sock_dir, "rude.sock")
    async with _serving(path, _hang_up_after_one_frame):
        assert await _run(SendOptions(path, (f"{PING}\\nID h1",))) == 3
    assert capsys.readouterr() == ("", f"csp-web: {path} closed the connection before replying\n")


def test_no_daemon_exits_3_with_one_line(sock_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = os.path.join(sock_dir, "none.sock")
    assert send_main(SendOptions(path, (PING,))) == 3
    out, err = capsys.readouterr()
    assert (out, err.count("\n")) == ("", 1)
    assert err.startswith(f"csp-web: cannot reach {path}: ")


async def test_the_send_command_line_reaches_the_daemon(
    daemon: Daemon, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["send", "--socket", daemon.socket_path, "--wait", "-e", f"{PING}\\nID c1"]
    assert await run_main_in_thread(argv) == 0
    assert capsys.readouterr().out == "STATUS OK\nID c1\nSCOPE [sys]\nDATA pong\n\n"


def test_send_without_a_socket_given_configured_or_found_exits_3(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CSP_WEB_CONFIG", raising=False)
    assert run_main(["send", "-e", PING]) == 3
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("csp-web: send: no running daemon found (looked at the lock file in ")
