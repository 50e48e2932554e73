"""The sans-IO connection: bytes in, frames out; frames in, bytes out (h11's shape)."""

from __future__ import annotations

import enum
from collections import deque

from ._buffer import LineBuffer
from ._errors import ProtocolError
from ._frames import Frame
from ._grammar import parse_block, parse_frame, salvage_id
from ._limits import Limits
from ._serialize import serialize
from .codes import ErrorCode


class Sentinel(enum.Enum):
    """Non-frame results of ``next_event``."""

    NEED_DATA = "NEED_DATA"  # call receive_data() with more bytes
    CLOSED = "CLOSED"  # the peer sent EOF and every frame before it was returned


NEED_DATA = Sentinel.NEED_DATA
CLOSED = Sentinel.CLOSED


class Connection:
    """Parses frames from one peer's byte stream and serializes frames for it.

    Feed bytes with ``receive_data`` (``b""`` means EOF) and call ``next_event`` until it
    returns NEED_DATA or CLOSED. A malformed frame raises ProtocolError once; the connection
    has then skipped to the frame's closing blank line (or, for an over-long line, will skip
    there as bytes arrive), so the caller may answer FAIL and keep reading (SPEC R-6). Work per
    received byte is constant: each byte is scanned for a newline once, and a run of empty
    lines between frames is dropped in one pass. More than ``max_blank_lines`` of them in a row
    raise ``too_many_blank_lines`` (SPEC L-8); the caller should then close the connection.
    """

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self._buffer = LineBuffer()
        self._lines: list[bytes] = []
        self._frame_bytes = 0
        self._skip_line = False  # dropping the tail of an over-long line
        self._skip_frame = False  # dropping lines until the next blank line
        self._blank_run = 0  # empty lines in a row since the last frame ended
        self._eof = False
        self._ahead: deque[Frame | ProtocolError] = deque()  # parsed by ``read_ahead``

    @property
    def in_frame(self) -> bool:
        """Whether a frame has started and not yet ended (for the slowloris deadline)."""
        return bool(self._lines) or self._skip_frame or self._buffer.pending() > 0

    def receive_data(self, data: bytes | bytearray) -> None:
        """Add bytes from the peer; ``b""`` marks EOF. Data after EOF is a RuntimeError."""
        if self._eof:
            raise RuntimeError("receive_data after EOF")
        if data:
            self._buffer.feed(data)
        else:
            self._eof = True

    def next_event(self) -> Frame | Sentinel:
        """The next complete frame, NEED_DATA, or CLOSED; raises ProtocolError."""
        if self._ahead:
            event = self._ahead.popleft()
            if isinstance(event, ProtocolError):
                raise event
            return event
        return self._parse_next()

    def read_ahead(self, most: int) -> None:
        """Unless frames parsed ahead are still waiting, parse up to ``most`` of the complete
        frames buffered now, for ``next_event`` to return in order (a malformed one raises its
        ProtocolError there, in its turn). A caller that handles a read's frames one by one
        parses them in one tight pass first: the parser's code stays hot (bench/daemon.py
        --quick, daemon CPU per pipelined ping, best of six 20,000-frame runs: 55 and 61 us
        with 64 ahead, 66.5 and 70.5 us without; load 3.6-4.3). Their bytes are buffered
        already, so this holds nothing more than the buffer did."""
        ahead = self._ahead
        if ahead:
            return
        while len(ahead) < most:
            try:
                event = self._parse_next()
            except ProtocolError as exc:
                ahead.append(exc)
                continue
            if isinstance(event, Sentinel):
                return
            ahead.append(event)

    def _parse_next(self) -> Frame | Sentinel:
        while True:
            if not (self._lines or self._skip_line or self._skip_frame):
                # A whole frame first: the blank lines' scan is for when none starts here.
                frame = self._whole_frame()
                if frame is not None:
                    return frame
                if self._skip_blank_lines():
                    continue
            if self._skip_line and not self._buffer.skip_line():
                return CLOSED if self._eof else NEED_DATA
            self._skip_line = False
            line = self._buffer.pop_line()
            if line is None:
                return self._no_full_line()
            frame = self._take_line(line)
            if frame is not None:
                return frame

    def send(self, frame: Frame) -> bytes:
        """The bytes that carry ``frame`` to the peer."""
        return serialize(frame)

    def _skip_blank_lines(self) -> bool:
        """Drop the empty lines at the front; whether there were any."""
        most = self.limits.max_blank_lines
        skipped = self._buffer.skip_blank_lines(most + 1 - self._blank_run)
        self._blank_run += skipped
        if self._blank_run > most:
            self._blank_run = 0
            raise ProtocolError(
                ErrorCode.TOO_MANY_BLANK_LINES, f"over {most} empty lines outside a frame"
            )
        return skipped > 0

    def _whole_frame(self) -> Frame | None:
        # Only a frame within every limit takes the fast path; the line-by-line path
        # handles anything else, so both report errors identically.
        limits = self.limits
        peeked = self._buffer.peek_block(limits.max_frame_bytes + 2 * (limits.max_fields + 2))
        if peeked is None:
            return None
        block, end = peeked
        if b"\r" in block:  # a CRLF frame: its lines without their CRs
            lines = [line.removesuffix(b"\r") for line in block.split(b"\n")]
            block = b"\n".join(lines)
        # A block within one line's limit holds no longer line: the common case asks no split.
        if (
            block.count(b"\n") > limits.max_fields
            or len(block) >= limits.max_frame_bytes
            or (
                len(block) > limits.max_line_bytes
                and max(map(len, block.split(b"\n"))) > limits.max_line_bytes
            )
        ):
            return None
        self._buffer.consume_to(end)
        self._blank_run = 0
        return parse_block(block)

    def _no_full_line(self) -> Frame | Sentinel:
        # A CR that may be the first half of a CRLF does not count against the line.
        allowed = self.limits.max_line_bytes + self._buffer.ends_with_cr()
        if self._buffer.pending() > allowed:
            self._buffer.clear()
            self._skip_line = True
            # The dropped bytes began a line, so the blank run has ended here too, as it does
            # when the same line arrives whole (SPEC L-8 must not depend on chunking).
            self._blank_run = 0
            if not self._skip_frame:  # one error per frame
                raise self._oversize(f"line over {self.limits.max_line_bytes} bytes")
        if not self._eof:
            return NEED_DATA
        rest = self._buffer.pop_rest()
        if rest:
            self._take_line(rest)  # a non-empty line never completes a frame by itself
        frame = self._end_frame() if self._lines else None
        return CLOSED if frame is None else frame

    def _take_line(self, line: bytes) -> Frame | None:
        if not line:
            return self._end_frame()
        self._blank_run = 0  # a frame has begun
        if self._skip_frame:
            return None
        if len(line) > self.limits.max_line_bytes:
            raise self._oversize(f"line over {self.limits.max_line_bytes} bytes")
        self._frame_bytes += len(line) + 1
        if self._frame_bytes > self.limits.max_frame_bytes:
            raise self._oversize(f"frame over {self.limits.max_frame_bytes} bytes")
        if len(self._lines) > self.limits.max_fields:
            raise self._oversize(f"more than {self.limits.max_fields} fields")
        self._lines.append(line)
        return None

    def _end_frame(self) -> Frame | None:
        lines, self._lines, self._frame_bytes = self._lines, [], 0
        if self._skip_frame:
            self._skip_frame = False
            return None
        # Blank lines between frames are tolerated, so a frame never starts empty.
        return parse_frame(lines) if lines else None

    def _oversize(self, detail: str) -> ProtocolError:
        lines, self._lines, self._frame_bytes = self._lines, [], 0
        self._skip_frame = True
        return ProtocolError(ErrorCode.FRAME_TOO_LARGE, detail, frame_id=salvage_id(lines))
