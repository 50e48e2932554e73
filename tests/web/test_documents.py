"""Documents end to end (issue 14): several URLs per fetch, fileKeys, the announcement board,
the File Cabinet through the reference Memory Specialist, and write_file under a workspace
root. Pages come from a real local HTTPS origin; memory is the embedded reference sink."""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import trio

from csp_web.app.memory_path import open_memory_link, outbox_path
from csp_web.config import Config, with_section
from csp_web.core.api.context import Peer
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.memory.outbox import open_outbox
from protocol import Reply, Status, Task
from specialists.tool.config import tool_section
from specialists.tool.exec.config import ExecConfig
from specialists.web import WEB
from specialists.web.config import web_section
from specialists.web.docs import workspace as workspace_module
from specialists.web.docs.config import BoardConfig, CabinetConfig, DocsConfig
from specialists.web.pages.filekeys import file_key
from specialists.web.pages.loading import Page
from specialists.web.services import WebServices
from tests.conftest import with_memory
from tests.harness import build_dispatcher
from tests.net._origin import Origin
from tests.net._origin import Reply as OriginReply
from tests.web.pages_support import ARTICLE, MARKDOWN, TITLE, WAIT_S, serve

PEER = Peer("docs", 1000, 7)


def docs_config(config: Config, workspace: Path, **docs: Any) -> Config:
    exec_config = replace(ExecConfig(), workspace_roots=(str(workspace),))
    web = replace(web_section(config), docs=replace(DocsConfig(), **docs))
    return with_section(
        with_section(config, "web", web), "tool", replace(tool_section(config), exec=exec_config)
    )


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    return path


@pytest.fixture
async def docs(web_config: Config, web: WebServices, workspace: Path) -> AsyncIterator[Dispatcher]:
    """Every web op, memory through the embedded reference sink, exec's root ``workspace``."""
    config = docs_config(web_config, workspace)
    web.config = web_section(config)
    async with (
        open_memory_link(config) as (link, _sink),
        open_outbox(config.outbox_path, config.outbox, config.memory, link=link) as outbox,
    ):
        yield build_dispatcher(config, outbox_path(config, outbox, link), WEB.ops, web)


async def ask(
    dispatcher: Dispatcher, req: str, out: str, *fields: tuple[str, str], peer: Peer = PEER
) -> Reply:
    with trio.fail_after(WAIT_S):
        return await dispatcher.run(Task(req, "WEB", out, None, tuple(fields)), peer)


def article_key(url: str) -> str:
    return file_key(Page(url, 200, "text/html", "html", markdown=MARKDOWN))


# --- many at once -------------------------------------------------------------------------


async def test_several_urls_are_fetched_each_with_its_own_outcome(
    docs: Dispatcher, origin: Origin
) -> None:
    """R-3, R-4: one FETCH and CONTENT line per page, FETCH_ERROR naming the failure, PARTIAL
    with ERROR naming it too (R-2); each FETCH line carries what its page declares."""
    one = serve(origin, "/one", ARTICLE)
    two = serve(origin, "/two", "plain words here", "text/plain")
    missing = origin.url("origin.test", "/status/404")
    reply = await ask(docs, "fetch", "CONTENT", ("URL", one), ("URL", missing), ("URL", two))
    two_key = file_key(Page(two, 200, "text/plain", "text", text="plain words here"))
    title = json.dumps(TITLE)
    assert reply == Reply(
        Status.PARTIAL,
        (
            ("SCOPE", "[origin.test]"),
            ("DATA", "fetched:2,failed:1"),
            ("ERROR", "fetch_failed:http_404"),
            (
                "FETCH",
                f"{article_key(one)} {one} chars:{len(MARKDOWN)} "
                f"tokens:{math.ceil(len(MARKDOWN) / 4)} truncated:false cached:false "
                f'description:"How tides shape the coast." {title}',
            ),
            ("CONTENT", f"{article_key(one)}:{json.dumps(MARKDOWN)}"),
            ("FETCH", f'{two_key} {two} chars:16 tokens:4 truncated:false cached:false ""'),
            ("CONTENT", f'{two_key}:"plain words here"'),
            ("FETCH_ERROR", f"{missing} fetch_failed:http_404"),
            ("CITE", f"{one} {title}"),
            ("CITE", f'{two} ""'),
        ),
    )


async def test_a_slow_url_does_not_hold_up_the_others_within_the_deadline(
    docs: Dispatcher, origin: Origin
) -> None:
    """The URLs load concurrently: the first never finishes, the second is still answered
    inside the task's deadline (one after the other, the first would spend it all)."""
    slow = origin.url("origin.test", "/drip")
    fast = serve(origin, "/fast", ARTICLE)
    reply = await ask(
        docs, "fetch", "CONTENT", ("URL", slow), ("URL", fast), ("TIMEOUT_MS", "1500")
    )
    assert reply.status is Status.PARTIAL
    assert reply.get("DATA") == "fetched:1,failed:1"
    assert reply.get("FETCH_ERROR") == f"{slow} fetch_failed:timeout"


