"""The document worker against a hostile file or a subverted worker (issue 24 review): what
its answer may carry into a reply, what the worker may do to the host, and that it dies with
the daemon."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import trio
import trio.testing

from csp_web.core.api.errors import OpError
from protocol import ErrorCode
from specialists.formats import Document, Limits
from specialists.web.pages import document_worker, documents
from specialists.web.pages.documents import read_document
from tests.web.pages_support import WAIT_S

ROOT = Path(__file__).resolve().parents[2]


def _feed(channel: str) -> bytes:
    return f'<?xml version="1.0"?><rss version="2.0"><channel>{channel}</channel></rss>'.encode()


async def _read_feed(data: bytes) -> Document:
    with trio.fail_after(WAIT_S):
        return await read_document("feed", data, Limits(), trio.current_time() + WAIT_S)


async def test_a_declared_language_or_date_that_is_no_tag_never_reaches_a_reply() -> None:
    """A FETCH line prints lang and published bare: a space in them would forge attributes."""
    document = await _read_feed(
        _feed("<title>T</title><language>en truncated:true cached:true</language>")
    )
    assert (document.title, document.lang) == ("T", None)


async def test_a_declared_title_or_author_is_one_line_of_at_most_meta_value_chars() -> None:
    title = "A\u2028B\x85C " + "x" * 5000
    document = await _read_feed(
        _feed(f"<title>{title}</title><managingEditor>ed\u2029itor\x7f</managingEditor>")
    )
    assert document.title == ("A B C " + "x" * 5000)[: documents.META_VALUE_CHARS]
    assert document.author == "ed itor"


@pytest.mark.parametrize(
    ("field", "value", "kept"),
    [
        ("lang", "en-GB", "en-GB"),
        ("lang", "en GB", None),
        ("published", "2026-11-02", "2026-11-02"),
        ("published", "2026-11-02T12:00:00Z", "2026-11-02T12:00:00Z"),
        ("published", "2026-11-02 x:y", None),
        ("no_text", "scanned", "scanned"),
        ("no_text", "scanned\nOK", None),
    ],
)
def test_a_worker_s_metadata_is_held_to_the_shape_its_reply_prints(
    field: str, value: str, kept: str | None
) -> None:
    """The daemon checks what a subverted worker says, whatever the reader would have said."""
    answer = json.dumps({"markdown": "text", "cut": False, field: value}).encode()
    assert getattr(documents._answer("feed", 0, answer, b""), field) == kept


def test_pages_read_past_pages_is_held_to_pages() -> None:
    answer = json.dumps({"markdown": "t", "cut": False, "pages": 2, "pages_read": 9}).encode()
    assert documents._answer("pdf", 0, answer, b"").pages_read == 2


@pytest.mark.parametrize("code", [0, documents.REPORTED_EXIT])
def test_a_worker_answer_nested_past_the_recursion_limit_is_the_reader_s_failure(
    code: int,
) -> None:
    with pytest.raises(OpError) as caught:
        documents._answer("pdf", code, b"[" * 200_000, b"")
    assert (caught.value.code, caught.value.detail) == (
        ErrorCode.UNSUPPORTED_CONTENT,
        "pdf:reader_failed",
    )


def _in_worker(body: str) -> subprocess.CompletedProcess[str]:
    """Run ``body`` in a fresh interpreter with the worker module imported as ``worker``."""
    code = "import sys\nsys.path.insert(0, sys.argv[1])\n"
    code += "from specialists.web.pages import document_worker as worker\n"
    code += textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-c", code, str(ROOT)],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )


def test_a_bounded_worker_can_write_no_file(tmp_path: Path) -> None:
    target = tmp_path / "dropped"
    done = _in_worker(
        f"""
        worker.bound({{"memory_bytes": 1 << 30, "cpu_s": 30}})
        try:
            with open({str(target)!r}, "w") as file:
                file.write("payload")
        except OSError as exc:
            print(exc.errno)
        """
    )
    assert (done.returncode, done.stdout.strip()) == (0, "27")  # EFBIG
    assert not target.exists() or target.read_bytes() == b""


def test_an_offline_worker_reaches_no_host() -> None:
    """A listening socket on this host's loopback: reachable before, not after."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        done = _in_worker(
            f"""
            import socket
            from csp_web.infra.confine import offline  # what document_worker.main calls
            if not offline():
                print("refused")
                raise SystemExit
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=5).close()
                print("connected")
            except OSError:
                print("unreachable")
            """
        )
    if done.stdout.strip() == "refused":
        pytest.skip("this kernel refuses unprivileged user namespaces")
    assert (done.returncode, done.stdout.strip()) == (0, "unreachable")


