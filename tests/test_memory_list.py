"""Browsing the memory store (SPEC M-9): ``REQ:list IN:MEMORY OUT:PATHS`` at the reference
Memory Specialist, relayed by the daemon like ``REQ:read`` (M-3), and what an older Memory
Specialist without it answers through the daemon."""

from __future__ import annotations

import os
from functools import partial

import pytest
import trio

from csp_web.client.trio_client import open_client
from csp_web.config import Config, SocketConfig
from csp_web.core.api.context import Peer
from csp_web.core.api.errors import FieldError
from csp_web.core.api.replies import fail_reply
from csp_web.core.transports.unix import Lease, serve_unix
from csp_web.sink.listing import MAX_RESULTS_CAP, line_bytes, list_page, prefix_end
from csp_web.sink.store import Retention, Row, SinkStore, content_hash
from protocol import NEED_DATA, Connection, ErrorCode, Reply, Status, Task, serialize
from tests.conftest import Daemon, Sink, start_daemon

NOTES = ("notes/b.md", "notes/a.md", "notes-old/c.md", "other/d.md")


def _write(task_id: str, path: str, data: str = "x") -> Task:
    fields = (("ID", task_id), ("FROM", "web"), ("TYPE", "note"), ("PATH", path), ("DATA", data))
    return Task("write", "MEMORY", "ACK", None, fields)


def _list(task_id: str, *fields: tuple[str, str]) -> Task:
    return Task("list", "MEMORY", "PATHS", None, (("ID", task_id), *fields))


async def _call(socket_path: str, *tasks: Task) -> list[Reply]:
    async with open_client(socket_path) as client:
        return [await client.call(task, timeout_s=20) for task in tasks]


async def _store(socket_path: str, paths: tuple[str, ...]) -> None:
    writes = [_write(f"n-{n}", path) for n, path in enumerate(paths)]
    assert {reply.status for reply in await _call(socket_path, *writes)} == {Status.OK}


def _sink_socket(config: Config) -> str:
    assert config.memory.socket_path is not None
    return config.memory.socket_path


def _ok(task_id: str, *paths: str, next_start: str | None = None) -> Reply:
    fields = [("ID", task_id), ("SCOPE", "[memory]"), ("DATA", f"paths:{len(paths)}")]
    fields += [("PATH", path) for path in paths]
    fields += [("NEXT_START", next_start)] if next_start is not None else []
    return Reply(Status.OK, tuple(fields))


def _error(reply: Reply) -> str:
    assert reply.status is Status.FAIL, reply
    return reply.get("ERROR") or ""


async def test_list_answers_each_path_under_the_prefix_once_in_order(
    config: Config, sink: Sink
) -> None:
    """M-9: a path written twice is listed once; PREFIX is the start of the path's text, so
    ``notes`` takes ``notes-old/`` too and ``notes/`` only the folder; none gives all."""
    socket_path = _sink_socket(config)
    await _store(socket_path, (*NOTES, "notes/b.md"))
    folder, start, every = await _call(
        socket_path,
        _list("l-1", ("PREFIX", "notes/")),
        _list("l-2", ("PREFIX", "notes")),
        _list("l-3"),
    )
    assert folder == _ok("l-1", "notes/a.md", "notes/b.md")
    assert start == _ok("l-2", "notes-old/c.md", "notes/a.md", "notes/b.md")
    assert every == _ok("l-3", *sorted(NOTES))


async def test_a_page_of_max_results_says_next_start_only_when_more_remain(
    config: Config, sink: Sink
) -> None:
    """M-9: with N paths, MAX_RESULTS N is one page; N-1 leaves one, named by NEXT_START,
    which as START gives the rest."""
    socket_path = _sink_socket(config)
    await _store(socket_path, ("p/1", "p/2", "p/3"))
    whole, first, rest = await _call(
        socket_path,
        _list("m-1", ("PREFIX", "p/"), ("MAX_RESULTS", "3")),
        _list("m-2", ("PREFIX", "p/"), ("MAX_RESULTS", "2")),
        _list("m-3", ("PREFIX", "p/"), ("MAX_RESULTS", "2"), ("START", "p/3")),
    )
    assert whole == _ok("m-1", "p/1", "p/2", "p/3")
    assert first == _ok("m-2", "p/1", "p/2", next_start="p/3")
    assert rest == _ok("m-3", "p/3")