async def test_every_url_failing_fails_with_the_first_code_and_each_error(
    docs: Dispatcher, origin: Origin
) -> None:
    first, second = (origin.url("origin.test", f"/status/{n}") for n in (404, 500))
    reply = await ask(docs, "fetch", "CONTENT", ("URL", first), ("URL", second))
    assert reply == Reply(
        Status.FAIL,
        (
            ("SCOPE", "[]"),
            ("DATA", "none"),
            ("ERROR", "fetch_failed:http_404"),
            ("FETCH_ERROR", f"{first} fetch_failed:http_404"),
            ("FETCH_ERROR", f"{second} fetch_failed:http_500"),
        ),
    )


async def test_a_page_past_max_chars_is_cut_and_marked_truncated(
    docs: Dispatcher, origin: Origin
) -> None:
    one, two = serve(origin, "/one", ARTICLE), serve(origin, "/two", "short", "text/plain")
    reply = await ask(docs, "fetch", "CONTENT", ("URL", one), ("URL", two), ("MAX_CHARS", "10"))
    assert reply.status is Status.PARTIAL
    fetches = reply.get_all("FETCH")
    assert [line.split()[4] for line in fetches] == ["truncated:true", "truncated:false"]
    assert reply.get_all("CONTENT")[0] == f"{article_key(one)}:{json.dumps(MARKDOWN[:10])}"


async def test_url_count_is_capped_at_max_urls(docs: Dispatcher, origin: Origin) -> None:
    """N and N+1: five URL fields are fetched, six are invalid_field."""
    urls = [serve(origin, f"/p{n}", f"page {n} text", "text/plain") for n in range(6)]
    five = await ask(docs, "fetch", "CONTENT", *(("URL", url) for url in urls[:5]))
    six = await ask(docs, "fetch", "CONTENT", *(("URL", url) for url in urls))
    assert (five.status, five.get("DATA")) == (Status.OK, "fetched:5,failed:0")
    assert six.get("ERROR") == "invalid_field:more than 5 URL fields"


async def test_start_with_several_urls_or_url_with_file_key_is_refused(
    docs: Dispatcher, origin: Origin
) -> None:
    one, two = serve(origin, "/one", ARTICLE), serve(origin, "/two", ARTICLE)
    paged = await ask(docs, "fetch", "CONTENT", ("URL", one), ("URL", two), ("START", "5"))
    both = await ask(docs, "fetch", "CONTENT", ("URL", one), ("FILE_KEY", article_key(one)))
    assert paged.get("ERROR") == "invalid_field:START pages one source: use its FILE_KEY"
    assert both.get("ERROR") == "invalid_field:give URL or FILE_KEY, not both"


# --- fileKeys -----------------------------------------------------------------------------


async def test_file_key_pages_the_snapshot_it_names_even_after_the_page_changed(
    docs: Dispatcher, origin: Origin
) -> None:
    url = serve(origin, "/tides", ARTICLE)
    first = await ask(docs, "fetch", "CONTENT", ("URL", url), ("MAX_CHARS", "10"))
    key = first.get("FILE_KEY")
    assert key == article_key(url)
    serve(origin, "/tides", "<html><body><p>Entirely new words on the page now.</p></body></html>")
    fresh = await ask(docs, "fetch", "CONTENT", ("URL", url), ("NO_CACHE", "true"))
    rest = await ask(docs, "fetch", "CONTENT", ("FILE_KEY", key), ("START", "10"))
    assert fresh.get("FILE_KEY") != key
    assert (rest.status, rest.get("DATA"), rest.get("FILE_KEY")) == (Status.OK, MARKDOWN[10:], key)
    assert rest.get("CACHED") == "true"


async def test_an_unknown_or_malformed_file_key_is_refused(docs: Dispatcher) -> None:
    unknown = await ask(docs, "fetch", "CONTENT", ("FILE_KEY", "fk_" + "a" * 16))
    malformed = await ask(docs, "fetch", "CONTENT", ("FILE_KEY", "fk_1"))
    assert unknown.get("ERROR") == f"unknown_file_key:fk_{'a' * 16}"
    assert unknown.get("FILE_KEY") == "fk_" + "a" * 16
    assert malformed.get("ERROR") == "invalid_field:FILE_KEY must be fk_ and 16 of [a-z2-7]"


# --- the announcement board ---------------------------------------------------------------


