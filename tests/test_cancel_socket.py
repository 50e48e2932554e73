"""SPEC C-6 over a real Unix socket: a client that hangs up has its unfinished tasks
cancelled (each audited once), unless ``tasks.cancel_on_disconnect`` is false; a client that
only shuts its sending side still gets its replies; and a cancelled ``exec sleep 30`` leaves
no process (read from /proc)."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import trio

from csp_web.config import Config, with_section
from csp_web.core.dispatch.dispatcher import Dispatcher
from protocol import Connection, Limits, Reply, Task, serialize
from specialists.tool import TOOL
from specialists.tool.config import ToolConfig
from tests.conftest import Daemon, start_daemon, wait_until
from tests.harness import SLEEPS, TEST_OPS, ClientEnd, outbox_of
from tests.tool.exec_support import live_pids, make_config, scratch_dir, wait_for_pid

WAIT_S = 30.0


def _sleep(task_id: str, ms: int) -> bytes:
    fields = (("ID", task_id), ("TIMEOUT_MS", "600000"))
    return serialize(Task("sleep", "TEST", "SLEPT", str(ms), fields))


def _audits(dispatcher: Dispatcher, task_id: str) -> list[dict[str, Any]]:
    rows = outbox_of(dispatcher)._store.oldest(10_000)
    records = [json.loads(write.data) for _, write in rows if write.type == "audit"]
    return [record for record in records if record.get("id") == task_id]


def _outcomes(dispatcher: Dispatcher, *ids: str) -> list[list[tuple[str, str | None]]]:
    return [[(a["outcome"], a["error"]) for a in _audits(dispatcher, i)] for i in ids]


async def _running(mark: int, count: int) -> None:
    """Until ``count`` test sleep ops have started since ``SLEEPS.started`` was ``mark``."""
    with trio.fail_after(WAIT_S):
        await SLEEPS.wait_started(mark + count)


async def _audited(dispatcher: Dispatcher, *ids: str) -> None:
    """Until each task is audited (after it leaves the in-flight count)."""
    await wait_until(lambda: all(_audits(dispatcher, i) for i in ids), timeout_s=WAIT_S)


async def _serve(nursery: trio.Nursery, config: Config, sock_dir: str) -> Daemon:
    """The test ops on a socket; no Memory Specialist listens, so audits stay in the outbox."""
    return await start_daemon(nursery, config, os.path.join(sock_dir, "csp.sock"), TEST_OPS)


async def test_a_client_that_hangs_up_has_its_unfinished_tasks_cancelled_and_audited_once(
    nursery: trio.Nursery, config: Config, sock_dir: str
) -> None:
    daemon = await _serve(nursery, config, sock_dir)
    stream = await trio.open_unix_socket(daemon.socket_path)
    mark = SLEEPS.started
    await stream.send_all(_sleep("h1", 600_000) + _sleep("h2", 600_000))
    await _running(mark, 2)
    await stream.aclose()
    await _audited(daemon.dispatcher, "h1", "h2")
    cancelled = [("FAIL", "cancelled:the client hung up")]
    assert _outcomes(daemon.dispatcher, "h1", "h2") == [cancelled, cancelled]


async def test_a_hang_up_is_heard_while_the_connection_waits_at_its_in_flight_cap(
    nursery: trio.Nursery, config: Config, sock_dir: str
) -> None:
    """L-4, C-6: with 2 in flight the reader stops reading, so it would not see EOF until a
    task ended (here ten minutes). The hang-up cancels the two running, the one held at
    the cap and the one still buffered: each is audited cancelled, none runs on."""
    connection = replace(config.connection, max_in_flight=2)
    daemon = await _serve(nursery, replace(config, connection=connection), sock_dir)
    stream = await trio.open_unix_socket(daemon.socket_path)
    mark = SLEEPS.started
    ids = ["c1", "c2", "c3", "c4"]
    await stream.send_all(b"".join(_sleep(i, 600_000) for i in ids))
    await _running(mark, 2)
    await stream.aclose()
    await _audited(daemon.dispatcher, *ids)
    cancelled = [("FAIL", "cancelled:the client hung up")]
    assert _outcomes(daemon.dispatcher, *ids) == [cancelled] * 4


async def test_with_cancel_on_disconnect_false_a_hung_up_clients_tasks_run_to_their_end(
    nursery: trio.Nursery, config: Config, sock_dir: str
) -> None:
    """Both run on after the hang-up, and the first reply that finds the peer gone cuts
    nothing: the second task still ends with its own reply, audited."""
    config = replace(config, tasks=replace(config.tasks, cancel_on_disconnect=False))
    daemon = await _serve(nursery, config, sock_dir)
    stream = await trio.open_unix_socket(daemon.socket_path)
    mark = SLEEPS.started
    await stream.send_all(_sleep("k1", 200) + _sleep("k2", 600))
    await _running(mark, 2)
    await stream.aclose()
    await _audited(daemon.dispatcher, "k1", "k2")
    assert _outcomes(daemon.dispatcher, "k1", "k2") == [[("OK", None)], [("OK", None)]]


async def test_a_client_that_only_shuts_its_sending_side_still_gets_its_replies(
    nursery: trio.Nursery, config: Config, sock_dir: str
) -> None:
    """EOF alone is not a hang-up: ``printf ... | nc -N`` shuts its side and reads on."""
    daemon = await _serve(nursery, config, sock_dir)
    stream = await trio.open_unix_socket(daemon.socket_path)
    mark = SLEEPS.started
    await stream.send_all(_sleep("half", 300))
    await _running(mark, 1)
    await stream.send_eof()
    end = ClientEnd(stream, Connection(Limits(1 << 20, 1 << 20, 1000)))
    with trio.fail_after(WAIT_S):
        reply = await end.reply()
    assert reply is not None
    assert serialize(reply) == b"STATUS OK\nID half\nSCOPE [test]\nDATA slept:300\n\n"
    await stream.aclose()


@pytest.fixture
def workspace() -> Iterator[str]:
    with scratch_dir() as path:
        yield path


def _exec(task_id: str, command: str) -> bytes:
    fields = (("ID", task_id), ("COMMAND", command))
    return serialize(Task("exec", "SHELL", "EXEC_RESULT", None, fields))


def _cancel(target: str) -> bytes:
    return serialize(Task("cancel", "SYS", "ACK", None, (("ID", "k"), ("TARGET", target))))


async def _reply(stream: trio.SocketStream) -> Reply:
    end = ClientEnd(stream, Connection(Limits(1 << 20, 1 << 20, 1000)))
    with trio.fail_after(WAIT_S):
        reply = await end.reply()
    assert reply is not None
    return reply


@pytest.mark.slow
@pytest.mark.parametrize("how", ["cancel", "hang-up"])
async def test_a_cancelled_exec_leaves_no_process(
    nursery: trio.Nursery, config: Config, sock_dir: str, workspace: str, how: str
) -> None:
    """``exec sleep 30`` over the socket, cancelled by REQ:cancel from another connection
    or by its client hanging up: its reply (or audit) says cancelled, and /proc holds no
    process of it once the task is answered."""
    config = with_section(config, "tool", ToolConfig(exec=make_config(workspace)))
    daemon = await start_daemon(
        nursery, config, os.path.join(sock_dir, "csp.sock"), specialists=(TOOL,)
    )
    marker = f"sleep 30.{os.getpid()}{len(how)}"  # a command line no other test runs
    stream = await trio.open_unix_socket(daemon.socket_path)
    await stream.send_all(_exec("e1", marker))
    await wait_for_pid(marker, timeout_s=WAIT_S)
    if how == "cancel":
        other = await trio.open_unix_socket(daemon.socket_path)
        await other.send_all(_cancel("e1"))
        assert (await _reply(other)).get("CANCELLED") == "1"
        assert (await _reply(stream)).get("ERROR") == "cancelled:by REQ:cancel"
        await other.aclose()
    else:
        stream.socket.shutdown(socket.SHUT_RDWR)
        await _audited(daemon.dispatcher, "e1")
        assert _outcomes(daemon.dispatcher, "e1") == [[("FAIL", "cancelled:the client hung up")]]
    await stream.aclose()
    assert live_pids(marker) == []
