"""``csp-web send`` against a real daemon: streaming, -e, --json, --wait, IDs, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import trio
import trio.testing

from csp_web.cli.send import expand_frame_argument
from csp_web.client.trio_client import Client, open_client
from protocol import Limits, Task
from tests.conftest import Daemon, Sink, sink_text

CLI = [sys.executable, "-m", "csp_web"]
PING = "TASK REQ:ping IN:SYS OUT:PONG"


async def _send(
    daemon: Daemon, *args: str, stdin: bytes = b""
) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(60):
        return await trio.run_process(
            [*CLI, "send", "--socket", daemon.socket_path, *args],
            stdin=stdin,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )


def _write(path: str, data: str) -> str:
    return (
        "TASK REQ:write IN:MEMORY OUT:ACK\\nFROM client\\nTYPE document\\n"
        f"PATH {path}\\nDATA {data}"
    )


def test_e_turns_backslash_n_between_lines_into_newlines_but_keeps_quoted_escapes() -> None:
    arg = 'TASK REQ:write IN:MEMORY OUT:ACK\\nID x\\nDATA "a\\nb \\"q\\" c"\\nPATH n.md'
    assert expand_frame_argument(arg) == (
        'TASK REQ:write IN:MEMORY OUT:ACK\nID x\nDATA "a\\nb \\"q\\" c"\nPATH n.md\n\n'
    )


def test_e_keeps_an_unterminated_quote_as_plain_text() -> None:
    assert expand_frame_argument('TASK REQ:x IN:SYS OUT:Y\\nNOTE "open\\nK v') == (
        'TASK REQ:x IN:SYS OUT:Y\nNOTE "open\nK v\n\n'
    )


async def test_empty_stdin_sends_nothing_and_exits_0(daemon: Daemon) -> None:
    done = await _send(daemon)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")


async def test_a_quoted_value_given_with_e_keeps_its_newline_escape(
    daemon: Daemon, sink: Sink
) -> None:
    written = await _send(daemon, "-e", _write("notes/e.md", '"a\\nb"'))
    assert written.returncode == 0, written.stderr
    read = await _send(daemon, "-e", "TASK REQ:read IN:MEMORY OUT:CONTENT\\nID r\\nPATH notes/e.md")
    assert read.stdout == b'STATUS OK\nID r\nSCOPE [memory]\nDATA "a\\nb\\n"\n\n'


async def test_automatic_ids_differ_between_runs_so_a_second_write_is_stored(
    daemon: Daemon, sink: Sink
) -> None:
    """Issue 8.5: each run used to start at c1, and the sink took the second write for a
    duplicate of the first."""
    first = await _send(daemon, "-e", _write("notes/ids.md", "one"))
    second = await _send(daemon, "-e", _write("notes/ids.md", "two"))
    assert b"DATA stored" in first.stdout
    assert b"DATA stored" in second.stdout
    ids = [line for line in (first.stdout + second.stdout).split(b"\n") if line[:3] == b"ID "]
    assert len(set(ids)) == 2
    assert sink_text(sink.directory, "notes/ids.md") == "one\ntwo\n"


async def test_json_prints_one_object_per_reply(daemon: Daemon) -> None:
    done = await _send(
        daemon, "--json", "-e", f"{PING}\\nID j1", "-e", "TASK REQ:nope IN:SYS OUT:X\\nID j2"
    )
    replies = sorted((json.loads(line) for line in done.stdout.decode().splitlines()), key=str)
    assert sorted(replies, key=lambda reply: str(reply["ID"])) == [
        {"STATUS": "OK", "ID": "j1", "SCOPE": "[sys]", "DATA": "pong"},
        {
            "STATUS": "FAIL",
            "ID": "j2",
            "SCOPE": "[]",
            "DATA": "none",
            "ERROR": "unknown_op:nope",
        },
    ]
    assert done.returncode == 1


async def test_each_reply_is_printed_before_stdin_ends(daemon: Daemon) -> None:
    """Interactive use: the first frame's reply arrives while stdin is still open."""
    process = await trio.lowlevel.open_process(
        [*CLI, "send", "--socket", daemon.socket_path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        with trio.fail_after(60):
            await process.stdin.send_all(f"{PING}\nID s1\n\n".encode())
            got = b""
            while not got.endswith(b"\n\n"):
                got += await process.stdout.receive_some(4096)
            assert got == b"STATUS OK\nID s1\nSCOPE [sys]\nDATA pong\n\n"
            await process.stdin.send_all(f"{PING}\nID s2\n\n".encode())
            await process.stdin.aclose()
            rest = b""
            while chunk := await process.stdout.receive_some(4096):
                rest += chunk
            assert rest == b"STATUS OK\nID s2\nSCOPE [sys]\nDATA pong\n\n"
            assert await process.wait() == 0
    finally:
        process.kill()
        await process.wait()


async def test_wait_runs_a_dependent_read_after_its_write(daemon: Daemon, sink: Sink) -> None:
    done = await _send(
        daemon,
        "--wait",
        "-e",
        _write("notes/wait.md", "first") + "\\nID w1",
        "-e",
        "TASK REQ:read IN:MEMORY OUT:CONTENT\\nID r1\\nPATH notes/wait.md",
    )
    assert done.stdout == (
        b"STATUS OK\nID w1\nSCOPE [memory]\nDATA stored\n\n"
        b'STATUS OK\nID r1\nSCOPE [memory]\nDATA "first\\n"\n\n'
    )


async def test_a_malformed_frame_exits_2_after_earlier_replies(daemon: Daemon) -> None:
    done = await _send(daemon, stdin=f"{PING}\nID m1\n\nGARBAGE here\n\n".encode())
    assert done.returncode == 2
    assert done.stdout == b"STATUS OK\nID m1\nSCOPE [sys]\nDATA pong\n\n"
    (line,) = done.stderr.decode().splitlines()
    assert line.startswith("csp-web: send: not a valid frame: ")


async def test_start_call_refuses_an_id_already_awaiting_a_reply() -> None:
    ours, _peer = trio.testing.memory_stream_pair()
    client = Client(ours, Limits(1 << 16, 1 << 16, 100), id_prefix="t-")
    task = Task("ping", "SYS", "PONG", None, (("ID", "d1"),))
    await client.start_call(task)
    with pytest.raises(ValueError, match="ID d1 is already awaiting a reply"):
        await client.start_call(task)


async def test_no_daemon_exits_3_with_one_line(sock_dir: str) -> None:
    path = os.path.join(sock_dir, "none.sock")
    with trio.fail_after(60):
        done = await trio.run_process(
            [*CLI, "send", "--socket", path, "-e", PING],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 3
    (line,) = done.stderr.decode().splitlines()
    assert line.startswith(f"csp-web: cannot reach {path}: ")


async def test_open_client_prefixes_automatic_ids_randomly(daemon: Daemon) -> None:
    async with open_client(daemon.socket_path) as one, open_client(daemon.socket_path) as two:
        a = await one.call({"REQ": "ping", "IN": "SYS", "OUT": "PONG"})
        b = await two.call({"REQ": "ping", "IN": "SYS", "OUT": "PONG"})
    assert a.id is not None
    assert b.id is not None
    assert a.id != b.id
    assert a.id.endswith("-1")
    assert b.id.endswith("-1")


@pytest.mark.parametrize("prefix", ["job-"])
async def test_open_client_keeps_an_explicit_id_prefix(daemon: Daemon, prefix: str) -> None:
    async with open_client(daemon.socket_path, id_prefix=prefix) as client:
        reply = await client.call({"REQ": "ping", "IN": "SYS", "OUT": "PONG"})
    assert reply.id == "job-1"


async def test_a_reply_that_does_not_come_within_timeout_exits_3_naming_its_id(
    sock_dir: str,
) -> None:
    """A peer that reads frames and never answers: send gives up after --timeout."""
    path = os.path.join(sock_dir, "mute.sock")
    listener = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    await listener.bind(path)
    listener.listen(1)

    async def swallow() -> None:
        conn, _ = await listener.accept()
        with conn:
            while await conn.recv(4096):
                pass

    async with trio.open_nursery() as nursery:
        nursery.start_soon(swallow)
        with trio.fail_after(60):
            done = await trio.run_process(
                [*CLI, "send", "--socket", path, "--timeout", "0.2", "-e", f"{PING}\\nID t1"],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
        nursery.cancel_scope.cancel()
    listener.close()
    assert (done.returncode, done.stdout) == (3, b"")
    assert done.stderr.decode().splitlines() == ["csp-web: no reply to t1 within 0.2 s"]
