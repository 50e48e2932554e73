"""A receive buffer that hands out LF- or CRLF-terminated lines with one linear scan."""

from __future__ import annotations

import re

_BLANK_LINE = re.compile(rb"\n\r?\n")
_BLANK_RUN = re.compile(rb"(?:\r?\n)+")


class LineBuffer:
    """Bytes received but not yet consumed, searched for newlines once each.

    Like h11's ``ReceiveBuffer``: consumed bytes are dropped lazily by moving ``_start`` and
    compacting when more than half of the array is dead, so popping many short lines from a
    large chunk stays linear.
    """

    def __init__(self) -> None:
        self._data = bytearray()
        self._start = 0
        self._scanned = 0  # offset before which no b"\n" remains unconsumed
        self._block_scanned = 0  # offset before which no blank line remains unconsumed

    def feed(self, data: bytes | bytearray) -> None:
        self._data += data

    def pending(self) -> int:
        """Bytes held after the last complete line."""
        return len(self._data) - self._start

    def ends_with_cr(self) -> bool:
        """Whether the last buffered byte is a CR (a CRLF may be arriving in two parts)."""
        return len(self._data) > self._start and self._data[-1] == 0x0D

    def pop_line(self) -> bytes | None:
        """The next line without its LF or CRLF, or None when no full line is buffered."""
        end = self._data.find(b"\n", max(self._scanned, self._start))
        if end < 0:
            self._scanned = len(self._data)
            return None
        stop = end - 1 if end > self._start and self._data[end - 1] == 0x0D else end
        line = bytes(self._data[self._start : stop])
        self._consume(end + 1)
        return line

    def skip_blank_lines(self, most: int) -> int:
        """Drop up to ``most`` empty lines at the front in one regex pass; how many it dropped.

        A flood of bare newlines then costs one C-level scan per chunk, not a Python round
        per byte; the scan looks at no more than ``most + 1`` lines' bytes (two each at most),
        so a chunk of 64 KiB of newlines costs what 33 do, not a regex step per byte. A CR at
        the very end stays buffered: it may be half of a CRLF.
        """
        match = _BLANK_RUN.match(self._data, self._start, self._start + 2 * (most + 1))
        if match is None:
            return 0
        count = match.group().count(b"\n")
        if count <= most:
            self._consume(match.end())
            return count
        # Stop exactly after the ``most``-th newline, so the caller can report the next one.
        end = self._start
        for _ in range(most):
            end = self._data.index(b"\n", end) + 1
        self._consume(end)
        return most

    def peek_block(self, max_bytes: int) -> tuple[bytes, int] | None:
        """The lines of a complete frame at the front, joined by LF as they stand, and where
        the frame ends, without consuming.

        The fast path for whole frames in one chunk: one regex search instead of a Python
        loop per line. None when the buffer does not start with a complete, non-empty frame
        within ``max_bytes``; the line-by-line path then decides. The block may hold CRs
        (a CRLF frame): the caller decides what to make of them.
        """
        start = self._start
        data = self._data
        if start == len(data) or data[start] in (0x0A, 0x0D):
            return None
        # Resume two bytes back, so a "\n\r\n" split across chunks is still found.
        match = _BLANK_LINE.search(data, max(start, self._block_scanned - 2), start + max_bytes)
        if match is None:
            self._block_scanned = min(len(data), start + max_bytes)
            return None
        return bytes(data[start : match.start()]), match.end()

    def consume_to(self, end: int) -> None:
        """Drop everything before offset ``end`` (from ``peek_block``)."""
        self._consume(end)

    def skip_line(self) -> bool:
        """Drop bytes up to and including the next newline; False if none is buffered yet."""
        end = self._data.find(b"\n", max(self._scanned, self._start))
        if end < 0:
            self.clear()
            return False
        self._consume(end + 1)
        return True

    def pop_rest(self) -> bytes:
        """Everything still buffered, as the final unterminated line at EOF."""
        rest = bytes(self._data[self._start :])
        self.clear()
        return rest

    def clear(self) -> None:
        self._data.clear()
        self._start = self._scanned = self._block_scanned = 0

    def _consume(self, upto: int) -> None:
        self._start = self._scanned = self._block_scanned = upto
        if self._start > len(self._data) // 2:
            del self._data[: self._start]
            self._start = self._scanned = self._block_scanned = 0
