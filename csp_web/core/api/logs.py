"""Structured log lines on stderr; stdout is the wire and never gets a log line.

A child process that writes its own stderr (an MCP server) must not write into ours, or its
lines would break ``--log-json``: ``relay_lines`` turns what it writes into log records.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable

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
    """Send csp_web's logs to stderr, one line each (JSON lines with ``as_json``)."""
    _skip_unused_record_fields()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if as_json else _TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


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
