"""The reference Memory Specialist (``csp-web memory-sink``), in process and as a command."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess

import pytest
import trio
import trio.testing

from csp_web.client.trio_client import Client, ClientClosed, open_client
from csp_web.config import Config, MemoryConfig
from csp_web.core.api.context import Peer
from csp_web.sink.server import LOG_INTERVAL_S, MemorySink, open_memory_sink
from protocol import CLOSED, NEED_DATA, Connection, ErrorCode, Reply, Status, Task
from tests.conftest import Sink, sink_text, start_sink, wait_until

CSP_WEB = shutil.which("csp-web") or "csp-web"


def _write(task_id: str | None, path: str, data: str) -> Task:
    head = (("ID", task_id),) if task_id is not None else ()
    fields = (*head, ("FROM", "web"), ("TYPE", "web_op"), ("PATH", path), ("DATA", data))
    return Task("write", "MEMORY", "ACK", None, fields)


def _read(task_id: str, path: str) -> Task:
    return Task("read", "MEMORY", "CONTENT", None, (("ID", task_id), ("PATH", path)))


def _code(reply: Reply) -> str:
    assert reply.status is Status.FAIL, reply
    return (reply.get("ERROR") or "").partition(":")[0]


async def _call(socket_path: str, task: Task) -> Reply:
    async with open_client(socket_path) as client:
        return await client.call(task, timeout_s=10)


def _socket(config: Config) -> str:
    assert config.memory.socket_path is not None
    return config.memory.socket_path


async def test_write_acknowledges_and_appends_data_under_its_path(
    config: Config, sink: Sink
) -> None:
    """M-1, M-2: a write gets STATUS OK with its own ID; DATA is appended at its PATH."""
    first = await _call(_socket(config), _write("w-1", "web/2026-11-22/a.log", "first"))
    second = await _call(_socket(config), _write("w-2", "web/2026-11-22/a.log", "second\n"))
    assert first == Reply(Status.OK, (("ID", "w-1"), ("SCOPE", "[memory]"), ("DATA", "stored")))
    assert second.status is Status.OK
    assert sink_text(sink.directory, "web/2026-11-22/a.log") == "first\nsecond\n"


async def test_the_sink_keeps_only_its_store_and_writes_no_outbox_file(
    config: Config, sink: Sink
) -> None:
    """Issue 7: the sink is no daemon: no outbox (it once made a .sink-outbox.sqlite3 it
    never used); its directory holds its store and nothing else."""
    reply = await _call(_socket(config), _write("k1", "notes/a.md", "one"))
    assert reply.status is Status.OK
    assert all(name.startswith("memory.sqlite3") for name in os.listdir(sink.directory))
    parent = os.path.dirname(sink.directory)
    assert not [name for name in os.listdir(parent) if "outbox" in name]


async def test_a_repeated_id_with_the_same_content_is_stored_once(
    config: Config, sink: Sink
) -> None:
    """M-2: a receiver ignores an ID it has already stored (the reply is still OK)."""
    await _call(_socket(config), _write("dup-1", "d.log", "once"))
    again = await _call(_socket(config), _write("dup-1", "d.log", "once"))
    assert again == Reply(
        Status.OK, (("ID", "dup-1"), ("SCOPE", "[memory]"), ("DATA", "duplicate"))
    )
    assert sink_text(sink.directory, "d.log") == "once\n"


@pytest.mark.parametrize(
    ("path", "data"), [("d.log", "other"), ("elsewhere.log", "once"), ("d.log", "once\n")]
)
async def test_a_repeated_id_with_other_content_is_id_conflict(
    config: Config, sink: Sink, path: str, data: str
) -> None:
    """M-5: the same ID with another PATH or DATA is FAIL id_conflict, never an OK that
    drops the second write; the first write stays as it was."""
    await _call(_socket(config), _write("dup-2", "d.log", "once"))
    again = await _call(_socket(config), _write("dup-2", path, data))
    assert again.id == "dup-2"
    assert _code(again) == ErrorCode.ID_CONFLICT
    assert sink_text(sink.directory, "d.log") == "once\n"
    assert sink_text(sink.directory, "elsewhere.log") is None


async def _raw_calls(socket_path: str, tasks: list[Task]) -> list[Reply]:
    """Send ``tasks`` in one write and read as many replies (the client refuses repeated IDs,
    so this speaks raw CSP/1)."""
    codec = Connection()
    replies: list[Reply] = []
    stream = await trio.open_unix_socket(socket_path)
    async with stream:
        await stream.send_all(b"".join(codec.send(task) for task in tasks))
        with trio.fail_after(10):
            while len(replies) < len(tasks):
                event = codec.next_event()
                if isinstance(event, Reply):
                    replies.append(event)
                    continue
                assert event is NEED_DATA
                codec.receive_data(await stream.receive_some(65536))
    return replies


async def test_a_repeated_id_in_one_pipelined_batch_is_told_apart(
    config: Config, sink: Sink
) -> None:
    """M-2, M-5: repeats staged in the same group commit are judged like stored ones."""
    tasks = [_write("b-1", "b.log", "one"), _write("b-1", "b.log", "one")]
    replies = await _raw_calls(_socket(config), [*tasks, _write("b-1", "b.log", "two")])
    assert [r.get("DATA") for r in replies[:2]] == ["stored", "duplicate"]
    assert _code(replies[2]) == ErrorCode.ID_CONFLICT
    assert sink_text(sink.directory, "b.log") == "one\n"


async def test_a_repeated_id_is_judged_across_a_sink_restart(
    nursery: trio.Nursery, sock_dir: str, tmp_path: os.PathLike[str]
) -> None:
    """M-2, M-5: the IDs already stored, and their content, survive a restart."""
    socket_path = os.path.join(sock_dir, "sink.sock")
    directory = os.path.join(tmp_path, "mem")
    first = await start_sink(nursery, socket_path, directory)
    await _call(socket_path, _write("keep-1", "k.log", "once"))
    await first.stop()
    assert not os.path.exists(socket_path)
    await start_sink(nursery, socket_path, directory)
    again = await _call(socket_path, _write("keep-1", "k.log", "once"))
    other = await _call(socket_path, _write("keep-1", "k.log", "changed"))
    assert again.status is Status.OK
    assert again.get("DATA") == "duplicate"
    assert _code(other) == ErrorCode.ID_CONFLICT
    assert sink_text(directory, "k.log") == "once\n"


@pytest.mark.parametrize(
    "path", ["../x", "/abs", "a/../../b", "..", ".", ".sink-ids", "a/.hidden", "a//b"]
)
async def test_a_path_outside_the_store_is_refused_as_invalid_field(
    config: Config, sink: Sink, path: str
) -> None:
    """M-1: PATH is a relative logical memory path; escapes and dot-names are refused."""
    reply = await _call(_socket(config), _write("esc-1", path, "x"))
    assert _code(reply) == ErrorCode.INVALID_FIELD
    assert reply.id == "esc-1"
    assert "esc-1" not in sink.store.ids


async def test_a_write_without_id_is_missing_field(config: Config, sink: Sink) -> None:
    """M-1: ID is the idempotency key, so a write without one is refused."""
    # The client adds an ID to frames without one, so speak to the sink with raw bytes.
    codec = Connection()
    stream = await trio.open_unix_socket(_socket(config))
    async with stream:
        await stream.send_all(codec.send(_write(None, "no-id.log", "x")))
        with trio.fail_after(10):
            while not isinstance(event := codec.next_event(), Reply):
                assert event is NEED_DATA
                codec.receive_data(await stream.receive_some(65536))
    assert event.id is None
    assert _code(event) == ErrorCode.MISSING_FIELD
    assert sink_text(sink.directory, "no-id.log") is None


async def test_read_returns_what_is_stored(config: Config, sink: Sink) -> None:
    """M-3: REQ:read returns the stored content (a relayed read depends on it)."""
    await _call(_socket(config), _write("r-1", "notes/n.md", "line one\nline two"))
    reply = await _call(_socket(config), _read("r-2", "notes/n.md"))
    assert reply == Reply(
        Status.OK, (("ID", "r-2"), ("SCOPE", "[memory]"), ("DATA", "line one\nline two\n"))
    )


async def test_read_of_a_missing_path_is_not_found(config: Config, sink: Sink) -> None:
    """E-1, M-7: a read of nothing stored fails not_found (it was invalid_field, which a
    reader could not tell from a bad frame)."""
    reply = await _call(_socket(config), _read("r-3", "nothing/here.md"))
    assert _code(reply) == ErrorCode.NOT_FOUND
    assert reply.get("ERROR") == "not_found:no writes at PATH"


async def _wait_serving(socket_path: str) -> None:
    """Until the sink *process* answers on its socket: an outside process signals nothing
    this test can wait on, so this polls its socket, bounded."""
    with trio.fail_after(15):
        while True:
            try:
                await _call(socket_path, Task("read", "MEMORY", "CONTENT", None, (("PATH", "x"),)))
            except OSError:
                await trio.sleep(0.02)
            else:
                return


async def test_memory_sink_command_serves_and_stops_on_sigterm(
    sock_dir: str, tmp_path: os.PathLike[str]
) -> None:
    """M-2: ``csp-web memory-sink`` acknowledges writes on its socket and ends on SIGTERM."""
    socket_path = os.path.join(sock_dir, "sink.sock")
    directory = os.path.join(tmp_path, "mem")
    process = await trio.lowlevel.open_process(
        [CSP_WEB, "memory-sink", "--socket", socket_path, "--dir", directory],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await _wait_serving(socket_path)
        reply = await _call(socket_path, _write("cli-1", "cli/a.log", "hello"))
        assert reply.status is Status.OK
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(15):
            returncode = await process.wait()
    finally:
        process.kill()
        await process.wait()
    assert returncode in (0, -signal.SIGTERM)
    assert sink_text(directory, "cli/a.log") == "hello\n"


async def _start_sink_process(socket_path: str, directory: str) -> trio.Process:
    process = await trio.lowlevel.open_process(
        [CSP_WEB, "memory-sink", "--socket", socket_path, "--dir", directory],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    await _wait_serving(socket_path)
    return process


async def test_a_write_resent_after_kill_9_of_the_sink_is_stored_once(
    sock_dir: str, tmp_path: os.PathLike[str]
) -> None:
    """M-2: the sink is killed (SIGKILL) while batches of writes are in flight; sent again
    after a restart, every write is answered OK and its DATA is stored exactly once (ID and
    DATA are one transaction). The file store lost this race about once in 40 kills."""
    socket_path = os.path.join(sock_dir, "sink.sock")
    directory = os.path.join(tmp_path, "mem")
    tasks = [_write(f"k9-{n}", f"k9/{n}.log", f"line {n}") for n in range(400)]
    process = await _start_sink_process(socket_path, directory)
    try:
        async with open_client(socket_path) as client:
            await client.call_many(list(tasks[:50]), timeout_s=10)
            with trio.move_on_after(10):  # the kill lands while these are in flight
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_swallow_closed, client, tasks[50:])
                    # Mid-stream: some of the second batch are stored, most are not yet.
                    # The sink is a process: its database is polled (bounded), no event.
                    await wait_until(lambda: sink_text(directory, "k9/60.log") is not None)
                    process.kill()
    finally:
        process.kill()
        await process.wait()
    os.unlink(socket_path)  # left behind by the kill
    process = await _start_sink_process(socket_path, directory)
    try:
        async with open_client(socket_path) as client:
            replies = await client.call_many(list(tasks), timeout_s=30)
    finally:
        process.terminate()
        await process.wait()
    assert {r.status for r in replies} == {Status.OK}
    assert {r.get("DATA") for r in replies[:50]} == {"duplicate"}
    assert all(sink_text(directory, f"k9/{n}.log") == f"line {n}\n" for n in range(400))


async def _swallow_closed(client: Client, tasks: list[Task]) -> None:
    with contextlib.suppress(ClientClosed):
        await client.call_many(list(tasks), timeout_s=10)


async def _one_chunk(sink: MemorySink, data: bytes, count: int) -> list[Reply]:
    """Send ``data`` in one write on an in-process connection; read ``count`` replies."""
    codec = Connection()
    replies: list[Reply] = []
    ours, theirs = trio.socket.socketpair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sink.serve_connection, trio.SocketStream(theirs), Peer("test"))
        async with trio.SocketStream(ours) as stream:
            await stream.send_all(data)
            with trio.fail_after(10):
                while len(replies) < count:
                    event = codec.next_event()
                    if isinstance(event, Reply):
                        replies.append(event)
                        continue
                    assert event is NEED_DATA
                    codec.receive_data(await stream.receive_some(65536))
    return replies


def _ok(task_id: str, data: str) -> Reply:
    return Reply(Status.OK, (("ID", task_id), ("SCOPE", "[memory]"), ("DATA", data)))


def _fail(task_id: str | None, error: str) -> Reply:
    head = (("ID", task_id),) if task_id is not None else ()
    return Reply(Status.FAIL, (*head, ("SCOPE", "[]"), ("DATA", "none"), ("ERROR", error)))


async def test_a_mixed_pipelined_chunk_is_answered_in_order_with_one_commit(
    tmp_path: os.PathLike[str],
) -> None:
    """M-2, M-5: good writes, a malformed frame, a frame the sink refuses, a duplicate, an
    id_conflict and a read, sent in one write, get one reply each in the order sent; the
    chunk's writes share one commit and the read sees the writes sent before it."""
    codec = Connection()
    unknown = Task(
        "write", "MEMORY", "ACK", None, (*_write("m-4", "m.log", "x").fields, ("X", "1"))
    )
    chunk = b"".join(
        [
            codec.send(_write("m-1", "m.log", "one")),
            codec.send(_write("m-2", "m.log", "two")),
            b"TASK REQ:write IN:MEMORY OUT:ACK\nID m-3\nlower case\n\n",
            codec.send(unknown),
            codec.send(_write("m-1", "m.log", "one")),
            codec.send(_write("m-2", "m.log", "changed")),
            codec.send(Task("write", "MEMORY", "CONTENT", None, (("ID", "m-5"),))),
            codec.send(_read("m-6", "m.log")),
        ]
    )
    directory = os.path.join(tmp_path, "mem")
    async with open_memory_sink(directory, MemoryConfig()) as sink:
        replies = await _one_chunk(sink, chunk, 8)
        commits = sink.commits.commits
    assert replies == [
        _ok("m-1", "stored"),
        _ok("m-2", "stored"),
        _fail("m-3", "bad_frame:field key must match [A-Z][A-Z0-9_]*"),
        _fail("m-4", "unknown_field:X"),
        _ok("m-1", "duplicate"),
        _fail("m-2", "id_conflict:ID already stored with other content"),
        _fail("m-5", "wrong_out:write gives OUT:ACK"),
        _ok("m-6", "one\ntwo\n"),
    ]
    assert commits == 1
    assert sink_text(directory, "m.log") == "one\ntwo\n"