async def test_board_lists_a_fetch_for_five_turns_then_forgets_it(
    docs: Dispatcher, origin: Origin
) -> None:
    """N and N+1: an entry announced in turn 1 is listed in turns 2 to 5, not in turn 6."""
    url = serve(origin, "/tides", ARTICLE)
    await ask(docs, "fetch", "CONTENT", ("URL", url))
    boards = [await ask(docs, "board", "BOARD") for _turn in range(2, 7)]
    line = (
        f"{article_key(url)} {url} chars:{len(MARKDOWN)} tokens:{math.ceil(len(MARKDOWN) / 4)} "
        f"turns_left:{{}} {json.dumps(TITLE)}"
    )
    assert [board.fields for board in boards[:4]] == [
        (("SCOPE", "[]"), ("DATA", "files:1"), ("FILE", line.format(left))) for left in (4, 3, 2, 1)
    ]
    assert boards[4].fields == (("SCOPE", "[]"), ("DATA", "files:0"))


async def test_each_peer_has_its_own_board_and_fetch_can_carry_it(
    docs: Dispatcher, origin: Origin
) -> None:
    one, two = serve(origin, "/one", ARTICLE), serve(origin, "/two", "second", "text/plain")
    await ask(docs, "fetch", "CONTENT", ("URL", one))
    other = await ask(docs, "board", "BOARD", peer=Peer("other", 1001, 8))
    carried = await ask(docs, "fetch", "CONTENT", ("URL", two), ("BOARD", "true"))
    assert other.get("DATA") == "files:0"
    files = carried.get_all("FILE")
    assert [line.split()[:2] for line in files] == [
        [file_key(Page(two, 200, "text/plain", "text", text="second")), two],
        [article_key(one), one],
    ]


def test_board_keeps_max_entries_per_peer_and_ttl_turns_is_its_setting() -> None:
    """N and N+1: max_entries 2 keeps the newest two of three."""
    from specialists.web.docs.board import Board, Entry

    board, config = Board(), BoardConfig(ttl_turns=5, max_entries=2)
    for n in range(3):
        board.turn(PEER, config)
        board.announce(PEER, Entry(f"k{n}", "u", None, 1, 1, board.current(PEER)), config)
    assert [entry.file_key for entry, _ in board.listing(PEER, config)] == ["k2", "k1"]
    short = BoardConfig(ttl_turns=1, max_entries=2)
    assert [(entry.file_key, left) for entry, left in board.listing(PEER, short)] == [("k2", 1)]


# --- the File Cabinet ---------------------------------------------------------------------


async def test_save_then_read_back_from_the_cabinet_through_the_memory_specialist(
    docs: Dispatcher, origin: Origin
) -> None:
    """M-7, M-8: the save is stored before its reply; the read pages it like fetch."""
    url = serve(origin, "/tides", ARTICLE)
    key = (await ask(docs, "fetch", "CONTENT", ("URL", url))).get("FILE_KEY")
    assert key is not None
    saved = await ask(docs, "save", "ACK", ("FILE_KEY", key), ("NOTE", "for the report"))
    assert saved.status is Status.OK
    assert [k for k, _ in saved.fields] == [
        "SCOPE", "DATA", "FILE_KEY", "PATH", "SAVED_AT", "EXPIRES_AT", "CITE",
    ]  # fmt: skip
    assert (saved.get("DATA"), saved.get("PATH")) == (f"saved:{key}", f"cabinet/{key}.json")
    back = await ask(docs, "cabinet", "CONTENT", ("FILE_KEY", key), ("MAX_CHARS", "20"))
    assert back.status is Status.PARTIAL
    assert (back.get("DATA"), back.get("NOTE"), back.get("URL")) == (
        MARKDOWN[:20],
        "for the report",
        url,
    )
    assert back.get("EXPIRES_AT") == saved.get("EXPIRES_AT")
    assert (back.get("NEXT_START"), back.get("REMAINING_CHARS")) == ("20", str(len(MARKDOWN) - 20))


@pytest.mark.parametrize("extra", [-1, 0, 1])
async def test_cabinet_start_pages_to_the_last_character_and_is_refused_at_the_end_and_past_it(
    docs: Dispatcher, origin: Origin, extra: int
) -> None:
    """As fetch: START N-1 answers the last character; N (once an empty OK) and N+1 refuse."""
    key = await fetched_key(docs, origin)
    assert (await ask(docs, "save", "ACK", ("FILE_KEY", key))).status is Status.OK
    start = ("START", str(len(MARKDOWN) + extra))
    back = await ask(docs, "cabinet", "CONTENT", ("FILE_KEY", key), start)
    if extra < 0:
        assert (back.status, back.get("DATA")) == (Status.OK, MARKDOWN[-1])
    else:
        assert back.status is Status.FAIL, back
        assert back.get("ERROR") == f"invalid_field:START beyond the end ({len(MARKDOWN)})"


