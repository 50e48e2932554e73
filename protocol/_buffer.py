"""A receive buffer that hands out LF- or CRLF-terminated lines with one linear scan."""

from __future__ import annotations


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

    def feed(self, data: bytes | bytearray) -> None:
        self._data += data

    def pending(self) -> int:
        """Bytes held after the last complete line."""
        return len(self._data) - self._start

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
        rest = bytes(self._data[self._start :]).removesuffix(b"\r")
        self.clear()
        return rest

    def clear(self) -> None:
        self._data.clear()
        self._start = self._scanned = 0

    def _consume(self, upto: int) -> None:
        self._start = self._scanned = upto
        if self._start > len(self._data) // 2:
            del self._data[: self._start]
            self._start = self._scanned = 0
