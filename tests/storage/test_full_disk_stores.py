"""Each store the daemon writes, on a full disk: the Memory Specialist answers
``storage_full:memory`` (and stores the same writes once space returns), the cache keeps
answering from memory, a media file or the node store is refused with ``storage_full`` and
leaves nothing half-written behind."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
import trio

from csp_web.client.trio_client import open_stream_client
from csp_web.config import MemoryConfig
from csp_web.core.api.context import Peer
from csp_web.core.api.errors import StorageFull
from csp_web.core.daemon.statedir import hold_state_dir, served_socket
from csp_web.infra.cache import open_cache
from csp_web.infra.media import MediaStore
from csp_web.infra.workspace_paths import check_path
from csp_web.sink.server import MemorySink, open_memory_sink
from protocol import Reply, Status, Task
from specialists.node.results import MEDIA_EXTENSIONS, save_capture
from specialists.node.store import NodeStore
from specialists.node.wire import Hello, MediaInfo
from specialists.web.docs.workspace import write_file
from tests.storage.conftest import Tmpfs


def _write(task_id: str) -> Task:
    fields = (("ID", task_id), ("FROM", "web"), ("TYPE", "web_op"), ("PATH", "p.log"))
    return Task("write", "MEMORY", "ACK", None, (*fields, ("DATA", "x" * 2000)))


async def _send(sink: MemorySink, tasks: list[Task]) -> list[Reply]:
    ours, theirs = trio.socket.socketpair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sink.serve_connection, trio.SocketStream(theirs), Peer("test"))
        async with open_stream_client(trio.SocketStream(ours)) as client:
            return await client.call_many(list(tasks), timeout_s=10)


async def test_the_memory_sink_on_a_full_disk_answers_storage_full_then_stores_the_retry(
    tmpfs: Tmpfs,
) -> None:
    """SPEC O-6: each write a full disk keeps out is answered FAIL storage_full:memory (a
    code the outbox retries), never OK; the connection stays open; the same writes sent
    again once space returns are stored."""
    async with open_memory_sink(os.path.join(tmpfs.path, "mem"), MemoryConfig()) as sink:
        assert [r.status for r in await _send(sink, [_write("first")])] == [Status.OK]
        tmpfs.fill()
        writes = [_write(f"w{n}") for n in range(200)]
        refused = await _send(sink, writes)
        assert {(r.status, r.get("ERROR")) for r in refused} == {
            (Status.FAIL, "storage_full:memory")
        }
        assert sink.commits.storage_full
        assert sink.store.ids == {"first"}
        tmpfs.free()
        stored = await _send(sink, writes)
        assert {(r.status, r.get("DATA")) for r in stored} == {(Status.OK, "stored")}
        assert not sink.commits.storage_full
        assert sink.store.ids == {"first"} | {f"w{n}" for n in range(200)}


async def test_a_cache_on_a_full_disk_keeps_answering_from_memory_and_writes_again_later(
    tmpfs: Tmpfs,
) -> None:
    """The cache is an optimisation: a write that finds the disk full is skipped (no
    error for the op that made the value), the value still served from the memory tier."""
    directory = os.path.join(tmpfs.path, "cache")
    async with open_cache(directory, size_limit_bytes=1 << 30) as cache:
        tmpfs.fill()
        big = "y" * 300_000  # past diskcache's inline size: a file of its own
        for n in range(20):
            await cache.set(
                "fetch", n, {"page": n, "body": big if n == 0 else "z" * 4000}, ttl_s=60
            )
        assert cache.storage_full
        assert await cache.get("fetch", 19) == {"page": 19, "body": "z" * 4000}
        tmpfs.free()
        await cache.set("fetch", "after", "v", ttl_s=60)
        assert not cache.storage_full
        cache._memory.drop_namespace("fetch")
        assert await cache.get("fetch", "after") == "v"


async def test_a_cache_opened_on_a_full_disk_runs_on_memory_until_space_returns(
    tmpfs: Tmpfs,
) -> None:
    tmpfs.fill()
    async with open_cache(os.path.join(tmpfs.path, "cache"), size_limit_bytes=1 << 30) as cache:
        assert cache.storage_full
        await cache.set("fetch", "u", "page", ttl_s=60)
        assert await cache.get("fetch", "u") == "page"
        tmpfs.free()
        await cache.set("fetch", "v", "page", ttl_s=60)
        cache._memory.drop_namespace("fetch")
        assert await cache.get("fetch", "v") == "page"
        assert not cache.storage_full


def test_a_screenshot_on_a_full_disk_is_storage_full_and_leaves_no_file(tmpfs: Tmpfs) -> None:
    folder = os.path.join(tmpfs.path, "media", "browser")
    media = MediaStore(folder, max_bytes=1 << 30, max_age_s=3600.0)
    media.save_sync("shot", b"png")
    tmpfs.fill()
    with pytest.raises(StorageFull) as raised:
        media.save_sync("shot", b"\x89PNG" * 100_000)
    assert (raised.value.wire_text, media.storage_full) == ("storage_full:media", True)
    assert [name for name in os.listdir(folder) if name.endswith(".tmp")] == []
    tmpfs.free()
    assert os.path.exists(media.save_sync("shot", b"png"))
    assert not media.storage_full


def test_a_node_capture_on_a_full_disk_is_storage_full_and_leaves_no_file(tmpfs: Tmpfs) -> None:
    folder = os.path.join(tmpfs.path, "media")
    info = MediaInfo("0" * 64, 400_000, "image/png")
    media = MediaStore(folder, max_bytes=1 << 30, max_age_s=3600.0, extensions=MEDIA_EXTENSIONS)
    tmpfs.fill()
    with pytest.raises(StorageFull) as raised:
        save_capture(media, "lab1", "t-1", info, b"\x89PNG" * 100_000)
    assert (raised.value.wire_text, media.storage_full) == ("storage_full:media", True)
    assert os.listdir(folder) == []


def test_write_file_on_a_full_disk_is_storage_full_and_leaves_path_as_it_was(
    tmpfs: Tmpfs,
) -> None:
    """web write_file into a workspace root on a full disk: storage_full:workspace, the old
    file kept whole and no temporary file left behind."""
    workspace = os.path.join(tmpfs.path, "ws")
    os.mkdir(workspace)
    path = Path(workspace, "notes.md")
    path.write_text("old")
    target = check_path([workspace], str(path), masked=(), user="write_file")
    tmpfs.fill()
    for overwrite in (True, False):
        name = path if overwrite else path.with_name("new.md")
        place = replace(target, name=name.name)
        with pytest.raises(StorageFull) as raised:
            write_file(place, b"x" * 200_000, max_bytes=1 << 20, overwrite=overwrite)
        assert raised.value.wire_text == "storage_full:workspace"
    assert sorted(os.listdir(workspace)) == ["notes.md"]
    assert path.read_text() == "old"


def test_pairing_on_a_full_disk_is_storage_full_and_pairs_nothing(tmpfs: Tmpfs) -> None:
    """The node store (state) is written whole: a full disk refuses the change, the file
    and what the daemon holds stay as they were."""
    folder = os.path.join(tmpfs.path, "nodes")
    store = NodeStore(folder, max_nodes=4)
    store.add(Hello("lab1", "linux", ("screen",)))
    path = Path(folder, "nodes.json")
    before = path.read_text()
    tmpfs.fill()
    with pytest.raises(StorageFull) as raised:
        store.add(Hello("lab2", "linux", ("screen",)))
    with pytest.raises(StorageFull):
        store.remove("lab1")
    assert raised.value.wire_text == "storage_full:state"
    assert (sorted(store.nodes), store.storage_full) == (["lab1"], True)
    assert path.read_text() == before
    assert [name for name in os.listdir(folder) if name.endswith(".tmp")] == []
    tmpfs.free()
    store.add(Hello("lab2", "linux", ("screen",)))
    assert sorted(NodeStore(folder, max_nodes=4).nodes) == ["lab1", "lab2"]


def test_a_full_disk_leaves_the_lock_file_empty_and_the_daemon_starts(
    tmpfs: Tmpfs, caplog: pytest.LogCaptureFixture
) -> None:
    """SPEC O-6: the lock file only names its holder (its pid, its socket): on a full disk it
    stays empty and the lock is held all the same; no client finds a socket there."""
    state_dir = os.path.join(tmpfs.path, "state")
    os.mkdir(state_dir, 0o700)
    tmpfs.fill()
    with hold_state_dir(state_dir, socket_path="/run/csp.sock") as path:
        assert Path(path).read_text() == ""
        assert served_socket(state_dir) is None
    assert "disk full, the lock file names no pid" in caplog.text