async def test_a_saved_page_with_no_text_reads_back_partial_with_empty_content(
    docs: Dispatcher, origin: Origin
) -> None:
    """R-2: the cabinet never answers an empty OK; the fetch said why, the read says so too."""
    url = serve(origin, "/app", '<html><body><div id="root"></div><script src="/a.js"></script>')
    fetched = await ask(docs, "fetch", "CONTENT", ("URL", url))
    assert fetched.get("ERROR") == "empty_content:script_only,render_unavailable"
    key = fetched.get("FILE_KEY")
    assert key is not None
    assert (await ask(docs, "save", "ACK", ("FILE_KEY", key))).status is Status.OK
    back = await ask(docs, "cabinet", "CONTENT", ("FILE_KEY", key))
    assert (back.status, back.get("DATA"), back.get("ERROR")) == (
        Status.PARTIAL,
        "",
        "empty_content:empty_body",
    )


async def test_cabinet_read_of_a_key_never_saved_is_unknown_file_key(docs: Dispatcher) -> None:
    """M-7: the sink answers not_found; the op says which key."""
    key = "fk_" + "b" * 16
    reply = await ask(docs, "cabinet", "CONTENT", ("FILE_KEY", key))
    assert reply.fields[2:] == (
        ("ERROR", f"unknown_file_key:{key} not in the cabinet"),
        ("FILE_KEY", key),
    )


async def test_an_expired_cabinet_entry_is_not_served(
    docs: Dispatcher, origin: Origin, web: WebServices
) -> None:
    url = serve(origin, "/tides", ARTICLE)
    key = (await ask(docs, "fetch", "CONTENT", ("URL", url))).get("FILE_KEY")
    assert key is not None
    web.config = replace(
        web.config, docs=replace(web.config.docs, cabinet=CabinetConfig(ttl_s=1e-9))
    )
    await ask(docs, "save", "ACK", ("FILE_KEY", key))
    reply = await ask(docs, "cabinet", "CONTENT", ("FILE_KEY", key))
    assert reply.get("ERROR") == f"unknown_file_key:{key} expired"


async def test_save_of_a_key_not_held_is_unknown_file_key(docs: Dispatcher) -> None:
    reply = await ask(docs, "save", "ACK", ("FILE_KEY", "fk_" + "c" * 16))
    assert reply.get("ERROR") == f"unknown_file_key:fk_{'c' * 16}"


async def test_cabinet_content_cap_is_enforced_at_n_and_n_plus_1(
    docs: Dispatcher, origin: Origin, web: WebServices
) -> None:
    url = serve(origin, "/tides", ARTICLE)
    key = (await ask(docs, "fetch", "CONTENT", ("URL", url))).get("FILE_KEY")
    assert key is not None
    for cap, status in ((len(MARKDOWN), Status.OK), (len(MARKDOWN) - 1, Status.FAIL)):
        cabinet = CabinetConfig(max_content_chars=cap)
        web.config = replace(web.config, docs=replace(web.config.docs, cabinet=cabinet))
        reply = await ask(docs, "save", "ACK", ("FILE_KEY", key))
        assert reply.status is status
    assert reply.get("ERROR") == (
        f"too_large:{len(MARKDOWN)} chars; cabinet.max_content_chars is {len(MARKDOWN) - 1}"
    )


async def test_cabinet_with_the_memory_specialist_down_fails_memory_unavailable(
    web_config: Config, web: WebServices, tmp_path: Path
) -> None:
    """M-8: nothing listens at memory.socket_path: a clear FAIL naming it."""
    socket_path = str(tmp_path / "absent.sock")
    config = with_memory(web_config, socket_path)
    async with open_outbox(config.outbox_path, config.outbox, config.memory) as outbox:
        dispatcher = build_dispatcher(config, outbox_path(config, outbox), WEB.ops, web)
        reply = await ask(dispatcher, "cabinet", "CONTENT", ("FILE_KEY", "fk_" + "d" * 16))
    assert reply.get("ERROR") == f"memory_unavailable:FileNotFoundError at {socket_path}"


