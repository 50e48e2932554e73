"""The Unix-socket transport: private files, stale sockets, peer credentials, caps."""

from __future__ import annotations

import contextlib
import os
import socket
import stat
from dataclasses import replace
from functools import partial

import pytest
import trio
import trio.testing

from csp_web.config import Config, SocketConfig
from csp_web.core.api.context import Peer
from csp_web.core.transports.unix import Lease, SocketSetupError, open_unix_listener, serve_unix
from protocol import CLOSED, NEED_DATA, Connection, Reply, Status
from tests.conftest import start_daemon

PING = b"TASK REQ:ping IN:SYS OUT:PONG\n\n"


async def _exchange(path: str, data: bytes = PING) -> Reply | None:
    """Send ``data`` on a new connection; the first reply, or None if closed without one."""
    with trio.fail_after(10):
        stream = await trio.open_unix_socket(path)
        async with stream:
            codec = Connection()
            with contextlib.suppress(trio.BrokenResourceError):
                await stream.send_all(data)
            while True:
                event = codec.next_event()
                if isinstance(event, Reply):
                    return event
                if event is CLOSED:
                    return None
                assert event is NEED_DATA
                try:
                    codec.receive_data(await stream.receive_some(4096))
                except trio.BrokenResourceError:
                    codec.receive_data(b"")


