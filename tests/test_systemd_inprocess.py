"""systemd's protocols read in this process (tests/test_systemd.py starts csp-web the way
systemd does, in a subprocess coverage does not follow): a socket passed as fd 3, RELOADING
with its monotonic time, and the watchdog's pings on a real notification socket."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import trio

from csp_web.core.transports import systemd
from tests.test_systemd import fresh_environment  # noqa: F401  (a fixture)


def _monotonic_us() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


@contextmanager
def _as_fd3(fileno: int) -> Iterator[None]:
    """``fileno`` duplicated onto descriptor 3 for the block, where systemd passes the first
    socket; whatever fd 3 was is put back after."""
    try:
        saved: int | None = os.dup(3)
    except OSError:
        saved = None
    os.dup2(fileno, 3)
    try:
        yield
    finally:
        if saved is None:
            os.close(3)
        else:
            os.dup2(saved, 3)
            os.close(saved)


def test_the_first_passed_listening_socket_is_served_and_its_path_named(
    fresh_environment: pytest.MonkeyPatch,  # noqa: F811
    sock_dir: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = os.path.join(sock_dir, "csp.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen(1)
        fresh_environment.setenv("LISTEN_PID", str(os.getpid()))
        fresh_environment.setenv("LISTEN_FDS", "2")
        with _as_fd3(listener.fileno()):
            inherited = systemd.inherited_unix_listener()
            assert inherited is not None
            try:
                assert (inherited.fileno(), systemd.activated_socket_path()) == (3, path)
                assert inherited.getblocking() is False
            finally:
                inherited.detach()  # fd 3 is put back by _as_fd3, not closed by the object
    assert "systemd passed 2 sockets; serving the first only" in caplog.messages


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("datagram", "ignoring the socket systemd passed: not a listening Unix stream socket"),
        ("pipe", "ignoring the socket systemd passed: Socket operation on non-socket"),
    ],
)
def test_a_passed_descriptor_that_is_not_a_listening_unix_socket_is_left_alone(
    fresh_environment: pytest.MonkeyPatch,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
    kind: str,
    message: str,
) -> None:
    fresh_environment.setenv("LISTEN_PID", str(os.getpid()))
    fresh_environment.setenv("LISTEN_FDS", "1")
    if kind == "datagram":
        passed = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        fileno, close = passed.fileno(), passed.close
    else:
        read, write = os.pipe()
        os.close(write)
        fileno, close = read, lambda: os.close(read)
    try:
        with _as_fd3(fileno):
            assert systemd.inherited_unix_listener() is None
            assert systemd.activated_socket_path() is None
            os.fstat(3)  # still open: not ours to close
    finally:
        close()
    assert message in caplog.messages


def test_reloading_carries_the_monotonic_time_systemd_asks_for(
    fresh_environment: pytest.MonkeyPatch,  # noqa: F811
    sock_dir: str,
) -> None:
    path = os.path.join(sock_dir, "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind(path)
        fresh_environment.setenv("NOTIFY_SOCKET", path)
        before = _monotonic_us()
        assert systemd.notify_reloading()
        state, _, stamp = receiver.recv(200).decode().partition("\nMONOTONIC_USEC=")
    assert state == "RELOADING=1"
    assert before <= int(stamp) <= _monotonic_us()


async def test_the_watchdog_pings_at_once_and_every_half_period(
    fresh_environment: pytest.MonkeyPatch,  # noqa: F811
    sock_dir: str,
    autojump_clock: trio.testing.MockClock,
) -> None:
    path = os.path.join(sock_dir, "notify")
    receiver = trio.socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    await receiver.bind(path)
    fresh_environment.setenv("NOTIFY_SOCKET", path)
    fresh_environment.setenv("WATCHDOG_USEC", "4000000")
    with receiver, trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(systemd.serve_watchdog)
            start = trio.current_time()
            pings = [await receiver.recv(100) for _ in range(3)]
            elapsed = trio.current_time() - start
            nursery.cancel_scope.cancel()
    assert pings == [b"WATCHDOG=1"] * 3
    assert elapsed == pytest.approx(4.0)  # two half periods of 2 s, on the mock clock


async def test_without_a_watchdog_serve_watchdog_returns_at_once(
    fresh_environment: pytest.MonkeyPatch,  # noqa: F811
) -> None:
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(systemd.serve_watchdog)