async def test_cabinet_read_that_gets_no_answer_fails_at_its_deadline(
    web_config: Config, web: WebServices, tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    """M-8: a Memory Specialist that accepts and never answers costs memory_timeout_s."""
    socket_path = str(tmp_path / "mute.sock")
    listener = trio.socket.socket(trio.socket.AF_UNIX)
    await listener.bind(socket_path)
    listener.listen()
    config = with_memory(web_config, socket_path)
    async with open_outbox(config.outbox_path, config.outbox, config.memory) as outbox:
        dispatcher = build_dispatcher(config, outbox_path(config, outbox), WEB.ops, web)
        started = trio.current_time()
        reply = await ask(dispatcher, "cabinet", "CONTENT", ("FILE_KEY", "fk_" + "e" * 16))
        waited = trio.current_time() - started
    listener.close()
    assert reply.get("ERROR") == f"memory_unavailable:TooSlowError at {socket_path}"
    assert waited == pytest.approx(CabinetConfig().memory_timeout_s, abs=0.5)


# --- write_file ---------------------------------------------------------------------------


async def test_write_file_writes_a_held_key_and_never_overwrites_unless_asked(
    docs: Dispatcher, origin: Origin, workspace: Path
) -> None:
    url = serve(origin, "/tides", ARTICLE)
    key = (await ask(docs, "fetch", "CONTENT", ("URL", url))).get("FILE_KEY")
    assert key is not None
    target = workspace / "tides.md"
    wrote = await ask(docs, "write_file", "PATH", ("FILE_KEY", key), ("PATH", str(target)))
    again = await ask(docs, "write_file", "PATH", ("FILE_KEY", key), ("PATH", str(target)))
    target.write_text("old")
    forced = await ask(
        docs, "write_file", "PATH", ("FILE_KEY", key), ("PATH", str(target)), ("OVERWRITE", "true")
    )
    size = len(MARKDOWN.encode())
    assert wrote.fields == (
        ("SCOPE", "[]"),
        ("DATA", f"path:{os.path.realpath(target)}"),
        ("FILE_KEY", key),
        ("BYTES", str(size)),
        ("CITE", f"{url} {json.dumps(TITLE)}"),
    )
    assert again.get("ERROR") == f"file_exists:{target}"
    assert forced.status is Status.OK
    assert target.read_text() == MARKDOWN


async def test_write_file_refuses_paths_outside_the_roots_and_symlinks_out(
    docs: Dispatcher, origin: Origin, workspace: Path, tmp_path: Path
) -> None:
    url = serve(origin, "/tides", ARTICLE)
    key = (await ask(docs, "fetch", "CONTENT", ("URL", url))).get("FILE_KEY")
    assert key is not None
    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace / "escape").symlink_to(outside)
    (workspace / "link.md").symlink_to(outside / "target.md")

    async def write(path: str, *more: tuple[str, str]) -> str | None:
        reply = await ask(docs, "write_file", "PATH", ("FILE_KEY", key), ("PATH", path), *more)
        return reply.get("ERROR")

    assert await write(str(outside / "a.md")) == f"permission_denied:{outside / 'a.md'}"
    escaped = str(workspace / "escape" / "a.md")
    assert await write(escaped) == f"permission_denied:{escaped}"
    linked = str(workspace / "link.md")
    assert await write(linked, ("OVERWRITE", "true")) == f"permission_denied:{linked}"
    assert await write(str(workspace / "link.md")) == f"file_exists:{linked}"
    assert await write("relative.md") == "invalid_field:PATH must be an absolute path"
    assert await write(str(workspace / "no" / "a.md")) == (
        "invalid_field:PATH's directory does not exist"
    )
    assert os.listdir(outside) == []


async def test_write_file_size_cap_at_n_and_n_plus_1(
    docs: Dispatcher, origin: Origin, workspace: Path, web: WebServices
) -> None:
    url = serve(origin, "/tides", ARTICLE)
    key = (await ask(docs, "fetch", "CONTENT", ("URL", url))).get("FILE_KEY")
    assert key is not None
    size = len(MARKDOWN.encode())
    outcomes = []
    for n, cap in enumerate((size, size - 1)):
        cabinet = CabinetConfig(max_file_bytes=cap)
        web.config = replace(web.config, docs=replace(web.config.docs, cabinet=cabinet))
        path = str(workspace / f"f{n}.md")
        reply = await ask(docs, "write_file", "PATH", ("FILE_KEY", key), ("PATH", path))
        outcomes.append(reply.get("ERROR"))
    assert outcomes == [None, f"too_large:{size} bytes; cabinet.max_file_bytes is {size - 1}"]


async def test_write_file_reads_a_key_from_the_cabinet_when_it_is_no_longer_held(
    docs: Dispatcher, origin: Origin, workspace: Path, web: WebServices
) -> None:
    url = serve(origin, "/tides", ARTICLE)
    key = (await ask(docs, "fetch", "CONTENT", ("URL", url))).get("FILE_KEY")
    assert key is not None
    await ask(docs, "save", "ACK", ("FILE_KEY", key))
    await web.cache.invalidate("filekey")
    target = workspace / "from-cabinet.md"
    reply = await ask(docs, "write_file", "PATH", ("FILE_KEY", key), ("PATH", str(target)))
    assert reply.status is Status.OK
    assert target.read_text() == MARKDOWN


