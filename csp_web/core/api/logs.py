"""Structured log lines on stderr; stdout is the wire and never gets a log line.

A log call never waits for stderr. Each record is formatted where it is logged and its line
handed to one writer thread (``StderrLines``), which writes them in batches; while stderr
is not read (a stopped ``| tee``, a paused terminal, a pipe nobody drains) the lines past
``MAX_QUEUED_LINES`` (or ``MAX_QUEUED_CHARS``) are dropped, and their count is written where
they would have been once stderr moves again. A blocking write on the event loop's thread
used to stop the whole daemon there: every connection, timer and signal, SIGTERM included.

A child process that writes its own stderr (an MCP server) must not write into ours, or its
lines would break ``--log-json``: ``relay_lines`` turns what it writes into log records.
"""

from __future__ import annotations

import json
import logging
import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

import trio

_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class _TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__()
        # The last second's stamp: the "op done" line of every frame shares it. Formatting
        # was half of that line's cost (py-spy --gil at log_level info; issue 26).
        self._second, self._stamp = -1, ""

    def format(self, record: logging.LogRecord) -> str:
        second = int(record.created)
        if second != self._second:
            self._stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = second
        line = f"{self._stamp} {record.levelname.lower()} {record.name}: {record.getMessage()}"
        if extra := _extra(record):
            line += " " + " ".join([f"{k}={v}" for k, v in extra.items()])
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": round(record.created, 6),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **_extra(record),
        }
        if record.exc_info:
            entry["traceback"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def _extra(record: logging.LogRecord) -> dict[str, object]:
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD}


def setup_logging(level: str, *, as_json: bool) -> None:
    """Send csp_web's logs to stderr, one line each (JSON lines with ``as_json``), through
    a ``StderrLines`` handler; a second call replaces the first's handler, and the lines the
    first queued are written before any of the second's."""
    _skip_unused_record_fields()
    root = logging.getLogger()
    for old in root.handlers:
        old.close()  # a StderrLines writes what it holds first
    handler = StderrLines(sys.stderr)
    handler.setFormatter(_JsonFormatter() if as_json else _TextFormatter())
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


# At most this many lines, and characters, wait for stderr (10,000 op lines of 150-200
# bytes; 16 MiB whatever the lines); past either, lines are dropped and counted. A reader that
# keeps up never meets the bound: the writer takes up to ``_BATCH_LINES`` lines per write.
MAX_QUEUED_LINES = 10_000
MAX_QUEUED_CHARS = 16 << 20
_BATCH_LINES = 512
# At exit (logging.shutdown's flush, then close) or when replaced, what is queued gets this
# long, once, to reach stderr: a stderr nobody reads delays the exit by that much, no more.
CLOSE_WAIT_S = 3.0