async def test_max_results_is_taken_at_its_cap_and_refused_past_it(
    config: Config, sink: Sink
) -> None:
    socket_path = _sink_socket(config)
    await _store(socket_path, ("p/1",))
    at_cap, past, zero = await _call(
        socket_path,
        _list("c-1", ("MAX_RESULTS", str(MAX_RESULTS_CAP))),
        _list("c-2", ("MAX_RESULTS", str(MAX_RESULTS_CAP + 1))),
        _list("c-3", ("MAX_RESULTS", "0")),
    )
    assert at_cap == _ok("c-1", "p/1")
    assert _error(past) == f"invalid_field:MAX_RESULTS above {MAX_RESULTS_CAP}"
    assert _error(zero) == "invalid_field:MAX_RESULTS below 1"


@pytest.mark.parametrize(
    ("prefix", "error"),
    [
        ("../etc", "invalid_field:PREFIX must be relative without '..'"),
        ("notes/../audit/", "invalid_field:PREFIX must be relative without '..'"),
        ("/etc/passwd", "invalid_field:PREFIX must be relative without '..'"),
        ("notes//a", "invalid_field:PREFIX must be relative without '..'"),
        ("./notes", "invalid_field:PREFIX must be relative without '..'"),
        ("/", "invalid_field:PREFIX must be relative without '..'"),
        ("notes/.hidden", "invalid_field:PREFIX parts may not start with '.'"),
        ("notes\x00", "invalid_field:PREFIX holds a control character"),
        ("\x1b[2J", "invalid_field:PREFIX holds a control character"),
        ("notes\x85", "invalid_field:PREFIX holds a control character"),
        ("notes/\u202egnp.exe", "invalid_field:PREFIX holds a control character"),
        ("notes\u2028", "invalid_field:PREFIX holds a control character"),
        ("n" * 1025, "invalid_field:PREFIX over 1024 chars"),
        ("n" * 1024, "not_found:no writes under PREFIX"),
        ("nothing/", "not_found:no writes under PREFIX"),
    ],
)
async def test_a_hostile_prefix_is_refused_as_invalid_field(
    config: Config, sink: Sink, prefix: str, error: str
) -> None:
    """M-9, D-3: traversal, control characters (sent as JSON escapes: they cannot stand raw)
    and a PREFIX past the path cap are invalid_field; a valid one with nothing under it,
    the cap's own length included, is not_found."""
    socket_path = _sink_socket(config)
    await _store(socket_path, NOTES)
    (reply,) = await _call(socket_path, _list("h-1", ("PREFIX", prefix)))
    assert reply.id == "h-1"
    assert _error(reply) == error


async def test_start_must_have_a_paths_form_but_may_name_one_with_control_characters(
    config: Config, sink: Sink
) -> None:
    """M-9: NEXT_START names a stored path as it is, so START takes what a write's PATH
    may hold, and nothing a write's PATH may not."""
    socket_path = _sink_socket(config)
    await _store(socket_path, ("odd/a", "odd/b\x1bc", "odd/d"))
    first, second, traversal = await _call(
        socket_path,
        _list("s-1", ("PREFIX", "odd/"), ("MAX_RESULTS", "1")),
        _list("s-2", ("PREFIX", "odd/"), ("START", "odd/b\x1bc")),
        _list("s-3", ("START", "../odd")),
    )
    assert first == _ok("s-1", "odd/a", next_start="odd/b\x1bc")
    assert second == _ok("s-2", "odd/b\x1bc", "odd/d")
    assert _error(traversal) == "invalid_field:START must be relative without '..'"


async def test_an_empty_store_and_a_start_past_the_end_are_not_found(
    config: Config, sink: Sink
) -> None:
    socket_path = _sink_socket(config)
    (empty,) = await _call(socket_path, _list("e-1"))
    await _store(socket_path, ("p/1",))
    (past,) = await _call(socket_path, _list("e-2", ("START", "p/2")))
    assert _error(empty) == _error(past) == "not_found:no writes under PREFIX"


# --- pages and prefixes, on a store directly -----------------------------------------------


@pytest.fixture
def store(tmp_path: os.PathLike[str]) -> SinkStore:
    opened = SinkStore(os.fspath(tmp_path), Retention(1 << 30, 1e9))
    rows = [
        Row(f"r-{n}", "web", "note", path, "x", content_hash("web", "note", path, "x"), 1, 0.0)
        for n, path in enumerate(("a", "b", "c", "a\U0010ffffz", "a\U0010ffff"))
    ]
    opened.applied(opened.commit(rows, 1.0))
    return opened