@pytest.mark.parametrize(("bad", "closed"), [(10, False), (11, True)])
async def test_the_sink_closes_a_connection_past_its_bad_frame_budget(
    tmp_path: os.PathLike[str], bad: int, closed: bool
) -> None:
    """L-6: max_bad_frames malformed frames are each answered; one more is answered
    too_many_bad_frames and the connection closes (a write after it is not read)."""
    chunk = b"STATUS OK\nID r\n\n" * bad + Connection().send(_write("after", "a.log", "x"))
    async with open_memory_sink(os.path.join(tmp_path, "mem"), MemoryConfig()) as sink:
        replies = await _one_chunk(sink, chunk, min(bad, 10) + 1)
        stored = sink.store.count
    assert replies[:10] == [_fail("r", "bad_header:expected a TASK frame")] * 10
    if closed:
        assert replies[10] == _fail(None, "too_many_bad_frames:over 10")
        assert stored == 0
    else:
        assert replies[10] == _ok("after", "stored")
        assert stored == 1


async def test_writes_are_logged_as_counts_not_one_line_each(
    tmp_path: os.PathLike[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 8.8: the sink logs no INFO line per write; once per LOG_INTERVAL_S it logs one
    line of counts."""
    codec = Connection()
    chunk = b"".join(codec.send(_write(f"l-{n}", "l.log", str(n))) for n in range(50))
    caplog.set_level(logging.INFO)
    async with open_memory_sink(os.path.join(tmp_path, "mem"), MemoryConfig()) as sink:
        await _one_chunk(sink, chunk, 50)
        per_write = [r for r in caplog.records if r.levelno >= logging.INFO]
        sink.tally.since -= LOG_INTERVAL_S  # the interval has passed
        await _one_chunk(sink, codec.send(_write("l-0", "l.log", "0")), 1)
    assert per_write == []
    (line,) = [r.getMessage() for r in caplog.records if r.name == "csp_web.sink.server"]
    assert line.startswith("memory sink: duplicate 1, stored 50 in ")


def _write_with(task_id: str, **values: str) -> Task:
    fields = {"FROM": "web", "TYPE": "web_op", "PATH": "v.log", "DATA": "x", **values}
    return Task("write", "MEMORY", "ACK", None, (("ID", task_id), *fields.items()))


@pytest.mark.parametrize(
    ("values", "error"),
    [
        ({"TYPE": "t" * 64}, None),
        ({"TYPE": "t" * 65}, "invalid_field:TYPE over 64 chars"),
        ({"PATH": "p" * 1024}, None),
        ({"PATH": "p" * 1025}, "invalid_field:PATH over 1024 chars"),
        ({"DATA": " "}, "invalid_field:DATA is empty"),
        ({"FROM": "daemon"}, "invalid_field:FROM must be web|tool|sys|client"),
    ],
)
async def test_every_write_is_validated_at_its_limits(
    tmp_path: os.PathLike[str], values: dict[str, str], error: str | None
) -> None:
    """D-3: the sink checks each field of a plain write at N and N+1 (its fast path passes
    only what the generic validation passes; anything else gets the same FAIL)."""
    codec = Connection()
    async with open_memory_sink(os.path.join(tmp_path, "mem"), MemoryConfig()) as sink:
        (reply,) = await _one_chunk(sink, codec.send(_write_with("v-1", **values)), 1)
        stored = sink.store.count
    assert reply == (_ok("v-1", "stored") if error is None else _fail("v-1", error))
    assert stored == (error is None)


async def test_a_frame_left_unfinished_past_the_deadline_is_answered_and_the_connection_closed(
    tmp_path: os.PathLike[str], autojump_clock: trio.testing.MockClock
) -> None:
    """L-5: a started frame not completed within frame_deadline_s is answered frame_timeout
    and the sink closes the connection (a slowloris cannot hold it)."""
    codec = Connection()
    events: list[object] = []
    ours, theirs = trio.socket.socketpair()
    async with (
        open_memory_sink(os.path.join(tmp_path, "mem"), MemoryConfig()) as sink,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(sink.serve_connection, trio.SocketStream(theirs), Peer("test"))
        async with trio.SocketStream(ours) as stream:
            await stream.send_all(b"TASK REQ:write IN:MEMORY OUT:ACK\nID s-1\n")
            with trio.fail_after(60):
                while not events or events[-1] is not CLOSED:
                    event = codec.next_event()
                    if event is NEED_DATA:
                        codec.receive_data(await stream.receive_some(65536))
                    else:
                        events.append(event)
    assert events == [_fail(None, "frame_timeout:frame not completed within 10s"), CLOSED]


async def test_a_frame_completed_restarts_the_deadline_for_the_next_one_begun_with_it(
    tmp_path: os.PathLike[str], autojump_clock: trio.testing.MockClock
) -> None:
    """L-5, as the daemon's connections: the deadline runs from when the frame still arriving
    began to, so a read that completes one frame and begins the next starts the next one's
    clock afresh; two frames each sent over 8 s of a 10 s deadline are both stored."""
    autojump_clock.autojump_threshold = 0.2  # the store commits in a thread: let it end first
    first = Connection().send(_write_with("c-1"))
    second = Connection().send(_write_with("c-2"))
    ours, theirs = trio.socket.socketpair()
    codec = Connection()
    replies: list[Reply] = []
    async with (
        open_memory_sink(os.path.join(tmp_path, "mem"), MemoryConfig()) as sink,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(sink.serve_connection, trio.SocketStream(theirs), Peer("test"))
        async with trio.SocketStream(ours) as stream:
            await stream.send_all(first[:10])
            await trio.sleep(8)
            await stream.send_all(first[10:] + second[:10])
            await trio.sleep(8)
            await stream.send_all(second[10:])
            with trio.fail_after(60):
                while len(replies) < 2:
                    event = codec.next_event()
                    if isinstance(event, Reply):
                        replies.append(event)
                        continue
                    assert event is NEED_DATA
                    codec.receive_data(await stream.receive_some(65536))
    assert replies == [_ok("c-1", "stored"), _ok("c-2", "stored")]


@pytest.mark.parametrize(
    ("task", "reply"),
    [
        (_write_with("g-1", TIMEOUT_MS="5000"), _ok("g-1", "stored")),
        (_write_with("g-2", TIMEOUT_MS="0"), _fail("g-2", "invalid_field:TIMEOUT_MS below 1")),
        (
            Task("write", "WEB", "ACK", None, (("ID", "g-3"),)),
            _fail("g-3", "wrong_domain:write runs IN:MEMORY"),
        ),
        (Task("ping", "MEMORY", "ACK", None, (("ID", "g-4"),)), _fail("g-4", "unknown_op:ping")),
    ],
)
async def test_frames_off_the_plain_write_path_get_the_dispatchers_answers(
    tmp_path: os.PathLike[str], task: Task, reply: Reply
) -> None:
    """D-1 to D-3: a write with TIMEOUT_MS, or a frame naming no sink op, is validated as the
    daemon's dispatcher would: stored, or the same FAIL frame."""
    async with open_memory_sink(os.path.join(tmp_path, "mem"), MemoryConfig()) as sink:
        assert await _one_chunk(sink, Connection().send(task), 1) == [reply]


@pytest.mark.parametrize(("blank", "closed"), [(32, False), (33, True)])
async def test_the_sink_closes_a_connection_flooding_empty_lines(
    tmp_path: os.PathLike[str], blank: int, closed: bool
) -> None:
    """L-8: 32 empty lines between frames are skipped; the 33rd is answered
    too_many_blank_lines and the connection closes."""
    chunk = b"\n" * blank + Connection().send(_write("n-1", "n.log", "x"))
    async with open_memory_sink(os.path.join(tmp_path, "mem"), MemoryConfig()) as sink:
        (reply,) = await _one_chunk(sink, chunk, 1)
        stored = sink.store.count
    if closed:
        assert reply == _fail(None, "too_many_blank_lines:over 32 empty lines outside a frame")
        assert stored == 0
    else:
        assert (reply, stored) == (_ok("n-1", "stored"), 1)
