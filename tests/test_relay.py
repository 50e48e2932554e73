"""IN:MEMORY frames relayed by the daemon to the Memory Specialist (SPEC M-3)."""

from __future__ import annotations

import os
import sqlite3
from dataclasses import replace
from functools import partial

import pytest
import trio

from csp_web.client.trio_client import open_client
from csp_web.config import Config, SocketConfig
from csp_web.core.api.context import Peer
from csp_web.core.transports.unix import Lease, serve_unix
from csp_web.sink.store import STORE_FILE
from protocol import ErrorCode, Reply, Status, Task
from tests.conftest import Daemon, Sink, sink_text, start_daemon, with_memory


def _write(task_id: str, path: str, data: str) -> Task:
    fields = (
        ("ID", task_id),
        ("FROM", "web"),
        ("TYPE", "document"),
        ("PATH", path),
        ("DATA", data),
    )
    return Task("write", "MEMORY", "ACK", None, fields)


def _read(task_id: str, path: str) -> Task:
    return Task("read", "MEMORY", "CONTENT", None, (("ID", task_id), ("PATH", path)))


def _code(reply: Reply) -> str:
    assert reply.status is Status.FAIL, reply
    return (reply.get("ERROR") or "").partition(":")[0]


async def _call(daemon: Daemon, task: Task) -> Reply:
    async with open_client(daemon.socket_path) as client:
        # Generous next to the relay's own timeouts: a hang fails here, not a slow machine.
        return await client.call(task, timeout_s=20)


async def test_a_relayed_write_and_read_answer_with_the_clients_own_ids(
    daemon: Daemon, sink: Sink
) -> None:
    """M-3: a write and a read sent to the daemon reach the Memory Specialist; each reply
    comes back with the ID the client chose."""
    written = await _call(daemon, _write("client-w-1", "notes/relay.md", "kept"))
    read = await _call(daemon, _read("client-r-1", "notes/relay.md"))
    assert written == Reply(
        Status.OK, (("ID", "client-w-1"), ("SCOPE", "[memory]"), ("DATA", "stored"))
    )
    assert read == Reply(
        Status.OK, (("ID", "client-r-1"), ("SCOPE", "[memory]"), ("DATA", "kept\n"))
    )


async def test_relayed_writes_with_different_ids_are_all_stored(daemon: Daemon, sink: Sink) -> None:
    """M-2, M-3: the client's ID is the idempotency key, so distinct writes relayed one after
    another are each stored (none is mistaken for a duplicate of another)."""
    replies = [await _call(daemon, _write(f"rw-{n}", f"relay/{n}.md", f"v{n}")) for n in range(3)]
    assert [r.get("DATA") for r in replies] == ["stored"] * 3
    for n in range(3):
        assert sink_text(sink.directory, f"relay/{n}.md") == f"v{n}\n"


async def test_a_relayed_write_repeated_with_its_id_is_stored_once(
    daemon: Daemon, sink: Sink
) -> None:
    """M-2, M-3: a client retrying a relayed write with the same ID does not store it twice."""
    await _call(daemon, _write("retry-1", "relay/retry.md", "once"))
    again = await _call(daemon, _write("retry-1", "relay/retry.md", "once"))
    assert again.id == "retry-1"
    assert sink_text(sink.directory, "relay/retry.md") == "once\n"


async def test_relay_without_memory_socket_reaches_the_embedded_memory_specialist(
    nursery: trio.Nursery, config: Config, sock_dir: str
) -> None:
    """M-3, M-6: with no memory.socket_path, relayed writes and reads go to the embedded
    Memory Specialist (they were FAIL memory_unavailable before it existed)."""
    daemon = await start_daemon(
        nursery, with_memory(config, None), os.path.join(sock_dir, "csp.sock")
    )
    missing = await _call(daemon, _read("unset-1", "notes/a.md"))
    written = await _call(daemon, _write("unset-2", "notes/a.md", "kept"))
    read = await _call(daemon, _read("unset-3", "notes/a.md"))
    assert _code(missing) == ErrorCode.NOT_FOUND
    assert written == Reply(
        Status.OK, (("ID", "unset-2"), ("SCOPE", "[memory]"), ("DATA", "stored"))
    )
    assert read == Reply(Status.OK, (("ID", "unset-3"), ("SCOPE", "[memory]"), ("DATA", "kept\n")))


