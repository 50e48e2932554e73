"""Reading a command's output under a byte cap, and the seed's 500-character summaries.

Each stream keeps its first ``max - tail`` bytes and a rolling window of its last ``tail``
bytes; everything between is counted and dropped as it arrives, so ``yes`` running for the
whole timeout costs the daemon CPU but never memory. The pipe is drained to the end rather
than closed at the cap: a closed pipe would turn into SIGPIPE and change how the command ends.
"""

from __future__ import annotations

import trio

READ_BYTES = 64 * 1024  # one Linux pipe buffer per read
_SEPARATOR = " … "


class CappedOutput:
    """The kept bytes of one stream and how many the stream produced in all."""

    def __init__(self, *, max_bytes: int, tail_bytes: int) -> None:
        if not 0 < tail_bytes < max_bytes:
            raise ValueError("need 0 < tail_bytes < max_bytes")
        self._head_cap = max_bytes - tail_bytes
        self._tail_cap = tail_bytes
        self._head = bytearray()
        self._tail = bytearray()
        self.total_bytes = 0

    def feed(self, chunk: bytes | bytearray) -> None:
        """Account for ``chunk``; keeps at most ``max_bytes`` in all, whatever arrives."""
        self.total_bytes += len(chunk)
        room = self._head_cap - len(self._head)
        self._head += chunk[:room]
        rest = chunk[room:]
        if rest:
            self._tail += rest[-self._tail_cap :]
            del self._tail[: -self._tail_cap]

    @property
    def truncated(self) -> bool:
        """True when bytes were dropped between the head and the tail."""
        return self.omitted_bytes > 0

    @property
    def omitted_bytes(self) -> int:
        return self.total_bytes - len(self._head) - len(self._tail)

    def text(self) -> str:
        """The kept output as UTF-8 (bad bytes replaced), a marker where bytes were dropped."""
        if not self.truncated:
            return _decode(bytes(self._head + self._tail))
        marker = f"\n… [{self.omitted_bytes} bytes omitted] …\n"
        return _decode(bytes(self._head)) + marker + _decode(_skip_continuation(self._tail))

    def summary(self, max_chars: int) -> str:
        """At most ``max_chars`` characters: all of a short output, else its start and end."""
        if not self.truncated:
            return summarize(self.text(), max_chars=max_chars)
        head = _decode(bytes(self._head)).lstrip()
        tail = _decode(_skip_continuation(self._tail)).rstrip()
        return _join_ends(head, tail, max_chars)


async def drain(stream: trio.abc.ReceiveStream, output: CappedOutput) -> None:
    """Read ``stream`` to its end into ``output``. The caller owns and closes the stream."""
    while chunk := await stream.receive_some(READ_BYTES):
        output.feed(chunk)


def summarize(text: str, *, max_chars: int) -> str:
    """``text`` stripped, or its first and last characters around `` … `` within ``max_chars``.

    The seed caps each summary at 500 characters; the end is kept because a failing build
    prints its error last.
    """
    text = text.strip()
    if len(text) <= max_chars:
        return text
    return _join_ends(text, text, max_chars)


def _join_ends(head: str, tail: str, max_chars: int) -> str:
    room = max_chars - len(_SEPARATOR)
    head_chars = room // 2
    tail_chars = room - head_chars
    return head[:head_chars] + _SEPARATOR + tail[max(0, len(tail) - tail_chars) :]


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _skip_continuation(data: bytearray) -> bytes:
    """The window without the stray UTF-8 continuation bytes its cut may have left in front."""
    start = 0
    while start < min(len(data), 3) and data[start] & 0xC0 == 0x80:
        start += 1
    return bytes(data[start:])
