"""The ``csp-web`` command as a process: stdin EOF, signals, exit codes, and kill -9.

Each test gives the daemon its own state directory (``--config`` and ``XDG_STATE_HOME`` both
point into tmp_path) and bounds every wait on the process with ``trio.fail_after``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml

from csp_web.client.trio_client import open_client
from csp_web.config import SocketConfig
from csp_web.core.api.context import Peer
from csp_web.core.transports.unix import Lease, serve_unix
from protocol import (
    CLOSED,
    Connection,
    Frame,
    Limits,
    Reply,
    Sentinel,
    Status,
    Task,
    serialize,
)
from tests.conftest import Daemon, audit_ids, start_sink, wait_until

CSP_WEB = shutil.which("csp-web") or "csp-web"
REPO_CONFIG = Path(__file__).resolve().parent.parent / "config.yaml"
PROCESS_TIMEOUT_S = 30  # a bound for hangs, far above the second or so these runs take


def _env(tmp_path: os.PathLike[str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "CSP_WEB_CONFIG"}
    env["XDG_STATE_HOME"] = os.path.join(tmp_path, "xdg")
    return env


def _config_file(
    tmp_path: os.PathLike[str], memory_socket: str | None = None, **extra: Mapping[str, Any]
) -> str:
    """A YAML config keeping state in tmp_path, with fast reconnects to ``memory_socket``."""
    data: dict[str, Any] = {
        "daemon": {"state_dir": os.path.join(tmp_path, "state"), "grace_period_s": 5.0},
        "memory": {"backoff_initial_s": 0.01, "backoff_max_s": 0.05},
        **extra,
    }
    if memory_socket is not None:
        data["memory"]["socket_path"] = memory_socket
    path = os.path.join(tmp_path, "config.yaml")
    with open(path, "w", encoding="utf-8") as file:
        yaml.safe_dump(data, file)
    return path


def _frames(data: bytes) -> list[Frame]:
    """Every frame in ``data``; any byte that is not part of a frame fails the parse."""
    codec = Connection(Limits(64 << 20, 64 << 20, 100_000))
    codec.receive_data(data)
    codec.receive_data(b"")
    frames: list[Frame] = []
    while not isinstance(event := codec.next_event(), Sentinel):
        frames.append(event)
    assert event is CLOSED
    return frames


def _replies(data: bytes) -> list[Reply]:
    frames = _frames(data)
    assert all(isinstance(frame, Reply) for frame in frames), frames
    return [frame for frame in frames if isinstance(frame, Reply)]


def _ping(task_id: str) -> Task:
    return Task("ping", "SYS", "PONG", None, (("ID", task_id),))


async def _run(
    args: list[str], env: dict[str, str], stdin: bytes = b""
) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(PROCESS_TIMEOUT_S):
        return await trio.run_process(
            [CSP_WEB, *args],
            stdin=stdin,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=env,
        )


@contextmanager
def _log_fd(path: str) -> Iterator[int]:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        yield fd
    finally:
        os.close(fd)


async def _start_serving(
    config_path: str, socket_path: str, env: dict[str, str], log_path: str
) -> trio.Process:
    """``csp-web serve --socket --no-stdin``, returned once it answers a ping."""
    with _log_fd(log_path) as log:
        process = await trio.lowlevel.open_process(
            [CSP_WEB, "serve", "--config", config_path, "--socket", socket_path, "--no-stdin"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
        )
    with trio.fail_after(PROCESS_TIMEOUT_S):
        while True:  # a process: nothing to wait on but its socket (polled, bounded)
            assert process.poll() is None, Path(log_path).read_text()
            try:
                async with open_client(socket_path) as client:
                    await client.call(Task("ping", "SYS", "PONG"), timeout_s=PROCESS_TIMEOUT_S)
            except OSError:
                await trio.sleep(0.02)
            else:
                return process


async def _wait_exit(process: trio.Process) -> int:
    try:
        with trio.fail_after(PROCESS_TIMEOUT_S):
            return await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_eof_on_stdin_finishes_work_flushes_memory_and_exits_zero(
    nursery: trio.Nursery, tmp_path: os.PathLike[str], sock_dir: str
) -> None:
    """R-1, M-2: at EOF every frame gets its reply on stdout, which holds nothing but
    frames; pending memory writes are delivered before exit 0; logs go to stderr."""
    memory_socket = os.path.join(sock_dir, "memory.sock")
    sink = await start_sink(nursery, memory_socket, os.path.join(tmp_path, "mem"))
    config = _config_file(tmp_path, memory_socket)
    tasks = [
        *[_ping(f"eof-{n}") for n in range(5)],
        Task("ping", "SYS", "PONG"),
        Task("nope", "SYS", "PONG", None, (("ID", "eof-unknown"),)),
        Task("stats", "SYS", "STATS", None, (("ID", "eof-stats"),)),
    ]
    stdin = b"".join(serialize(task) for task in tasks)
    done = await _run(["serve", "--config", config], _env(tmp_path), stdin)
    assert done.returncode == 0, done.stderr.decode()
    replies = _replies(done.stdout)
    assert sorted(r.id or "" for r in replies) == sorted(t.id or "" for t in tasks)
    by_id = {r.id: r for r in replies}
    assert by_id[None].status is Status.OK
    assert by_id["eof-unknown"].status is Status.FAIL
    assert done.stderr.strip()
    assert {*(f"eof-{n}" for n in range(5)), "eof-unknown", "eof-stats"} <= audit_ids(
        sink.directory
    )


async def test_log_json_makes_every_stderr_line_json(tmp_path: os.PathLike[str]) -> None:
    """R-1: with --log-json each stderr line is one JSON object; stdout still only frames."""
    config = _config_file(tmp_path)
    stdin = serialize(_ping("json-1")) + serialize(Task("nope", "SYS", "PONG"))
    done = await _run(["serve", "--config", config, "--log-json"], _env(tmp_path), stdin)
    assert done.returncode == 0, done.stderr.decode()
    # C-2: the reply to a frame with ID may overtake an earlier one, so compare as a set.
    assert {r.id for r in _replies(done.stdout)} == {"json-1", None}
    lines = done.stderr.decode().splitlines()
    assert lines
    entries = [json.loads(line) for line in lines]
    assert all({"level", "logger", "msg"} <= entry.keys() for entry in entries)
    ops = {entry.get("id"): entry for entry in entries if entry["msg"] == "op done"}
    assert ops["json-1"]["op"] == "ping"
    assert ops["json-1"]["outcome"] == "OK"
    assert ops["json-1"]["conn"] == "stdin"
    assert ops["json-1"]["duration_ms"] >= 0
    assert ops[None]["error"] == "unknown_op"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_a_signal_stops_the_socket_daemon_cleanly(
    tmp_path: os.PathLike[str], sock_dir: str, signum: signal.Signals
) -> None:
    """Lifecycle (no SPEC rule): SIGTERM or SIGINT stops accepting, lets an idle connection
    go, exits 0 and removes the socket file."""
    socket_path = os.path.join(sock_dir, "csp.sock")
    log_path = os.path.join(tmp_path, "serve.log")
    process = await _start_serving(_config_file(tmp_path), socket_path, _env(tmp_path), log_path)
    async with open_client(socket_path) as idle:
        assert (await idle.call(_ping("before-signal"))).status is Status.OK
        process.send_signal(signum)
        returncode = await _wait_exit(process)
    assert returncode == 0, Path(log_path).read_text()
    assert not os.path.exists(socket_path)
    with pytest.raises(FileNotFoundError):
        await trio.open_unix_socket(socket_path)


async def test_an_unknown_config_key_exits_2_naming_its_path(
    tmp_path: os.PathLike[str],
) -> None:
    """A misspelt key is refused with its dotted path, by serve and by check-config."""
    bad = _config_file(tmp_path, connection={"max_in_flight_tasks": 3})
    serve = await _run(["serve", "--config", bad], _env(tmp_path), serialize(_ping("x")))
    check = await _run(["check-config", bad], _env(tmp_path))
    for done in (serve, check):
        assert done.returncode == 2
        assert "connection.max_in_flight_tasks" in done.stderr.decode()
        assert done.stdout == b""


async def test_check_config_accepts_a_valid_file(tmp_path: os.PathLike[str]) -> None:
    """A config that loads strictly is reported as ok with exit 0."""
    done = await _run(["check-config", _config_file(tmp_path)], _env(tmp_path))
    assert done.returncode == 0, done.stderr.decode()


async def test_check_config_accepts_the_repositorys_config_yaml(
    tmp_path: os.PathLike[str],
) -> None:
    """config.yaml documents every setting; it must load strictly."""
    done = await _run(["check-config", str(REPO_CONFIG)], _env(tmp_path))
    assert done.returncode == 0, done.stderr.decode()


async def test_send_prints_replies_and_exits_zero_when_all_succeed(
    daemon: Daemon, tmp_path: os.PathLike[str]
) -> None:
    """R-1: ``csp-web send`` prints each reply as a frame; all OK is exit 0."""
    stdin = serialize(_ping("send-1")) + serialize(_ping("send-2"))
    done = await _run(["send", "--socket", daemon.socket_path], _env(tmp_path), stdin)
    assert done.returncode == 0, done.stderr.decode()
    # Replies print as they arrive; frames with ID may be answered out of order (C-2).
    assert sorted((r.status, r.id or "") for r in _replies(done.stdout)) == [
        (Status.OK, "send-1"),
        (Status.OK, "send-2"),
    ]


async def test_send_exits_one_when_any_reply_fails(
    daemon: Daemon, tmp_path: os.PathLike[str]
) -> None:
    """D-2, E-1: one FAIL among the replies makes ``send`` exit 1; every reply is printed."""
    unknown = Task("nope", "SYS", "PONG", None, (("ID", "send-bad"),))
    stdin = serialize(_ping("send-ok")) + serialize(unknown)
    done = await _run(["send", "--socket", daemon.socket_path], _env(tmp_path), stdin)
    assert done.returncode == 1
    replies = sorted(_replies(done.stdout), key=lambda r: r.id or "", reverse=True)
    assert [(r.status, r.id) for r in replies] == [
        (Status.OK, "send-ok"),
        (Status.FAIL, "send-bad"),
    ]
    assert (replies[1].get("ERROR") or "").startswith("unknown_op:")


async def test_send_exits_three_when_nothing_listens(
    tmp_path: os.PathLike[str], sock_dir: str
) -> None:
    """``send`` to a socket nobody serves is exit 3 with nothing on stdout."""
    nowhere = os.path.join(sock_dir, "nobody.sock")
    done = await _run(["send", "--socket", nowhere], _env(tmp_path), serialize(_ping("lost")))
    assert done.returncode == 3
    assert done.stdout == b""


async def test_send_exits_three_when_the_daemon_hangs_up(
    nursery: trio.Nursery, tmp_path: os.PathLike[str], sock_dir: str
) -> None:
    """A peer that accepts and closes before replying is unreachable: exit 3, no traceback."""

    async def hang_up(stream: trio.SocketStream, peer: Peer, _lease: Lease) -> None:
        await stream.aclose()

    socket_path = os.path.join(sock_dir, "hangup.sock")
    await nursery.start(
        partial(serve_unix, socket_path, SocketConfig(), hang_up, handler_nursery=nursery)
    )
    done = await _run(["send", "--socket", socket_path], _env(tmp_path), serialize(_ping("cut")))
    assert done.returncode == 3, done.stderr.decode()
    assert done.stdout == b""
    assert b"Traceback" not in done.stderr


async def test_kill_9_loses_no_write_of_an_answered_task(
    nursery: trio.Nursery, tmp_path: os.PathLike[str], sock_dir: str
) -> None:
    """M-2: a task's audit write is durable before its reply; after kill -9 a fresh daemon on
    the same state directory delivers every one to the Memory Specialist. (An IN:SYS frame's
    audit is durable before its reply when it fills its summary: here every frame, O-4.)"""
    memory_socket = os.path.join(sock_dir, "memory.sock")  # nothing listens yet
    socket_path = os.path.join(sock_dir, "csp.sock")
    config = _config_file(tmp_path, memory_socket, audit={"sys_summary_max_frames": 1})
    env = _env(tmp_path)
    first = await _start_serving(config, socket_path, env, os.path.join(tmp_path, "first.log"))
    sent = [f"k9-{n}" for n in range(40)]
    try:
        async with open_client(socket_path) as client:
            replies = await client.call_many([_ping(i) for i in sent], timeout_s=PROCESS_TIMEOUT_S)
        assert [(r.status, r.id) for r in replies] == [(Status.OK, i) for i in sent]
    finally:
        first.kill()
        assert await _wait_exit(first) == -signal.SIGKILL
    sink = await start_sink(nursery, memory_socket, os.path.join(tmp_path, "mem"))
    second = await _start_serving(config, socket_path, env, os.path.join(tmp_path, "second.log"))
    try:
        # The writes come from the daemon *process*: the sink's store is polled (bounded).
        await wait_until(lambda: set(sent) <= audit_ids(sink.directory), timeout_s=20)
    finally:
        second.send_signal(signal.SIGTERM)
        assert await _wait_exit(second) == 0


async def test_a_second_signal_stops_at_once_even_while_the_outbox_waits_to_flush(
    nursery: trio.Nursery, tmp_path: os.PathLike[str], sock_dir: str
) -> None:
    """With a Memory Specialist connected that never acknowledges and a write pending, the
    first signal would wait out a 600 s grace period for the flush; the second one ends it
    (bounded by the test's wait). Before, its Memory Specialist was down, so the flush ended
    at once and the test passed whatever the second signal did."""
    accepted = trio.Semaphore(0)

    async def never_answer(stream: trio.SocketStream, peer: Peer, _lease: Lease) -> None:
        accepted.release()
        await trio.sleep_forever()

    memory_socket = os.path.join(sock_dir, "silent.sock")
    await nursery.start(
        partial(serve_unix, memory_socket, SocketConfig(), never_answer, handler_nursery=nursery)
    )
    config = _config_file(
        tmp_path,
        memory_socket,
        daemon={"state_dir": os.path.join(tmp_path, "state"), "grace_period_s": 600.0},
    )
    with open(config, encoding="utf-8") as file:
        data = yaml.safe_load(file)
    data["memory"]["ack_timeout_s"] = 600.0  # delivery stays connected through the test
    with open(config, "w", encoding="utf-8") as file:
        yaml.safe_dump(data, file)
    socket_path = os.path.join(sock_dir, "csp.sock")
    log_path = os.path.join(tmp_path, "serve.log")
    process = await _start_serving(config, socket_path, _env(tmp_path), log_path)
    async with open_client(socket_path) as client:
        assert (await client.call(_ping("pending-audit"))).status is Status.OK
    with trio.fail_after(PROCESS_TIMEOUT_S):
        await accepted.acquire()  # delivery is connected: the flush will wait for its ACK
    process.send_signal(signal.SIGTERM)
    # The daemon is a process: its log line that in-flight work is done (the flush comes
    # next) is polled, bounded; nothing in this process can signal it.
    await wait_until(lambda: "shutdown: " in Path(log_path).read_text(), timeout_s=20)
    process.send_signal(signal.SIGTERM)
    assert await _wait_exit(process) == 0, Path(log_path).read_text()
    assert "second signal: cutting in-flight work" in Path(log_path).read_text()


def _relayed_write(task_id: str) -> bytes:
    fields = (("ID", task_id), ("TYPE", "document"), ("PATH", f"notes/{task_id}"), ("DATA", "x"))
    return serialize(Task("write", "MEMORY", "ACK", None, fields))


async def test_sigterm_answers_every_task_and_exits_4_when_the_grace_period_cuts_work(
    nursery: trio.Nursery, tmp_path: os.PathLike[str], sock_dir: str
) -> None:
    """C-5, R-1, L-4: with a Memory Specialist that never answers, two relayed writes run and
    three wait behind max_in_flight 2. SIGTERM answers the three shutting_down at once, the
    1 s grace period cuts the two, every one gets its FAIL shutting_down before the close, one
    log line gives the counts, and the daemon exits 4."""
    relayed = trio.Semaphore(0)

    async def never_answer(stream: trio.SocketStream, peer: Peer, _lease: Lease) -> None:
        # The outbox connects here too (audit records); count only the relayed writes.
        if b"PATH notes/" in await stream.receive_some(65536):
            relayed.release()
        await trio.sleep_forever()

    memory_socket = os.path.join(sock_dir, "silent.sock")
    await nursery.start(
        partial(serve_unix, memory_socket, SocketConfig(), never_answer, handler_nursery=nursery)
    )
    config = _config_file(
        tmp_path,
        memory_socket,
        daemon={"state_dir": os.path.join(tmp_path, "state"), "grace_period_s": 1.0},
        connection={"max_in_flight": 2},
    )
    with open(config, encoding="utf-8") as file:
        data = yaml.safe_load(file)
    data["memory"]["relay_timeout_s"] = 600.0
    data["tasks"] = {"default_timeout_ms": 600_000}
    with open(config, "w", encoding="utf-8") as file:
        yaml.safe_dump(data, file)
    socket_path = os.path.join(sock_dir, "csp.sock")
    log_path = os.path.join(tmp_path, "serve.log")
    process = await _start_serving(config, socket_path, _env(tmp_path), log_path)
    ids = [f"w{n}" for n in range(5)]
    stream = await trio.open_unix_socket(socket_path)
    async with stream:
        await stream.send_all(b"".join(_relayed_write(i) for i in ids))
        with trio.fail_after(PROCESS_TIMEOUT_S):
            for _ in range(2):  # both running writes reached the Memory Specialist
                await relayed.acquire()
        process.send_signal(signal.SIGTERM)
        received = b""
        with trio.fail_after(PROCESS_TIMEOUT_S):
            while chunk := await stream.receive_some(65536):
                received += chunk
    assert await _wait_exit(process) == 4, Path(log_path).read_text()
    replies = _replies(received)
    assert sorted(r.id or "" for r in replies) == ids
    assert {(r.get("ERROR") or "").partition(":")[0] for r in replies} == {"shutting_down"}
    assert "0 in-flight tasks answered, 2 cut by the 1s grace period, 3 refused" in (
        Path(log_path).read_text()
    )


async def _silent_memory(nursery: trio.Nursery, socket_path: str) -> trio.Semaphore:
    """A Memory Specialist at ``socket_path`` that reads and never answers; the semaphore is
    released once per relayed write (``PATH notes/``) that reaches it."""
    relayed = trio.Semaphore(0)

    async def never_answer(stream: trio.SocketStream, peer: Peer, _lease: Lease) -> None:
        if b"PATH notes/" in await stream.receive_some(65536):
            relayed.release()
        await trio.sleep_forever()

    await nursery.start(
        partial(serve_unix, socket_path, SocketConfig(), never_answer, handler_nursery=nursery)
    )
    return relayed


async def _wait_logged(log_path: str, text: str) -> None:
    with trio.fail_after(PROCESS_TIMEOUT_S):
        while text not in Path(log_path).read_text():
            await trio.sleep(0.02)


async def _read_to_eof(stream: trio.SocketStream) -> bytes:
    received = b""
    with trio.fail_after(PROCESS_TIMEOUT_S):
        while chunk := await stream.receive_some(65536):
            received += chunk
    return received


async def test_a_second_signal_cuts_running_work_answers_it_logs_the_counts_and_exits_4(
    nursery: trio.Nursery, tmp_path: os.PathLike[str], sock_dir: str
) -> None:
    """C-5: with a 600 s grace period and a relayed write the Memory Specialist never
    answers, the second SIGTERM ends the grace period at once: the write is answered
    shutting_down (before, it was dropped unanswered and the daemon exited 0)."""
    memory_socket = os.path.join(sock_dir, "silent.sock")
    relayed = await _silent_memory(nursery, memory_socket)
    config = _config_file(
        tmp_path,
        memory_socket,
        daemon={"state_dir": os.path.join(tmp_path, "state"), "grace_period_s": 600.0},
        tasks={"default_timeout_ms": 600_000},
    )
    with open(config, encoding="utf-8") as file:
        data = yaml.safe_load(file)
    data["memory"]["relay_timeout_s"] = 600.0
    with open(config, "w", encoding="utf-8") as file:
        yaml.safe_dump(data, file)
    socket_path = os.path.join(sock_dir, "csp.sock")
    log_path = os.path.join(tmp_path, "serve.log")
    process = await _start_serving(config, socket_path, _env(tmp_path), log_path)
    stream = await trio.open_unix_socket(socket_path)
    async with stream:
        await stream.send_all(_relayed_write("w0"))
        with trio.fail_after(PROCESS_TIMEOUT_S):
            await relayed.acquire()
        process.send_signal(signal.SIGTERM)
        await _wait_logged(log_path, "SIGTERM: finishing in-flight work")  # not coalesced
        process.send_signal(signal.SIGTERM)
        received = await _read_to_eof(stream)
    assert await _wait_exit(process) == 4, Path(log_path).read_text()
    (reply,) = _replies(received)
    assert serialize(reply) == (
        b"STATUS FAIL\nID w0\nSCOPE []\nDATA none\n"
        b"ERROR shutting_down:grace period over, work cancelled\n\n"
    )
    assert "0 in-flight tasks answered, 1 cut by the 600s grace period, 0 refused" in (
        Path(log_path).read_text()
    )


def _exec_frame(task_id: str, command: str) -> bytes:
    return serialize(Task("exec", "SHELL", "EXEC_RESULT", command, (("ID", task_id),)))


@pytest.mark.slow
async def test_sigterm_answers_shutting_down_for_exec_running_and_queued_when_the_grace_ends(
    tmp_path: os.PathLike[str], sock_dir: str
) -> None:
    """C-5, the issue's case: the tool pool runs 2 execs. ``sleep 1`` finishes in the
    4 s grace period and a queued ``sleep 30`` starts in its place; at the grace period's
    end it and the other running ``sleep 30`` are cut. Both answer shutting_down (the queued
    one answered timeout_exceeded:30000ms before, its exec taking the grace period for its
    own deadline), and no sleep is left running."""
    from tests.tool.exec_support import live_pids, scratch_dir, wait_for_pid

    marker = f"30.{os.getpid()}"
    with scratch_dir() as workspace:
        config = _config_file(
            tmp_path,
            daemon={"state_dir": os.path.join(tmp_path, "state"), "grace_period_s": 4.0},
            tasks={"specialists": {"tool": {"max_running": 2, "max_queued": 10}}},
            tool={
                "exec": {"workspace_roots": [workspace], "allowed_programs": [{"program": "sleep"}]}
            },
        )
        socket_path = os.path.join(sock_dir, "csp.sock")
        log_path = os.path.join(tmp_path, "serve.log")
        process = await _start_serving(config, socket_path, _env(tmp_path), log_path)
        stream = await trio.open_unix_socket(socket_path)
        async with stream:
            await stream.send_all(
                _exec_frame("short", "sleep 1") + _exec_frame("long", f"sleep {marker}1")
            )
            await wait_for_pid(f"sleep {marker}1", timeout_s=PROCESS_TIMEOUT_S)
            await stream.send_all(_exec_frame("queued", f"sleep {marker}2"))
            process.send_signal(signal.SIGTERM)
            received = await _read_to_eof(stream)
        assert await _wait_exit(process) == 4, Path(log_path).read_text()
    replies = {reply.id: reply for reply in _replies(received)}
    assert replies["short"].status is Status.OK
    cut = "shutting_down:grace period over, work cancelled"
    assert (replies["long"].get("ERROR"), replies["queued"].get("ERROR")) == (cut, cut)
    assert live_pids(marker) == []