async def test_write_file_without_workspace_roots_is_not_available(
    web_config: Config, web: WebServices
) -> None:
    async with open_outbox(web_config.outbox_path, web_config.outbox, web_config.memory) as box:
        dispatcher = build_dispatcher(web_config, outbox_path(web_config, box), WEB.ops, web)
        reply = await ask(
            dispatcher, "write_file", "PATH", ("FILE_KEY", "fk_" + "f" * 16), ("PATH", "/tmp/x")
        )
    assert reply.get("ERROR") == "not_available:write_file: no tool.exec.workspace_roots"


async def test_write_file_refuses_execs_masked_paths_and_kernel_dirs_under_the_root(
    web_config: Config, web: WebServices, origin: Origin, workspace: Path
) -> None:
    """write_file checks its path as upload does (one opener): a directory exec masks inside
    the root, or one resolving into /proc, is not written."""
    secrets = workspace / "secrets"
    secrets.mkdir()
    (workspace / "proc_link").symlink_to("/proc/self")
    exec_config = ExecConfig(workspace_roots=(str(workspace),), masked_paths=(str(secrets),))
    config = with_section(web_config, "tool", replace(tool_section(web_config), exec=exec_config))
    web.config = web_section(config)
    async with open_outbox(config.outbox_path, config.outbox, config.memory) as box:
        dispatcher = build_dispatcher(config, outbox_path(config, box), WEB.ops, web)
        url = serve(origin, "/tides", ARTICLE)
        key = (await ask(dispatcher, "fetch", "CONTENT", ("URL", url))).get("FILE_KEY")
        assert key is not None
        for path in (secrets / "token.md", workspace / "proc_link" / "environ"):
            reply = await ask(
                dispatcher, "write_file", "PATH", ("FILE_KEY", key), ("PATH", str(path))
            )
            assert reply.get("ERROR") == f"permission_denied:{path}", path
        fine = workspace / "notes.md"
        reply = await ask(dispatcher, "write_file", "PATH", ("FILE_KEY", key), ("PATH", str(fine)))
    assert reply.status is Status.OK
    assert fine.read_text() == MARKDOWN
    assert os.listdir(secrets) == []


OVERWRITE = ("OVERWRITE", "true")
NOT_A_FILE = "invalid_field:PATH is not a regular file"
TOO_LONG = "invalid_field:PATH has a name too long for its file system"


async def fetched_key(docs: Dispatcher, origin: Origin) -> str:
    key = (await ask(docs, "fetch", "CONTENT", ("URL", serve(origin, "/tides", ARTICLE)))).get(
        "FILE_KEY"
    )
    assert key is not None
    return key


async def write_over(docs: Dispatcher, key: str, path: Path) -> Reply:
    """write_file with OVERWRITE true; a FIFO that held the write's open (the bug: openat waits
    for a reader in a thread nothing can cancel) is opened for reading at WAIT_S, so a
    regression fails the test instead of hanging it."""

    async def free_a_held_fifo() -> None:
        await trio.sleep(WAIT_S)
        if stat.S_ISFIFO(os.lstat(path).st_mode):
            os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(free_a_held_fifo)
        with trio.fail_after(WAIT_S / 2):
            reply = await ask(
                docs, "write_file", "PATH", ("FILE_KEY", key), ("PATH", str(path)), OVERWRITE
            )
        nursery.cancel_scope.cancel()
    return reply


async def test_write_file_onto_a_fifo_without_a_reader_fails_at_once(
    docs: Dispatcher, origin: Origin, workspace: Path
) -> None:
    key = await fetched_key(docs, origin)
    fifo = workspace / "fifo"
    os.mkfifo(fifo)
    reply = await write_over(docs, key, fifo)
    assert reply.get("ERROR") == NOT_A_FILE
    plain = await ask(docs, "write_file", "PATH", ("FILE_KEY", key), ("PATH", str(fifo)))
    assert plain.get("ERROR") == f"file_exists:{fifo}"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert os.listdir(workspace) == ["fifo"]


async def test_write_file_onto_a_fifo_with_a_reader_fails_and_writes_nothing_to_it(
    docs: Dispatcher, origin: Origin, workspace: Path
) -> None:
    key = await fetched_key(docs, origin)
    fifo = workspace / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        reply = await write_over(docs, key, fifo)
        try:
            got = os.read(reader, 1 << 16)
        except BlockingIOError:  # a writer still holds it open, with nothing written
            got = b""
    finally:
        os.close(reader)
    assert reply.get("ERROR") == NOT_A_FILE
    assert got == b""
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


async def test_write_file_onto_a_character_device_is_refused(
    docs: Dispatcher, origin: Origin, workspace: Path
) -> None:
    device = workspace / "null"
    try:
        os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers
    except PermissionError:
        pytest.skip("mknod needs CAP_MKNOD")
    key = await fetched_key(docs, origin)
    reply = await write_over(docs, key, device)
    assert reply.get("ERROR") == NOT_A_FILE
    assert stat.S_ISCHR(os.lstat(device).st_mode)


