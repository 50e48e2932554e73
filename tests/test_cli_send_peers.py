"""``csp-web send`` against peers that misbehave and input that is not a task: every case
ends with its exit code and one line on stderr, never a traceback or a hang."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import trio

from csp_web.cli.send import reply_as_json
from protocol import Reply, Status

CLI = [sys.executable, "-m", "csp_web"]
PING = "TASK REQ:ping IN:SYS OUT:PONG"

Peer = Callable[[trio.SocketStream], Awaitable[None]]


@asynccontextmanager
async def _serving(path: str, peer: Peer) -> AsyncIterator[None]:
    """A Unix socket at ``path`` whose every connection is handled by ``peer``."""
    sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    await sock.bind(path)
    sock.listen(4)
    listener = trio.SocketListener(sock)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, peer, [listener])
        yield
        nursery.cancel_scope.cancel()


async def _read_one_frame(stream: trio.SocketStream) -> None:
    data = b""
    while b"\n\n" not in data:
        chunk = await stream.receive_some(4096)
        if not chunk:
            return
        data += chunk


async def _hang_up_after_one_frame(stream: trio.SocketStream) -> None:
    async with stream:
        await _read_one_frame(stream)


async def _hang_up_at_once(stream: trio.SocketStream) -> None:
    await stream.aclose()


async def _never_answer(stream: trio.SocketStream) -> None:
    async with stream:
        while await stream.receive_some(4096):
            pass


async def _send(path: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(60):
        return await trio.run_process(
            [*CLI, "send", "--socket", path, *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )


async def test_a_peer_that_hangs_up_without_replying_exits_3_naming_the_socket(
    sock_dir: str,
) -> None:
    path = os.path.join(sock_dir, "rude.sock")
    async with _serving(path, _hang_up_after_one_frame):
        done = await _send(path, "-e", f"{PING}\\nID h1")
    assert done.returncode == 3
    assert done.stdout == b""
    assert done.stderr.decode().splitlines() == [
        f"csp-web: {path} closed the connection before replying"
    ]


async def test_a_peer_that_hangs_up_on_connect_exits_3_with_one_line(sock_dir: str) -> None:
    path = os.path.join(sock_dir, "slam.sock")
    async with _serving(path, _hang_up_at_once):
        done = await _send(path, "-e", f"{PING}\\nID h2", "-e", f"{PING}\\nID h3")
    assert done.returncode == 3
    assert done.stdout == b""
    (line,) = done.stderr.decode().splitlines()
    # Whether the hang-up is seen while sending or while awaiting the reply depends on timing.
    assert line == f"csp-web: {path} closed the connection before replying" or line.startswith(
        f"csp-web: cannot reach {path}: "
    )


async def test_a_reply_frame_given_as_input_is_refused_with_exit_2(sock_dir: str) -> None:
    path = os.path.join(sock_dir, "mute.sock")
    async with _serving(path, _never_answer):
        done = await _send(path, "-e", "STATUS OK\\nID r1")
    assert done.returncode == 2
    assert done.stdout == b""
    assert done.stderr.decode().splitlines() == [
        "csp-web: send: not a valid frame: send takes TASK frames, not replies"
    ]


async def test_a_second_frame_reusing_a_pending_id_is_refused_with_exit_2(sock_dir: str) -> None:
    """The first frame went out and is still awaited (the peer is mute): the second, with
    the same ID, would make its reply ambiguous, so nothing more is sent."""
    path = os.path.join(sock_dir, "mute.sock")
    frame = f"{PING}\\nID dup"
    async with _serving(path, _never_answer):
        done = await _send(path, "--timeout", "0.2", "-e", frame, "-e", frame)
    assert done.returncode == 2
    assert done.stdout == b""
    assert done.stderr.decode().splitlines() == [
        "csp-web: send: not a valid frame: ID dup is already awaiting a reply (a repeated ID)",
        "csp-web: no reply to dup within 0.2 s",
    ]


def test_json_turns_a_field_given_three_times_into_a_list_of_three() -> None:
    reply = Reply(Status.OK, (("ID", "j"), ("URL", "a"), ("URL", "b"), ("URL", "c")))
    assert reply_as_json(reply) == '{"STATUS": "OK", "ID": "j", "URL": ["a", "b", "c"]}'
