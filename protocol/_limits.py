"""Budgets that bound what one connection may make the codec hold."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Limits:
    """Byte and count caps for received frames (SPEC L-1 to L-3, L-8).

    The defaults fit a task carrying a JSON PAYLOAD or a page of text and keep one hostile
    connection under about a megabyte of buffer, in the spirit of h11's
    ``max_incomplete_event_size``.
    """

    max_line_bytes: int = 256 * 1024
    max_frame_bytes: int = 1024 * 1024
    max_fields: int = 128
    # Empty lines in a row outside a frame (F-1 tolerates them). RFC 9112 2.2 asks a server to
    # ignore "at least one" before a request line; 32 is generous and still stops a flood.
    max_blank_lines: int = 32

    def __post_init__(self) -> None:
        if min(self.max_line_bytes, self.max_frame_bytes, self.max_fields) < 1:
            raise ValueError("limits must be positive")
        if self.max_line_bytes > self.max_frame_bytes:
            raise ValueError("max_line_bytes cannot exceed max_frame_bytes")
        if self.max_blank_lines < 0:
            raise ValueError("max_blank_lines cannot be negative")