async def test_relay_to_a_memory_specialist_that_is_down_fails_memory_unavailable(
    nursery: trio.Nursery, config: Config, sock_dir: str
) -> None:
    """M-3, E-1: nothing listening on the memory socket is memory_unavailable at once (the
    relay's own timeouts are set far beyond the call's bound, so waiting them out fails)."""
    patient = replace(
        config, memory=replace(config.memory, connect_timeout_s=60.0, relay_timeout_s=60.0)
    )
    daemon = await start_daemon(nursery, patient, os.path.join(sock_dir, "csp.sock"))
    reply = await _call(daemon, _write("down-1", "a.md", "x"))
    assert reply.id == "down-1"
    assert _code(reply) == ErrorCode.MEMORY_UNAVAILABLE


async def test_relay_to_a_memory_specialist_that_hangs_up_fails_memory_unavailable(
    nursery: trio.Nursery, config: Config, sock_dir: str
) -> None:
    """M-3, E-2: a Memory Specialist that accepts and closes without answering is
    memory_unavailable, not internal_error."""

    async def hang_up(stream: trio.SocketStream, peer: Peer, _lease: Lease) -> None:
        await stream.aclose()

    assert config.memory.socket_path is not None
    await nursery.start(
        partial(
            serve_unix, config.memory.socket_path, SocketConfig(), hang_up, handler_nursery=nursery
        )
    )
    daemon = await start_daemon(nursery, config, os.path.join(sock_dir, "csp.sock"))
    reply = await _call(daemon, _read("hangup-1", "a.md"))
    assert reply.id == "hangup-1"
    assert _code(reply) == ErrorCode.MEMORY_UNAVAILABLE


async def test_relay_refuses_a_malformed_id_as_invalid_field(daemon: Daemon, sink: Sink) -> None:
    """C-1, M-3: the relay checks the ID itself; nothing reaches the Memory Specialist."""
    reply = await _call(daemon, _write("bad id!", "bad.md", "x"))
    assert _code(reply) == ErrorCode.INVALID_FIELD
    assert sink_text(sink.directory, "bad.md") is None


async def test_relay_leaves_field_validation_to_the_memory_specialist(
    daemon: Daemon, sink: Sink
) -> None:
    """M-3, D-2, D-3: the daemon has no IN:MEMORY ops; the codes come from the Memory
    Specialist's own validation, relayed under the client's ID."""
    missing = Task("write", "MEMORY", "ACK", None, (("ID", "v-1"), ("FROM", "web")))
    unknown = Task("read", "MEMORY", "CONTENT", None, (("ID", "v-2"), ("PATH", "a"), ("X", "1")))
    bad_choice = Task(
        "write",
        "MEMORY",
        "ACK",
        None,
        (("ID", "v-3"), ("TYPE", "t"), ("PATH", "../a.md"), ("DATA", "x")),
    )
    no_such_op = Task("forget", "MEMORY", "ACK", None, (("ID", "v-4"),))
    replies = [await _call(daemon, task) for task in (missing, unknown, bad_choice, no_such_op)]
    assert [r.id for r in replies] == ["v-1", "v-2", "v-3", "v-4"]
    assert [_code(r) for r in replies] == [
        ErrorCode.MISSING_FIELD,
        ErrorCode.UNKNOWN_FIELD,
        ErrorCode.INVALID_FIELD,
        ErrorCode.UNKNOWN_OP,
    ]