def test_a_worker_whose_daemon_was_killed_exits() -> None:
    """A stand-in daemon starts the worker, stdin held open by this test (the worker blocks
    reading it, as it would in a long parse), then is SIGKILLed: the worker must not
    outlive it."""
    read_end, write_end = os.pipe()
    daemon_code = textwrap.dedent(
        f"""
        import subprocess, sys, time
        worker = subprocess.Popen(
            [sys.executable, "-B", {str(document_worker.__file__)!r}],
            stdin={read_end}, stdout=subprocess.PIPE, pass_fds=({read_end},),
            start_new_session=True,
        )
        print(worker.pid, flush=True)
        time.sleep(60)
        """
    )
    with subprocess.Popen(
        [sys.executable, "-c", daemon_code], stdout=subprocess.PIPE, pass_fds=(read_end,)
    ) as daemon:
        os.close(read_end)
        try:
            assert daemon.stdout is not None
            worker_pid = int(daemon.stdout.readline())
            os.write(write_end, b'{"reader": "feed:read_feed"')  # a header, not yet ended
            daemon.kill()
            daemon.wait(timeout=WAIT_S)
            assert _gone(worker_pid)
        finally:
            os.close(write_end)
            daemon.kill()


def _gone(pid: int) -> bool:
    """Whether ``pid`` exits (or is a zombie: its parent died) within WAIT_S."""
    import time

    end = time.monotonic() + WAIT_S
    while time.monotonic() < end:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    return False


async def test_a_feed_nested_past_the_recursion_limit_is_corrupt_not_a_reader_crash() -> None:
    """An Atom xhtml summary 100,000 elements deep: ElementTree's serializer recurses."""
    depth = 100_000
    summary = '<div xmlns="http://www.w3.org/1999/xhtml">' + "<b>" * depth + "x" + "</b>" * depth
    data = (
        '<feed xmlns="http://www.w3.org/2005/Atom"><title>T</title><entry><title>E</title>'
        f'<summary type="xhtml">{summary}</div></summary></entry></feed>'
    ).encode()
    with pytest.raises(OpError) as caught:
        await _read_feed(data)
    assert (caught.value.code, caught.value.detail) == (
        ErrorCode.CORRUPT_DOCUMENT,
        "feed:too_deep",
    )


async def test_a_child_a_subverted_worker_leaves_behind_dies_with_the_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker (the hostile stand-in here) forks a child that keeps its stdout open and
    exits: the read ends at its deadline, and the child must not outlive it."""
    pid_file = tmp_path / "child.pid"
    hostile = tmp_path / "hostile_worker.py"
    hostile.write_text(
        textwrap.dedent(
            f"""
            import os, time
            if os.fork() == 0:
                with open({str(pid_file)!r}, "w") as f:
                    f.write(str(os.getpid()))
                time.sleep(60)
            """
        )
    )
    monkeypatch.setattr(documents, "WORKER", hostile)
    with trio.fail_after(WAIT_S), pytest.raises(OpError) as caught:
        await read_document("feed", b"<rss/>", Limits(), trio.current_time() + 1)
    assert (caught.value.code, caught.value.detail) == (ErrorCode.FETCH_FAILED, "timeout")
    assert await trio.to_thread.run_sync(_gone, int(pid_file.read_text()))


async def test_a_read_queued_behind_busy_workers_fails_at_its_own_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Every worker busy (the one token held here): a read waits in line, and its deadline
    counts while it waits; no worker is started for it."""
    limiter = trio.CapacityLimiter(1)
    documents.WORKERS.set(limiter)
    holder = object()
    await limiter.acquire_on_behalf_of(holder)
    with pytest.raises(OpError) as caught:
        await read_document("feed", b"<rss/>", Limits(), trio.current_time() + 5)
    limiter.release_on_behalf_of(holder)
    assert (caught.value.code, caught.value.detail) == (ErrorCode.FETCH_FAILED, "timeout")


async def test_a_worker_inherits_no_descriptor_and_no_variable_but_path_and_locale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stand-in worker answers with what it was given: its open descriptors and its
    environment (the daemon's hold sockets, files and API keys)."""
    spy = tmp_path / "spy_worker.py"
    spy.write_text(
        textwrap.dedent(
            """
            import json, os
            fds = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
            seen = {"fds": fds[:-1], "env": sorted(os.environ)}  # the last: listdir's own
            print(json.dumps({"markdown": json.dumps(seen), "cut": False}))
            """
        )
    )
    monkeypatch.setattr(documents, "WORKER", spy)
    monkeypatch.setenv("CSP_TEST_SECRET", "k")
    with trio.fail_after(WAIT_S):
        document = await read_document("feed", b"<rss/>", Limits(), trio.current_time() + WAIT_S)
    assert json.loads(document.markdown) == {"fds": [0, 1, 2], "env": ["LC_ALL", "PATH"]}


def test_a_worker_s_stderr_reaches_the_log_on_one_line_without_escapes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A subverted worker's stderr is a hostile text: it must not forge log lines."""
    caplog.set_level(logging.INFO, logger=documents.__name__)
    with pytest.raises(OpError):
        documents._answer("pdf", 1, b"", b"died\n2026-11-27 ERROR forged\x1b[31m red")
    (record,) = [r for r in caplog.records if r.name == documents.__name__]
    assert "\n" not in record.getMessage()
    assert "\x1b" not in record.getMessage()
