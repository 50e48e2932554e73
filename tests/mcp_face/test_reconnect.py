"""``csp-web mcp --socket``: the face outlives its daemon's restarts (issue 15).

A daemon that stops closes the face's connection; the face then reconnects with a bounded
backoff, and a tool call made meanwhile waits a bounded time for it, else is an error result
``daemon_unavailable:...`` from the one catalogue. Tested with real daemons: in process on a
Unix socket for the link's own behaviour, and as ``python -m csp_web serve`` processes stopped
by SIGTERM and started again under the SDK's stdio client.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
import yaml
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult

from csp_web.client.trio_client import open_client
from csp_web.config import Config
from csp_web.core.transports.unix import open_unix_listener
from csp_web.mcp_face.daemon_link import (
    DaemonDown,
    DaemonLink,
    ForeignDaemon,
    Reconnect,
    open_daemon_link,
)
from csp_web.mcp_face.server import call
from csp_web.mcp_face.tools import ToolSpec
from protocol import ErrorCode, Status, Task
from tests.conftest import start_daemon

from .conftest import WAIT_S, face_command, face_env

PING = Task("ping", "SYS", "PONG")
FAST = Reconnect(backoff_initial_s=0.01, backoff_max_s=0.05, call_wait_s=WAIT_S)


async def _serve(nursery: trio.Nursery, config: Config, path: str) -> Callable[[], Awaitable[None]]:
    """An in-process daemon on ``path``; the function returned stops it and returns once it
    has stopped (its listener closed), so nothing of it can take the link's next connect."""
    stopped = trio.Event()
    scope = trio.CancelScope()

    async def run(*, task_status: trio.TaskStatus[None]) -> None:
        try:
            with scope:
                async with trio.open_nursery() as inner:
                    await start_daemon(inner, config, path)
                    task_status.started()
                    await trio.sleep_forever()
        finally:
            stopped.set()

    await nursery.start(run)

    async def stop() -> None:
        scope.cancel()
        await stopped.wait()

    return stop


async def _wait_down(link: DaemonLink) -> None:
    """Until the link has seen its connection end (a call now has to wait)."""
    with trio.fail_after(WAIT_S):
        await link.wait_gone()
    assert not link.connected


async def test_a_link_reconnects_when_its_daemon_restarts(
    nursery: trio.Nursery, config: Config, sock_dir: str
) -> None:
    path = os.path.join(sock_dir, "csp.sock")
    stop = await _serve(nursery, config, path)
    with trio.fail_after(WAIT_S):
        async with open_daemon_link(path, FAST) as link:
            assert (await link.call(PING)).get("DATA") == "pong"
            await stop()
            await _wait_down(link)
            await _serve(nursery, config, path)
            reply = await link.call(PING)
            assert (reply.status, reply.get("DATA"), link.connects) == (Status.OK, "pong", 2)


async def test_a_call_while_the_daemon_is_down_waits_for_it_to_come_back(
    nursery: trio.Nursery, config: Config, sock_dir: str
) -> None:
    path = os.path.join(sock_dir, "csp.sock")
    stop = await _serve(nursery, config, path)
    with trio.fail_after(WAIT_S):
        async with open_daemon_link(path, FAST) as link:
            await stop()
            await _wait_down(link)
            replies = []

            async def ask() -> None:
                replies.append(await link.call(PING))

            async with trio.open_nursery() as calls:
                calls.start_soon(ask)
                await trio.testing.wait_all_tasks_blocked()  # the call waits for a daemon
                assert replies == []
                await _serve(nursery, config, path)
            assert [reply.get("DATA") for reply in replies] == ["pong"]


async def test_a_call_when_no_daemon_comes_back_is_daemon_unavailable_after_its_wait(
    nursery: trio.Nursery, config: Config, sock_dir: str
) -> None:
    path = os.path.join(sock_dir, "csp.sock")
    stop = await _serve(nursery, config, path)
    policy = Reconnect(backoff_initial_s=0.01, backoff_max_s=0.05, call_wait_s=0.2)
    tool = ToolSpec("sys_ping", "ping", "SYS", "PONG", "", {}, {})
    with trio.fail_after(WAIT_S):
        async with open_daemon_link(path, policy) as link:
            await stop()
            await _wait_down(link)
            outcome = await call(link, tool, {}, timeout_s=WAIT_S, peer_uid=os.getuid())
    assert outcome.is_error
    assert outcome.structured["ERROR"].startswith(f"{ErrorCode.DAEMON_UNAVAILABLE}:no daemon")
    assert path in outcome.structured["ERROR"]


async def test_a_link_to_a_socket_nobody_serves_fails_at_once(sock_dir: str) -> None:
    path = os.path.join(sock_dir, "nobody.sock")
    with trio.fail_after(WAIT_S):
        with pytest.raises(OSError, match="No such file"):
            async with open_daemon_link(path, FAST):
                pass