def test_a_page_ends_at_its_byte_budget_and_not_one_byte_before(store: SinkStore) -> None:
    """M-9: PATH lines up to ``max_bytes`` fit (N), one byte less leaves the last out (N+1
    too many); one path is always given, whatever its size."""
    cost = line_bytes("b")
    assert cost == len('PATH "b"\n')  # bounded by the JSON-quoted form
    fits = list_page(store, "", "b", 10, max_bytes=2 * cost)
    over = list_page(store, "", "b", 10, max_bytes=2 * cost - 1)
    tiny = list_page(store, "", "b", 10, max_bytes=1)
    assert (fits.paths, fits.next_start) == (("b", "c"), None)
    assert (over.paths, over.next_start) == (("b",), "c")
    assert (tiny.paths, tiny.next_start) == (("b",), "c")


def test_a_prefix_ending_in_the_last_code_point_lists_exactly_its_paths(
    store: SinkStore,
) -> None:
    page = list_page(store, "a\U0010ffff", None, 10)
    assert page.paths == ("a\U0010ffff", "a\U0010ffffz")
    assert list_page(store, "", None, 10).paths == ("a", "a\U0010ffff", "a\U0010ffffz", "b", "c")


@pytest.mark.parametrize(
    ("prefix", "end"),
    [
        ("", None),
        ("ab", "ac"),
        ("notes/", "notes0"),
        ("a\U0010ffff", "b"),
        ("\U0010ffff\U0010ffff", None),
        ("a\ud7ff", "a\ue000"),
    ],
)
def test_a_prefix_end_is_the_least_string_above_all_its_paths(prefix: str, end: str | None) -> None:
    assert prefix_end(prefix) == end


def test_an_unopened_store_lists_nothing(tmp_path: os.PathLike[str]) -> None:
    store = SinkStore(os.fspath(tmp_path), Retention(1 << 30, 1e9))
    store.ready = False  # as a store opened on a full disk (SPEC O-6) is until set up
    try:
        assert store.paths("", None, 10) == []
    finally:
        store.close()


# --- through the daemon ------------------------------------------------------------------


async def test_a_relayed_list_answers_under_the_clients_own_id(daemon: Daemon, sink: Sink) -> None:
    """M-3, M-9: a client's writes and its listing of them, all through the daemon."""
    writes = [_write(f"client-{n}", f"mine/{n}.md") for n in range(3)]
    await _call(daemon.socket_path, *writes)
    (reply,) = await _call(
        daemon.socket_path, _list("client-l", ("PREFIX", "mine/"), ("MAX_RESULTS", "2"))
    )
    assert reply == _ok("client-l", "mine/0.md", "mine/1.md", next_start="mine/2.md")


async def test_a_relayed_hostile_prefix_gets_the_memory_specialists_invalid_field(
    daemon: Daemon, sink: Sink
) -> None:
    (reply,) = await _call(daemon.socket_path, _list("hostile", ("PREFIX", "../../etc")))
    assert reply.id == "hostile"
    assert _error(reply) == "invalid_field:PREFIX must be relative without '..'"


async def _older_sink(stream: trio.SocketStream, peer: Peer, lease: Lease) -> None:
    """A Memory Specialist from before REQ:list: every frame is answered as the reference
    one answered an op it did not know (write and read are not needed here)."""
    codec = Connection()
    async with stream:
        while True:
            event = codec.next_event()
            if event is NEED_DATA:
                data = await stream.receive_some(65536)
                if not data:
                    return
                codec.receive_data(data)
            elif isinstance(event, Task):
                refusal = fail_reply(FieldError(ErrorCode.UNKNOWN_OP, event.req), event.id)
                await stream.send_all(serialize(refusal))


async def test_an_older_memory_specialist_without_list_is_named_in_the_unknown_op(
    nursery: trio.Nursery, config: Config, sock_dir: str
) -> None:
    """M-9: its FAIL unknown_op:list, relayed as it was, read as the daemon's own refusal;
    now the daemon says whose it is, under SCOPE [memory]."""
    memory_socket = _sink_socket(config)
    serve = partial(serve_unix, memory_socket, SocketConfig(), _older_sink, handler_nursery=nursery)
    await nursery.start(serve)
    daemon = await start_daemon(nursery, config, os.path.join(sock_dir, "csp.sock"))
    (reply,) = await _call(daemon.socket_path, _list("old-1", ("PREFIX", "notes/")))
    assert reply == Reply(
        Status.FAIL,
        (
            ("ID", "old-1"),
            ("SCOPE", "[memory]"),
            ("DATA", "none"),
            (
                "ERROR",
                f"unknown_op:list is not offered by the Memory Specialist at {memory_socket}",
            ),
        ),
    )
