"""The reference Memory Specialist's store and group commit, on a real SQLite file.

Failures are real: a trigger in the database aborts an insert, as a full disk would.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import threading

import pytest
import trio

from csp_web.client.trio_client import ClientClosed, open_stream_client
from csp_web.config import MemoryConfig
from csp_web.core.api.context import Peer
from csp_web.sink.commit import INLINE_ROWS, GroupCommit
from csp_web.sink.server import MemorySink, open_memory_sink
from csp_web.sink.store import (
    LOOKUP_IDS,
    STORE_FILE,
    Committed,
    Retention,
    Row,
    SinkStore,
    content_hash,
)
from protocol import ErrorCode, Reply, Status, Task, serialize
from tests.conftest import sink_text

DAY_S = 86400.0


def _row(write_id: str, data: str, stored_at: float, path: str = "p.log") -> Row:
    digest = content_hash("web", "web_op", path, data)
    return Row(write_id, "web", "web_op", path, data, digest, len(data.encode()), stored_at)


def _store(
    tmp_path: os.PathLike[str], max_bytes: int = 1000, max_age_s: float = DAY_S
) -> SinkStore:
    return SinkStore(os.path.join(tmp_path, "mem"), Retention(max_bytes, max_age_s))


def _commit(store: SinkStore, rows: list[Row], now: float) -> None:
    store.applied(store.commit(rows, now))


def _write(task_id: str, path: str, data: str) -> Task:
    fields = (("ID", task_id), ("FROM", "web"), ("TYPE", "web_op"), ("PATH", path), ("DATA", data))
    return Task("write", "MEMORY", "ACK", None, fields)


def test_retention_keeps_max_bytes_and_deletes_the_oldest_past_it(
    tmp_path: os.PathLike[str],
) -> None:
    """M-6: at N stored bytes nothing is deleted; at N+1 the oldest writes go first."""
    store = _store(tmp_path, max_bytes=10)
    try:
        _commit(store, [_row("a", "12345", 0.0), _row("b", "12345", 1.0)], 2.0)
        assert (store.count, store.bytes, store.ids) == (2, 10, {"a", "b"})
        _commit(store, [_row("c", "1", 3.0)], 4.0)
        assert (store.count, store.bytes, store.ids) == (2, 6, {"b", "c"})
        assert store.totals() == (2, 6)
    finally:
        store.close()


def test_retention_keeps_a_write_of_max_age_and_deletes_an_older_one(
    tmp_path: os.PathLike[str],
) -> None:
    """M-6: a write exactly max_age_s old is kept; one a moment older is deleted."""
    store = _store(tmp_path, max_age_s=DAY_S)
    try:
        _commit(store, [_row("old", "x", 100.0), _row("edge", "y", 100.5)], 100.5)
        store.applied(store.sweep(100.5 + DAY_S))
        assert store.ids == {"edge"}
        store.applied(store.sweep(100.5 + DAY_S + 0.25))
        assert (store.ids, store.count, store.bytes) == (set(), 0, 0)
    finally:
        store.close()


def test_a_failed_commit_stores_nothing_of_its_batch(tmp_path: os.PathLike[str]) -> None:
    """M-2: ID and DATA are one atomic step; a batch that fails leaves no row behind."""
    store = _store(tmp_path)
    _fail_inserts_of(store.directory, "boom")
    try:
        with pytest.raises(sqlite3.IntegrityError):
            store.commit([_row("fine", "kept?", 1.0), _row("boom", "x", 1.0)], 1.0)
        assert (store.ids, store.totals()) == (set(), (0, 0))
    finally:
        store.close()


def _fail_inserts_of(directory: str, write_id: str) -> None:
    db = sqlite3.connect(os.path.join(directory, STORE_FILE))
    with db:
        db.execute(
            f'CREATE TRIGGER "fail_{write_id}" BEFORE INSERT ON writes '
            f"WHEN NEW.id = '{write_id}' "
            "BEGIN SELECT RAISE(ABORT, 'disk gone'); END"
        )
    db.close()


def _allow_inserts_of(directory: str, write_id: str) -> None:
    db = sqlite3.connect(os.path.join(directory, STORE_FILE))
    with db:
        db.execute(f'DROP TRIGGER "fail_{write_id}"')
    db.close()


async def _pipelined(sink: MemorySink, tasks: list[Task]) -> list[Reply]:
    """``tasks`` sent in one write on an in-process connection, as the embedded sink is used."""
    ours, theirs = trio.socket.socketpair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sink.serve_connection, trio.SocketStream(theirs), Peer("test"))
        async with open_stream_client(trio.SocketStream(ours)) as client:
            replies = await client.call_many(list(tasks), timeout_s=10)
    return replies


async def test_pipelined_writes_share_transactions_and_all_are_acknowledged(
    tmp_path: os.PathLike[str],
) -> None:
    """M-2: writes read together from a connection are committed together, in order."""
    writes = 200
    directory = os.path.join(tmp_path, "mem")
    async with open_memory_sink(directory, MemoryConfig()) as sink:
        tasks = [_write(f"g-{n}", "group.log", str(n)) for n in range(writes)]
        replies = await _pipelined(sink, tasks)
        commits = sink.commits.commits
        assert sink.store.count == writes
    assert {r.get("DATA") for r in replies} == {"stored"}
    assert commits * 2 <= writes, commits
    assert sink_text(directory, "group.log") == "".join(f"{n}\n" for n in range(writes))


async def test_no_write_of_a_failed_commit_is_acknowledged_and_a_resend_stores_each_once(
    tmp_path: os.PathLike[str],
) -> None:
    """M-2: a commit that fails sends no OK for its writes (the connection closes); sent
    again, every write is stored exactly once."""
    directory = os.path.join(tmp_path, "mem")
    tasks = [_write(f"f-{n}", "f.log", str(n)) for n in range(5)]
    async with open_memory_sink(directory, MemoryConfig()) as sink:
        _fail_inserts_of(directory, "f-3")
        with trio.fail_after(10), pytest.raises(ExceptionGroup) as failed:
            await _pipelined(sink, tasks)
        assert sink.commits.failed_commits >= 1
        assert "f-3" not in sink.store.ids
        _allow_inserts_of(directory, "f-3")
        replies = await _pipelined(sink, tasks)
    assert failed.group_contains(ClientClosed)
    assert all(r.status is Status.OK for r in replies)
    assert sink_text(directory, "f.log") == "0\n1\n2\n3\n4\n"


class _ThreadNotingStore(SinkStore):
    """A real store that notes the thread each commit ran in."""

    def __init__(self, directory: str, retention: Retention) -> None:
        super().__init__(directory, retention)
        self.threads: list[int] = []

    def commit(self, rows: list[Row], now: float) -> Committed:
        self.threads.append(threading.get_ident())
        return super().commit(rows, now)


@pytest.mark.parametrize(("rows", "on_loop"), [(INLINE_ROWS, True), (INLINE_ROWS + 1, False)])
async def test_a_batch_of_up_to_inline_rows_is_committed_on_the_loop_a_larger_one_in_a_thread(
    tmp_path: os.PathLike[str], rows: int, on_loop: bool
) -> None:
    """A small batch costs less committed on the event loop than the worker thread's hop
    (commit.py); a large one still runs beside the loop. Either is durable when it returns."""
    store = _ThreadNotingStore(os.path.join(tmp_path, "mem"), Retention(10**9, DAY_S))
    commits = GroupCommit(store)
    for n in range(rows):
        assert commits.stage("web", "web_op", "p.log", str(n), f"w-{n}")
    with trio.fail_after(10):
        await commits.wait_committed()
    assert len(store.threads) == 1
    assert (store.threads[0] == threading.get_ident()) is on_loop
    assert (store.totals()[0], commits.commits) == (rows, 1)
    store.close()


async def test_writes_two_connections_bring_in_one_tick_share_one_commit(
    tmp_path: os.PathLike[str],
) -> None:
    """The first connection to wait for a commit lets the scheduler pass once, so what the
    other stages in the same tick joins its transaction (as the outbox's group commit)."""
    directory = os.path.join(tmp_path, "mem")
    async with open_memory_sink(directory, MemoryConfig()) as sink:
        clients, servers = zip(*(socket.socketpair() for _ in range(2)), strict=True)
        for n, client in enumerate(clients):  # both writes wait in their sockets
            client.sendall(serialize(_write(f"t-{n}", "tick.log", str(n))))
            client.shutdown(socket.SHUT_WR)
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                for server in servers:
                    stream = trio.SocketStream(trio.socket.from_stdlib_socket(server))
                    nursery.start_soon(sink.serve_connection, stream, Peer("test"))
        replies = [client.recv(4096) for client in clients]
        for client in clients:
            client.close()
        commits = sink.commits.commits
    assert all(b"STATUS OK" in reply for reply in replies), replies
    assert commits == 1
    assert sink_text(directory, "tick.log") in ("0\n1\n", "1\n0\n")


@pytest.mark.parametrize(("size", "ok"), [(64, True), (65, False)])
async def test_data_larger_than_retention_max_bytes_is_too_large(
    tmp_path: os.PathLike[str], size: int, ok: bool
) -> None:
    """M-6: DATA of retention_max_bytes is stored; one byte more is FAIL too_large (no
    retention could keep it)."""
    memory = MemoryConfig(retention_max_bytes=64)
    async with open_memory_sink(os.path.join(tmp_path, "mem"), memory) as sink:
        (reply,) = await _pipelined(sink, [_write("big-1", "big.log", "x" * size)])
        stored = sink.store.count
    assert (reply.status is Status.OK, stored) == (ok, int(ok))
    if not ok:
        assert (reply.get("ERROR") or "").partition(":")[0] == ErrorCode.TOO_LARGE


@pytest.mark.parametrize("count", [LOOKUP_IDS, LOOKUP_IDS + 1])
def test_stored_hashes_finds_every_stored_id_of_a_chunk_in_parts_of_lookup_ids(
    tmp_path: os.PathLike[str], count: int
) -> None:
    """M-2, M-5: a chunk's IDs are looked up together (LOOKUP_IDS per query, at N and N+1);
    each stored ID maps to its content hash and an ID not stored is absent."""
    store = _store(tmp_path, max_bytes=1 << 20)
    try:
        rows = [_row(f"h-{n}", str(n), 1.0) for n in range(count)]
        _commit(store, rows, 1.0)
        found = store.stored_hashes([r.id for r in rows] + ["never"])
        assert found == {r.id: r.hash for r in rows}
    finally:
        store.close()


def test_retention_max_bytes_bounds_the_store_file_on_disk(tmp_path: os.PathLike[str]) -> None:
    """Issue 21 §5: the store used about 3x its DATA on disk (hash, indexes, free pages kept).
    Filled far past retention_max_bytes, its file (checkpointed) stays within the bound plus
    the empty store's schema pages, and the newest writes are the ones kept."""
    limit = 256 * 1024
    store = _store(tmp_path, max_bytes=limit)
    record = '{"op":"fetch","outcome":"OK","duration_ms":12.5,"id":"%06d"}' + " " * 240
    try:
        for batch in range(40):  # ~3 MiB of records, twelve times the bound
            rows = [_row(f"w-{batch}-{n}", record % n, float(batch)) for n in range(100)]
            _commit(store, rows, float(batch))
    finally:
        store.close()
    path = os.path.join(tmp_path, "mem", STORE_FILE)
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
        # The empty store's pages: sqlite_master, a root per table and index, a pointer map.
        fixed_pages = db.execute("SELECT COUNT(*) + 2 FROM sqlite_master WHERE rootpage > 0")
        fixed_pages = fixed_pages.fetchone()[0]
        newest = db.execute("SELECT id FROM writes ORDER BY seq DESC LIMIT 1").fetchone()
    assert os.path.getsize(path) <= limit + fixed_pages * page_size
    assert newest == ("w-39-99",)
