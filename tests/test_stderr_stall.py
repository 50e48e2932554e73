"""A stderr nobody reads never stops the daemon (csp_web/core/api/logs.py, ``StderrLines``).

At the default ``log_level: info`` every frame logs a line; with stderr a pipe whose reader
stopped (a paused ``| tee``, a terminal on Ctrl-S, an orchestrator that never drains it), a
blocking write on the event loop stopped every connection, timer and signal once the pipe's
64 KiB filled.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import threading

import pytest
import trio
import yaml

from csp_web.core.api.logs import StderrLines

CSP_WEB = shutil.which("csp-web") or "csp-web"
WAIT_S = 10.0
PING = b"TASK REQ:ping IN:SYS OUT:PONG\n\n"


class _StalledStream:
    """A text stream whose ``write`` waits until ``release`` is set; ``entered`` is set once
    a write waits."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.text = ""

    def write(self, text: str) -> int:
        self.entered.set()
        self.release.wait()
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass


def _record(message: str) -> logging.LogRecord:
    return logging.makeLogRecord({"msg": message, "levelno": logging.INFO})


@pytest.mark.parametrize("past", [0, 1, 2])
def test_a_log_call_never_waits_for_a_stalled_stderr_and_drops_past_the_line_bound(
    past: int,
) -> None:
    """N lines wait for stderr (the one being written among them); the lines past N are
    dropped, and their count is written where they would have been once stderr moves."""
    stream = _StalledStream()
    handler = StderrLines(stream, max_lines=100)  # type: ignore[arg-type]
    handler.emit(_record("first"))
    assert stream.entered.wait(WAIT_S)  # the writer holds "first" in a write that waits
    for n in range(99 + past):
        handler.emit(_record(f"line {n}"))  # returns at once, stalled or not
    stream.release.set()
    handler.flush()  # stderr moved: what waited is written, and there is room again
    handler.emit(_record("after"))
    handler.close()
    dropped = [f"{past} log lines dropped: stderr was not read"] if past else []
    kept = [f"line {n}" for n in range(99)]
    assert stream.text.splitlines() == ["first", *kept, *dropped, "after"]


@pytest.mark.parametrize("past", [0, 1])
def test_queued_characters_are_bounded_too_at_n_and_n_plus_1(past: int) -> None:
    """A few huge lines (a client's 1 MiB text in a warning) cannot hold more than
    ``max_chars`` waiting, however few they are."""
    stream = _StalledStream()
    handler = StderrLines(stream, max_chars=1000)  # type: ignore[arg-type]
    handler.emit(_record("a" * 400))
    assert stream.entered.wait(WAIT_S)
    handler.emit(_record("b" * (600 + past)))
    stream.release.set()
    handler.close()
    second = ["1 log lines dropped: stderr was not read"] if past else ["b" * 600]
    assert stream.text.splitlines() == ["a" * 400, *second]


def test_closing_a_handler_whose_stderr_never_moves_gives_up_after_its_wait() -> None:
    stream = _StalledStream()
    handler = StderrLines(stream, max_lines=2, close_wait_s=0.05)  # type: ignore[arg-type]
    for n in range(5):
        handler.emit(_record(f"line {n}"))
    closing = threading.Thread(target=handler.close)
    closing.start()
    closing.join(WAIT_S)
    assert not closing.is_alive()
    stream.release.set()


class _BrokenStream:
    """stderr whose reader is gone: every write fails as a broken pipe's does."""

    def __init__(self) -> None:
        self.tries = 0

    def write(self, text: str) -> int:
        self.tries += 1
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_lines_that_cannot_be_written_are_let_go() -> None:
    """A closed stderr costs each line and nothing more: the writer goes on, and ``flush``
    and ``close`` return."""
    stream = _BrokenStream()
    handler = StderrLines(stream)  # type: ignore[arg-type]
    handler.emit(_record("into a broken pipe"))
    handler.flush()
    handler.emit(_record("and another"))
    handler.close()
    assert stream.tries == 2


@pytest.mark.slow
async def test_a_daemon_whose_stderr_nobody_reads_answers_every_frame_and_exits(
    tmp_path: os.PathLike[str],
) -> None:
    """20,000 pings at log_level info write about 3 MB of op lines into a pipe of 64 KiB that
    is not read: every ping is answered, EOF ends the daemon with exit 0, and what was
    dropped is counted on stderr once it is read."""
    config = os.path.join(tmp_path, "config.yaml")
    with open(config, "w", encoding="utf-8") as file:
        yaml.safe_dump({"daemon": {"state_dir": os.path.join(tmp_path, "state")}}, file)
    env = {k: v for k, v in os.environ.items() if k != "CSP_WEB_CONFIG"}
    count = 20_000
    process = await trio.lowlevel.open_process(
        [CSP_WEB, "serve", "--config", config],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    assert process.stderr is not None
    answered = 0
    try:
        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:

                async def feed() -> None:
                    assert process.stdin is not None
                    await process.stdin.send_all(PING * count)
                    await process.stdin.aclose()

                nursery.start_soon(feed)
                tail = b""
                while chunk := await process.stdout.receive_some(1 << 16):
                    text = tail + chunk
                    answered += text.count(b"STATUS OK\n")
                    tail = text[-9:]  # a line cut between two reads is counted once
            assert answered == count
            stderr = bytearray()
            while chunk := await process.stderr.receive_some(1 << 16):
                stderr += chunk
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert b"log lines dropped: stderr was not read" in stderr
    assert stderr.rstrip().endswith(b"memory writes left in the outbox")