async def test_write_file_over_a_hard_link_leaves_the_file_outside_the_root_unchanged(
    docs: Dispatcher, origin: Origin, workspace: Path, tmp_path: Path
) -> None:
    """The write replaces the name in the root; the outside name keeps the old file. The
    new file keeps the old one's permission bits, as writing it in place did."""
    key = await fetched_key(docs, origin)
    outside = tmp_path / "outside.txt"
    outside.write_text("outside")
    outside.chmod(0o600)
    inside = workspace / "hardlink"
    os.link(outside, inside)
    reply = await write_over(docs, key, inside)
    assert reply.status is Status.OK
    assert outside.read_text() == "outside"
    assert inside.read_text() == MARKDOWN
    assert stat.S_IMODE(inside.stat().st_mode) == 0o600
    assert os.listdir(workspace) == ["hardlink"]


@pytest.mark.parametrize("overwrite", [False, True])
async def test_a_name_swapped_for_a_symlink_mid_write_never_links_a_file_outside_the_root(
    docs: Dispatcher,
    origin: Origin,
    workspace: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    overwrite: bool,
) -> None:
    """A command in the root may watch the directory and, once the content is written, swap
    the daemon's temporary name for a symlink to a file of the daemon's (review: a link of
    that name followed it, and a root daemon linked the secret in at PATH)."""
    key = await fetched_key(docs, origin)
    secret = tmp_path / "secret"
    secret.write_text("TOPSECRET")
    secret.chmod(0o600)
    written = workspace_module._write_all

    def write_then_swap(fd: int, data: bytes) -> None:
        written(fd, data)
        for name in os.listdir(workspace):
            if name.startswith(".csp-web-write-"):
                os.rename(workspace / name, tmp_path / "moved")
                os.symlink(secret, workspace / name)

    monkeypatch.setattr(workspace_module, "_write_all", write_then_swap)
    path = workspace / "out.md"
    more = (OVERWRITE,) if overwrite else ()
    reply = await ask(docs, "write_file", "PATH", ("FILE_KEY", key), ("PATH", str(path)), *more)
    assert os.stat(secret).st_nlink == 1  # never linked into the root
    assert secret.read_text() == "TOPSECRET"
    if overwrite:  # the temporary file was taken away: refused, not an OK over another file
        assert reply.get("ERROR") == "permission_denied:PATH changed while it was written"
    else:  # no temporary name to swap: PATH itself is made, O_EXCL
        assert (reply.status, path.read_text()) == (Status.OK, MARKDOWN)


async def test_write_file_takes_a_255_byte_name_and_refuses_a_longer_one_as_invalid_field(
    docs: Dispatcher, origin: Origin, workspace: Path
) -> None:
    key = await fetched_key(docs, origin)

    async def write(path: Path, *more: tuple[str, str]) -> str | None:
        reply = await ask(docs, "write_file", "PATH", ("FILE_KEY", key), ("PATH", str(path)), *more)
        return reply.get("ERROR")

    longest = workspace / ("n" * 255)
    assert await write(longest) is None
    assert await write(workspace / ("n" * 256)) == TOO_LONG
    assert await write(workspace / ("n" * 300), OVERWRITE) == TOO_LONG
    assert await write(workspace / ("d" * 256) / "a.md") == TOO_LONG
    assert longest.read_text() == MARKDOWN
    assert os.listdir(workspace) == [longest.name]  # no temporary file left by a failure


# --- the main flow over the daemon's connection loop --------------------------------------