async def test_socket_is_private_and_removed_on_exit(
    nursery: trio.Nursery, config: Config, sock_dir: str
) -> None:
    path = os.path.join(sock_dir, "d", "csp.sock")
    daemon = await start_daemon(nursery, config, path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    reply = await _exchange(path)
    assert reply is not None
    assert reply.get("DATA") == "pong"
    await daemon.stop()
    assert not os.path.exists(path)


async def test_directory_open_to_others_is_refused(sock_dir: str) -> None:
    os.chmod(sock_dir, 0o755)
    with pytest.raises(SocketSetupError, match="0700"):
        await open_unix_listener(os.path.join(sock_dir, "csp.sock"), backlog=1)


async def test_stale_socket_is_replaced(sock_dir: str) -> None:
    path = os.path.join(sock_dir, "csp.sock")
    old = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old.bind(path)
    old.close()  # the file stays, nobody listens: stale
    listener = await open_unix_listener(path, backlog=1)
    async with listener:  # a live listener now answers at the path the stale one held
        with trio.fail_after(10):
            client = await trio.open_unix_socket(path)
            async with client, await listener.accept() as served:
                await client.send_all(b"x")
                assert await served.receive_some(1) == b"x"
    assert stat.S_ISSOCK(os.lstat(path).st_mode)


async def test_path_that_is_not_a_socket_is_never_removed(sock_dir: str) -> None:
    path = os.path.join(sock_dir, "csp.sock")
    with open(path, "w") as file:
        file.write("precious")
    with pytest.raises(SocketSetupError, match="not a socket"):
        await open_unix_listener(path, backlog=1)
    with open(path) as file:
        assert file.read() == "precious"


async def test_live_socket_of_another_daemon_is_left_alone(
    nursery: trio.Nursery, config: Config, sock_dir: str
) -> None:
    path = os.path.join(sock_dir, "csp.sock")
    await start_daemon(nursery, config, path)
    with pytest.raises(SocketSetupError, match="another process"):
        await open_unix_listener(path, backlog=1)
    assert (await _exchange(path)) is not None


async def test_peer_with_uid_not_allowed_is_refused(
    nursery: trio.Nursery, config: Config, sock_dir: str
) -> None:
    config = replace(config, socket=SocketConfig(allowed_uids=(os.getuid() + 4242,)))
    path = os.path.join(sock_dir, "csp.sock")
    daemon = await start_daemon(nursery, config, path)
    reply = await _exchange(path)
    assert reply is not None
    assert reply.status is Status.FAIL
    assert (reply.get("ERROR") or "").startswith("permission_denied:")
    assert daemon.dispatcher.stats.frames == 0


CAPS = pytest.mark.parametrize(
    "socket_config",
    [SocketConfig(max_connections=2), SocketConfig(max_connections_per_uid=2)],
    ids=["overall", "per-uid"],
)


async def _closed_by_server(stream: trio.SocketStream) -> bool:
    with trio.fail_after(10):
        try:
            return await stream.receive_some(4096) == b""
        except trio.BrokenResourceError:
            return True


@CAPS
async def test_connection_cap_evicts_the_longest_idle_connection_for_a_new_one(
    nursery: trio.Nursery, config: Config, sock_dir: str, socket_config: SocketConfig
) -> None:
    """L-9: N connections are admitted; the N+1st is served, and the connection idle the
    longest is closed to make room (idle hoarders cannot lock a uid out)."""
    path = os.path.join(sock_dir, "csp.sock")
    await start_daemon(nursery, replace(config, socket=socket_config), path)
    held = [await trio.open_unix_socket(path) for _ in range(2)]
    try:
        for stream in held:
            await stream.send_all(PING)
            assert b"DATA pong" in await stream.receive_some(4096)
        reply = await _exchange(path)
        assert reply is not None
        assert reply.get("DATA") == "pong"
        assert await _closed_by_server(held[0])
        await held[1].send_all(PING)
        assert b"DATA pong" in await held[1].receive_some(4096)
    finally:
        for stream in held:
            await stream.aclose()


@CAPS
async def test_connection_cap_refuses_n_plus_1_busy_when_no_connection_is_idle(
    nursery: trio.Nursery, config: Config, sock_dir: str, socket_config: SocketConfig
) -> None:
    """L-9: a connection with a frame half-sent is not idle, so it is never evicted; with N
    such connections the N+1st is refused busy, and served once one closes."""
    path = os.path.join(sock_dir, "csp.sock")
    await start_daemon(nursery, replace(config, socket=socket_config), path)
    held = [await trio.open_unix_socket(path) for _ in range(2)]
    try:
        for stream in held:
            await stream.send_all(PING)
            assert b"DATA pong" in await stream.receive_some(4096)
            await stream.send_all(PING[:-1])  # a frame begun: busy, not idle
        reply = await _exchange(path)
        assert reply is not None
        assert (reply.get("ERROR") or "").startswith("busy:")
        await held[0].send_all(b"\n")
        assert b"DATA pong" in await held[0].receive_some(4096)
    finally:
        for stream in held:
            await stream.aclose()
    # A slot frees once the server has read both EOFs (ready at its next poll) and ended
    # their handlers: once every task is blocked.
    await trio.testing.wait_all_tasks_blocked()
    reply = await _exchange(path)
    assert reply is not None
    assert reply.status is Status.OK


@pytest.mark.slow
async def test_a_burst_of_1000_connects_loses_none_at_the_default_backlog(
    nursery: trio.Nursery, config: Config, sock_dir: str
) -> None:
    """L-9: with socket.backlog null (the kernel's somaxconn), 1,000 connects made while the
    daemon cannot accept (no checkpoint between them) all succeed and each is answered; at
    the old default of 128 the 129th failed with EAGAIN."""
    path = os.path.join(sock_dir, "csp.sock")
    caps = replace(config.socket, max_connections=1100, max_connections_per_uid=1100)
    assert caps.backlog is None
    await start_daemon(nursery, replace(config, socket=caps), path)
    burst = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(1000)]
    try:
        for sock in burst:
            sock.setblocking(False)
        errors = [sock.connect_ex(path) for sock in burst]  # no checkpoint: nothing accepted
        assert [os.strerror(error) for error in errors if error] == []
        streams = [trio.SocketStream(trio.socket.from_stdlib_socket(sock)) for sock in burst]
        with trio.fail_after(60):
            for stream in streams:
                await stream.send_all(PING)
            for stream in streams:
                assert b"DATA pong" in await stream.receive_some(4096)
    finally:
        for sock in burst:
            sock.close()


async def test_a_burst_of_connects_is_accepted_in_a_few_scheduler_rounds_not_one_per_connect(
    nursery: trio.Nursery, sock_dir: str
) -> None:
    """L-9, L-10: 200 pending connects are all handed to the handler within a few scheduler
    rounds (64 accepts per round): trio's one accept per round made a fresh client's connect
    wait behind a whole burst, each round long under load (bench/fairness.py, issue 21)."""
    path = os.path.join(sock_dir, "csp.sock")
    accepted: list[trio.SocketStream] = []

    async def handle(stream: trio.SocketStream, peer: Peer, lease: Lease) -> None:
        accepted.append(stream)
        async with stream:
            await trio.sleep_forever()

    caps = SocketConfig(max_connections=300, max_connections_per_uid=300)
    await nursery.start(partial(serve_unix, path, caps, handle, handler_nursery=nursery))
    burst = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(200)]
    try:
        for sock in burst:
            sock.connect(path)  # blocking, but the backlog holds them: no checkpoint
        rounds = 0
        with trio.fail_after(30):
            while len(accepted) < len(burst):
                await trio.lowlevel.checkpoint()  # one scheduler round each
                rounds += 1
        assert rounds <= 200 // 64 + 4
    finally:
        for sock in burst:
            sock.close()
