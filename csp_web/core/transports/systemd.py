"""systemd's side of a service: socket activation, readiness and the watchdog.

Implements the documented protocols (sd_listen_fds(3), sd_notify(3)) with the standard library
alone, so nothing changes without systemd: every function is a no-op when its environment
variables are absent.

- Socket activation: systemd binds the Unix socket (a ``.socket`` unit) and passes it as fd 3
  with ``LISTEN_PID`` (our pid), ``LISTEN_FDS`` (the count) and ``LISTEN_FDNAMES``. The
  daemon serves it instead of binding one, and leaves the file to systemd at exit.
- Readiness: ``READY=1`` once the daemon accepts work, ``RELOADING=1`` around a SIGHUP reload,
  ``STOPPING=1`` when shutdown begins, sent to ``NOTIFY_SOCKET`` (a path, or ``@name`` in the
  abstract namespace).
- Watchdog: with ``WATCHDOG_USEC`` (and ``WATCHDOG_PID`` naming us, when set), ``WATCHDOG=1``
  every half period from a task on the daemon's event loop, so a stuck loop is restarted.

The variables are read once and removed from the environment, so that no child (a sandboxed
command, an MCP server) inherits them, as sd_listen_fds(unset_environment=1) does.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import time

import trio

from protocol import NumberError, parse_uint

log = logging.getLogger(__name__)

LISTEN_FDS_START = 3  # SD_LISTEN_FDS_START
_ENV = (
    "LISTEN_PID",
    "LISTEN_FDS",
    "LISTEN_FDNAMES",
    "NOTIFY_SOCKET",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
)


@functools.cache
def _environment() -> dict[str, str]:
    """The protocol's variables as the daemon started with them, removed from os.environ."""
    return {name: value for name in _ENV if (value := os.environ.pop(name, None)) is not None}


def _meant_for_us(pid_variable: str) -> bool:
    value = _environment().get(pid_variable)
    return value is None or value == str(os.getpid())


@functools.cache
def inherited_unix_listener() -> socket.socket | None:
    """The listening Unix stream socket systemd passed, or None without socket activation.

    Only the first passed descriptor is served (csp-web listens on one socket); one that is
    not a listening AF_UNIX stream socket is refused with a log line and closed."""
    env = _environment()
    if "LISTEN_FDS" not in env or env.get("LISTEN_PID") != str(os.getpid()):
        return None
    try:
        count = parse_uint(env["LISTEN_FDS"], max_digits=4)
    except NumberError:
        log.warning("ignoring LISTEN_FDS=%r: not a number", env["LISTEN_FDS"])
        return None
    if count < 1:
        return None
    if count > 1:
        log.warning("systemd passed %d sockets; serving the first only", count)
    try:
        sock = socket.socket(fileno=LISTEN_FDS_START)
    except OSError as exc:
        log.warning("ignoring the socket systemd passed: %s", exc.strerror or exc)
        return None
    listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
    if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM or not listening:
        log.warning("ignoring the socket systemd passed: not a listening Unix stream socket")
        sock.detach()  # not ours to close: whatever it is, it stays as systemd made it
        return None
    sock.setblocking(False)
    return sock


def activated_socket_path() -> str | None:
    """The file path of the socket systemd passed, or None."""
    sock = inherited_unix_listener()
    if sock is None:
        return None
    name = sock.getsockname()
    return name if isinstance(name, str) and name else None


def notify(state: str) -> bool:
    """Send ``state`` (newline-separated ``KEY=value`` pairs) to systemd's notification
    socket; True when sent. Never raises: readiness is advice to a supervisor, and a
    supervisor gone away must not stop the daemon."""
    address = _environment().get("NOTIFY_SOCKET")
    if not address or address[0] not in "/@":
        return False
    target = "\0" + address[1:] if address.startswith("@") else address
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.setblocking(False)
            sock.sendto(state.encode(), target)
    except OSError as exc:
        log.debug("sd_notify to %s failed: %s", address, exc)
        return False
    return True


def notify_reloading() -> bool:
    """RELOADING=1 with the monotonic time systemd's Type=notify-reload asks for."""
    return notify(
        f"RELOADING=1\nMONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}"
    )


def watchdog_interval_s() -> float | None:
    """Half the watchdog period systemd set for us, or None when none is set."""
    usec = _environment().get("WATCHDOG_USEC")
    if usec is None or not _meant_for_us("WATCHDOG_PID"):
        return None
    try:
        period_us = parse_uint(usec)
    except NumberError:
        log.warning("ignoring WATCHDOG_USEC=%r: not a number", usec)
        return None
    return period_us / 2e6 if period_us > 0 else None


async def serve_watchdog(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Send WATCHDOG=1 every half period until cancelled; returns at once without a watchdog."""
    interval_s = watchdog_interval_s()
    task_status.started()
    if interval_s is None:
        return
    log.info("systemd watchdog: pinging every %.3g s", interval_s)
    while True:
        notify("WATCHDOG=1")
        await trio.sleep(interval_s)