@pytest.mark.parametrize(
    ("fields", "detail"),
    [
        ((("ID", "w-20261122T061500000000-0-1"), ("TYPE", "document"), ("PATH", "n.md")), "ID"),
        ((("ID", "f-1"), ("TYPE", "audit"), ("PATH", "n.md")), "TYPE"),
        ((("ID", "f-2"), ("TYPE", "document"), ("PATH", "exec-logs/x.log")), "PATH"),
        # A repeated field is judged on every value, not only its first.
        ((("ID", "f-3"), ("TYPE", "document"), ("TYPE", "audit"), ("PATH", "n.md")), "TYPE"),
        ((("ID", "f-4"), ("TYPE", "document"), ("PATH", "n.md"), ("PATH", "audit/x")), "PATH"),
        ((("ID", "f-5"), ("TYPE", "research_job"), ("PATH", "n.md")), "TYPE"),
        ((("ID", "f-6"), ("TYPE", "document"), ("PATH", "research-jobs/x.json")), "PATH"),
        # Types and folders earlier daemons wrote beside the audit (browser_op and canvas_op
        # were never refused, so a client could pass a forged one for the daemon's).
        ((("ID", "f-7"), ("TYPE", "browser_op"), ("PATH", "n.md")), "TYPE"),
        ((("ID", "f-8"), ("TYPE", "canvas_op"), ("PATH", "n.md")), "TYPE"),
        ((("ID", "f-9"), ("TYPE", "web_op"), ("PATH", "n.md")), "TYPE"),
        ((("ID", "f-10"), ("TYPE", "document"), ("PATH", "browser-ops/x.json")), "PATH"),
        # The File Cabinet's entries are read back as saved pages: a client may not plant one.
        ((("ID", "f-11"), ("TYPE", "document"), ("PATH", "cabinet/fk_x.json")), "PATH"),
        # A folder is judged where a store that resolves the path would file it.
        ((("ID", "f-12"), ("TYPE", "note"), ("PATH", "./audit/x.json")), "PATH"),
        ((("ID", "f-13"), ("TYPE", "note"), ("PATH", "notes/../exec-logs/x.log")), "PATH"),
        ((("ID", "f-14"), ("TYPE", "note"), ("PATH", "//cabinet/fk_y.json")), "PATH"),
    ],
)
async def test_a_client_cannot_forge_or_preempt_the_daemons_own_records(
    daemon: Daemon, sink: Sink, fields: tuple[tuple[str, str], ...], detail: str
) -> None:
    """M-4: the daemon's record types, folders and ID space are refused before relaying."""
    task = Task("write", "MEMORY", "ACK", None, (*fields, ("FROM", "sys"), ("DATA", "forged")))
    reply = await _call(daemon, task)
    assert _code(reply) == ErrorCode.INVALID_FIELD
    assert (reply.get("ERROR") or "").startswith(f"invalid_field:{detail}")
    # Not relayed (a relayed write is stored before its reply); the daemon's own audit record
    # of the refusal may be stored by now, so look for the forged write itself.
    given = dict(fields)
    assert given["ID"] not in sink.store.ids
    assert sink_text(sink.directory, given["PATH"]) is None


async def test_a_relayed_write_is_marked_as_from_the_client(daemon: Daemon, sink: Sink) -> None:
    """M-4: whatever FROM the client sent, the Memory Specialist sees FROM client."""
    task = Task(
        "write",
        "MEMORY",
        "ACK",
        None,
        (("ID", "m-1"), ("FROM", "sys"), ("TYPE", "document"), ("PATH", "n.md"), ("DATA", "mine")),
    )
    assert (await _call(daemon, task)).status is Status.OK
    # The daemon's audit records may be stored beside it: look at this write's row.
    db = sqlite3.connect(f"file:{os.path.join(sink.directory, STORE_FILE)}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT source, data FROM writes WHERE id = 'm-1'").fetchall()
    finally:
        db.close()
    assert rows == [("client", "mine")]