class StderrLines(logging.Handler):
    """A handler whose ``emit`` never blocks: the formatted line is queued for one daemon
    thread that writes to ``stream``. Past ``max_lines`` or ``max_chars`` waiting, lines are
    dropped, and where they would have been ``"<n> log lines dropped: stderr was not read"``
    is written. ``flush`` and ``close`` wait up to ``close_wait_s`` for what is queued."""

    def __init__(
        self,
        stream: TextIO,
        *,
        max_lines: int = MAX_QUEUED_LINES,
        max_chars: int = MAX_QUEUED_CHARS,
        close_wait_s: float = CLOSE_WAIT_S,
    ) -> None:
        super().__init__()
        self._stream = stream
        self._max_lines, self._max_chars = max_lines, max_chars
        self._close_wait_s = close_wait_s
        # Lines, the gaps where lines were dropped, flush marks, and None (the end), in order.
        # Unbounded as a queue, bounded by what emit lets in: a gap is queued only after a line.
        self._items: queue.SimpleQueue[str | _Gap | _FlushMark | None] = queue.SimpleQueue()
        self._lock = threading.Lock()  # the counts below, shared by emitters and the writer
        self._queued_lines = self._queued_chars = 0
        self._gap: _Gap | None = None  # the gap lines are dropped into now
        self._closed = False
        self._stalled = False  # a flush or close waited its whole time: wait no more
        self._writer = threading.Thread(target=self._write_all, name="csp-web-log", daemon=True)
        self._writer.start()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:
            self.handleError(record)
            return
        with self._lock:
            if (
                self._queued_lines >= self._max_lines
                or self._queued_chars + len(line) > self._max_chars
            ):
                if self._gap is None:
                    self._gap = _Gap()
                    self._items.put(self._gap)
                self._gap.count += 1
                return
            self._gap = None
            self._queued_lines += 1
            self._queued_chars += len(line)
            self._items.put(line)

    def flush(self) -> None:
        """Wait (up to ``close_wait_s``) until every line queued so far is written."""
        if self._closed or self._stalled or not self._writer.is_alive():
            return
        mark = _FlushMark()
        self._items.put(mark)
        if not mark.done.wait(self._close_wait_s):
            self._stalled = True

    def close(self) -> None:
        """Write what is queued (up to ``close_wait_s``, none once a wait timed out: stderr is
        not read, and waiting again would only hold the process's exit) and end the writer."""
        if not self._closed:
            self._closed = True
            self._items.put(None)
            if not self._stalled:
                self._writer.join(self._close_wait_s)
        super().close()

    def _write_all(self) -> None:
        while True:
            batch = [self._items.get()]
            while len(batch) < _BATCH_LINES:
                try:
                    batch.append(self._items.get_nowait())
                except queue.Empty:
                    break
            text = [self._text(item) for item in batch if isinstance(item, str | _Gap)]
            if text:
                self._write("".join(text))
            with self._lock:
                lines = [item for item in batch if isinstance(item, str)]
                self._queued_lines -= len(lines)
                self._queued_chars -= sum(map(len, lines))
            for item in batch:
                if isinstance(item, _FlushMark):
                    item.done.set()
            if None in batch:
                return

    def _text(self, item: str | _Gap) -> str:
        if isinstance(item, str):
            return item + "\n"
        with self._lock:  # a gap still open takes no more: the next drop opens another
            if self._gap is item:
                self._gap = None
            count = item.count
        return f"{count} log lines dropped: stderr was not read\n"

    def _write(self, text: str) -> None:
        try:
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError):
            pass  # stderr closed or gone: nowhere to say so


class _Gap:
    """Where lines were dropped, and how many."""

    def __init__(self) -> None:
        self.count = 0


class _FlushMark:
    """A queue entry that is no line: the writer sets ``done`` once it has written every line
    queued before it."""

    def __init__(self) -> None:
        self.done = threading.Event()


def _skip_unused_record_fields() -> None:
    """Stop logging from filling the record fields no line of ours shows: the caller's file
    and line (a walk up the stack: the daemon's is ~20 frames deep under trio), the thread,
    the process and its name (the logging HOWTO's "Optimization" table). At the default
    ``log_level: info`` the "op done" line of every frame added 50-110 us of daemon CPU per
    pipelined ping (info against warning, load 8-10); these switches and the text stamp kept
    per second cut a line from 37.5-46.8 to 30.9-34.0 us (in process, load 10; issue 26)."""
    logging._srcfile = None  # the HOWTO's documented switch
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False


# Precedent: journald's LineMax (48 KiB) splits longer lines; one log record per 4 KiB keeps
# a child that never writes a newline from growing our buffer.
MAX_RELAYED_LINE_BYTES = 4096


async def relay_lines(
    stream: trio.abc.ReceiveStream,
    emit: Callable[[str], None],
    *,
    max_line_bytes: int = MAX_RELAYED_LINE_BYTES,
) -> None:
    """Call ``emit`` with each line of ``stream`` (decoded as UTF-8, errors replaced, the
    line end dropped) until the stream ends; a line longer than ``max_line_bytes`` bytes comes in
    pieces of that size. The caller owns and closes ``stream``; read errors end the relay.
    """
    pending = b""
    try:
        while data := await stream.receive_some(65536):
            pending += data
            pending = _emit_complete(pending, emit, max_line_bytes)
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass  # the child or our own shutdown closed the pipe: nothing more will come
    if pending:
        emit(_text(pending))


def _emit_complete(pending: bytes, emit: Callable[[str], None], max_bytes: int) -> bytes:
    """Emit every complete (or over-long) line of ``pending``; return what is left."""
    lines = pending.split(b"\n")
    pending = lines.pop()
    for line in lines:
        for start in range(0, max(len(line), 1), max_bytes):
            emit(_text(line[start : start + max_bytes]))
    while len(pending) >= max_bytes:
        emit(_text(pending[:max_bytes]))
        pending = pending[max_bytes:]
    return pending


def _text(line: bytes) -> str:
    return line.removesuffix(b"\r").decode("utf-8", "replace")