async def test_a_reply_lost_with_the_connection_is_daemon_unavailable(
    nursery: trio.Nursery, config: Config, sock_dir: str
) -> None:
    """The task may have run: it is not sent again, the caller is told."""
    path = os.path.join(sock_dir, "csp.sock")
    listener = await open_unix_listener(path, backlog=1)

    async def take_and_hang_up() -> None:
        stream = await listener.accept()
        await stream.receive_some(65536)  # the task arrived
        await stream.aclose()

    nursery.start_soon(take_and_hang_up)
    with trio.fail_after(WAIT_S):
        async with open_daemon_link(path, FAST) as link:
            with pytest.raises(DaemonDown, match="closed the connection before the reply"):
                await link.call(PING)
    await listener.aclose()


async def test_a_first_connection_not_served_by_the_expected_uid_is_refused_and_closed(
    sock_dir: str,
) -> None:
    """Our own listener stands for another uid's: the link expects a uid that is not ours."""
    path = os.path.join(sock_dir, "csp.sock")
    other = os.getuid() + 7
    listener = await open_unix_listener(path, backlog=1)
    with trio.fail_after(WAIT_S):
        with pytest.raises(ForeignDaemon, match=f"served by uid {os.getuid()}, not uid {other}"):
            async with open_daemon_link(path, FAST, expected_uid=other):
                pass
        refused = await listener.accept()
        assert await refused.receive_some(65536) == b""  # closed by the link, nothing sent
    await refused.aclose()
    await listener.aclose()


async def test_a_reconnection_not_served_by_the_expected_uid_is_refused_and_closed(
    sock_dir: str,
) -> None:
    """Whoever binds the path while the daemon is down gets no call: the link's second
    connection (after the expected uid is no longer the listener's) is closed unused, and a
    call is daemon_unavailable naming why."""
    path = os.path.join(sock_dir, "csp.sock")
    other = os.getuid() + 7
    listener = await open_unix_listener(path, backlog=None)
    policy = Reconnect(backoff_initial_s=0.01, backoff_max_s=0.05, call_wait_s=0.2)
    with trio.fail_after(WAIT_S):
        async with open_daemon_link(path, policy) as link:
            first = await listener.accept()
            link.expected_uid = other  # the path's next server is "another uid"
            await first.aclose()  # the daemon goes
            second = await listener.accept()
            assert await second.receive_some(65536) == b""  # closed by the link, unused
            with pytest.raises(DaemonDown, match=f"served by uid {os.getuid()}, not uid {other}"):
                await link.call(PING)
            assert (link.connected, link.connects) == (False, 1)
    await second.aclose()
    await listener.aclose()


# --- the face as a process, its daemon as processes ----------------------------------------


def _config_file(tmp_path: Path) -> str:
    path = tmp_path / "config.yaml"
    state = {"daemon": {"state_dir": str(tmp_path / "state"), "grace_period_s": 5.0}}
    path.write_text(yaml.safe_dump(state), "utf-8")
    return str(path)


async def _serve_process(config: str, socket_path: str, log: Path) -> trio.Process:
    """``python -m csp_web serve --socket --no-stdin``, returned once it answers a ping."""
    argv = [sys.executable, "-m", "csp_web", "serve", "--config", config]
    with open(log, "ab") as out:
        process = await trio.lowlevel.open_process(
            [*argv, "--socket", socket_path, "--no-stdin"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            env={**os.environ, **face_env()},
        )
    with trio.fail_after(WAIT_S):
        while True:  # a process: nothing to wait on but its socket
            assert process.poll() is None, log.read_text()
            try:
                async with open_client(socket_path) as client:
                    await client.call(PING, timeout_s=WAIT_S)
            except OSError:
                await trio.sleep(0.05)
            else:
                return process


async def _stop(process: trio.Process) -> int:
    process.send_signal(signal.SIGTERM)
    with trio.fail_after(WAIT_S):
        return await process.wait()


async def _cron_list(client: Client) -> CallToolResult:
    result = await client.call_tool("tool_cron", {"action": "list"})
    assert isinstance(result, CallToolResult)
    return result


def _fields(result: CallToolResult) -> dict[str, Any]:
    fields = result.structured_content
    assert fields is not None
    return dict(fields)


async def test_the_stdio_face_answers_again_after_its_daemon_process_restarts(
    tmp_path: Path, sock_dir: str
) -> None:
    config = _config_file(tmp_path)
    path = os.path.join(sock_dir, "csp.sock")
    log = tmp_path / "serve.log"
    command, argv = face_command("--socket", path, "--config", config)
    face = Client(StdioServerParameters(command=command, args=argv, env=face_env()))
    daemon = await _serve_process(config, path, log)
    try:
        with trio.fail_after(WAIT_S * 3):
            async with face as client:
                before = _fields(await _cron_list(client))
                assert await _stop(daemon) == 0
                down = await _cron_list(client)
                daemon = await _serve_process(config, path, log)
                after = _fields(await _cron_list(client))
    finally:
        if daemon.returncode is None:
            daemon.kill()
            await daemon.wait()
    assert (before["STATUS"], before["DATA"]) == ("OK", "jobs:0,active:0,disabled:0")
    assert down.is_error
    error = _fields(down)["ERROR"]
    assert error.startswith(f"{ErrorCode.DAEMON_UNAVAILABLE}:no daemon answers at {path}"), error
    assert after == before