async def test_search_fetch_save_read_back_and_write_file_over_one_connection(
    docs: Dispatcher, origin: Origin, workspace: Path, web: WebServices, nursery: trio.Nursery
) -> None:
    """The documents flow as an agent runs it, frame by frame over the connection loop:
    search finds the page, fetch gives its fileKey (and the board), save keeps it in the
    Memory Specialist, the fetch cache is emptied, cabinet reads it back, write_file writes it."""
    from csp_web.core.wire.connection import Shutdown
    from tests.harness import Harness
    from tests.web.fixtures import providers

    url = serve(origin, "/tides", ARTICLE)
    result = {"url": url, "title": TITLE, "content": "How tides shape the coast.", "score": 1.0}
    body = json.dumps({"query": "tides", "number_of_results": 1, "results": [result]}).encode()
    origin.routes["/searx/search"] = lambda _seen: OriginReply(
        200, [("content-type", "application/json")], body
    )
    search = replace(web.config.search, order=("searxng",), providers=providers(origin))
    web.config = replace(web.config, search=search)
    client = Harness(docs, nursery, Shutdown()).connect()

    async def exchange(frame: str) -> Reply:
        await client.send(frame.encode())
        with trio.fail_after(WAIT_S):
            reply = await client.reply()
        assert reply is not None
        return reply

    found = await exchange("TASK REQ:search tides of the north sea IN:WEB OUT:URL_REFS\n\n")
    assert found.get("DATA") == f"url:{url}"
    fetched = await exchange(f"TASK REQ:fetch {url} IN:WEB OUT:CONTENT\nBOARD true\n\n")
    key = fetched.get("FILE_KEY")
    assert key == article_key(url)
    assert (fetched.get("FILE") or "").startswith(f"{key} {url} chars:{len(MARKDOWN)} ")
    saved = await exchange(f'TASK REQ:save {key} IN:WEB OUT:ACK\nNOTE "north sea"\n\n')
    assert saved.get("DATA") == f"saved:{key}"
    await web.cache.invalidate("filekey")  # only the Memory Specialist holds it now
    back = await exchange(f"TASK REQ:cabinet {key} IN:WEB OUT:CONTENT\n\n")
    assert (back.status, back.get("DATA"), back.get("NOTE")) == (Status.OK, MARKDOWN, "north sea")
    target = workspace / "tides.md"
    wrote = await exchange(
        f"TASK REQ:write_file IN:WEB OUT:PATH\nFILE_KEY {key}\nPATH {target}\n\n"
    )
    assert wrote.get("DATA") == f"path:{os.path.realpath(target)}"
    assert target.read_text() == MARKDOWN


def test_document_settings_are_applied_by_a_reload() -> None:
    """SIGHUP: web.docs is read per task, so a reload applies it."""
    from csp_web.app.catalog import SPECIALISTS
    from csp_web.config.reload import plan_reload
    from csp_web.core.daemon.compose import reload_paths

    running = Config()
    docs = replace(web_section(running).docs, max_urls=2, board=BoardConfig(ttl_turns=3))
    new = with_section(running, "web", replace(web_section(running), docs=docs))
    plan = plan_reload(running, new, *reload_paths(SPECIALISTS))
    assert set(plan.applied) == {"web.docs.board.ttl_turns", "web.docs.max_urls"}
    assert plan.needs_restart == ()
    assert plan.config == new


async def test_a_note_is_at_most_2000_chars(docs: Dispatcher, origin: Origin) -> None:
    url = serve(origin, "/tides", ARTICLE)
    key = (await ask(docs, "fetch", "CONTENT", ("URL", url))).get("FILE_KEY")
    assert key is not None
    at = await ask(docs, "save", "ACK", ("FILE_KEY", key), ("NOTE", "n" * 2000))
    over = await ask(docs, "save", "ACK", ("FILE_KEY", key), ("NOTE", "n" * 2001))
    assert at.status is Status.OK
    assert over.get("ERROR") == "invalid_field:NOTE over 2000 chars"


async def test_summarize_reads_a_file_key_instead_of_a_url(
    docs: Dispatcher, origin: Origin
) -> None:
    url = serve(origin, "/tides", ARTICLE)
    key = (await ask(docs, "fetch", "CONTENT", ("URL", url))).get("FILE_KEY")
    assert key is not None
    by_key = await ask(docs, "summarize", "SUMMARY", ("FILE_KEY", key), ("MAX_BULLETS", "2"))
    by_url = await ask(docs, "summarize", "SUMMARY", ("URL", url), ("MAX_BULLETS", "2"))
    both = await ask(docs, "summarize", "SUMMARY", ("URL", url), ("FILE_KEY", key))
    assert by_key.get_all("BULLET") == by_url.get_all("BULLET")
    assert by_key.get("CITE") == f"{url} {json.dumps(TITLE)}"
    assert both.get("ERROR") == "invalid_field:give URL or FILE_KEY, not both"


async def test_a_full_size_non_ascii_document_round_trips_through_the_cabinet(
    docs: Dispatcher, origin: Origin
) -> None:
    """cabinet.max_content_chars (200,000) of non-ASCII text: one memory write of about 1.2 MB
    of JSON escapes, read back whole."""
    text = "é" * CabinetConfig().max_content_chars
    url = serve(origin, "/big", text, "text/plain; charset=utf-8")
    key = (await ask(docs, "fetch", "CONTENT", ("URL", url))).get("FILE_KEY")
    assert key is not None
    saved = await ask(docs, "save", "ACK", ("FILE_KEY", key))
    back = await ask(docs, "cabinet", "CONTENT", ("FILE_KEY", key), ("START", "199990"))
    assert saved.status is Status.OK
    assert (back.get("DATA"), back.get("CONTENT_LENGTH")) == ("é" * 10, "200000")
