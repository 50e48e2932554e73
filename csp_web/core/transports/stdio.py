"""The wire on stdin/stdout."""

from __future__ import annotations

import os

import trio


def open_stdio_stream() -> trio.StapledStream[trio.lowlevel.FdStream, trio.lowlevel.FdStream]:
    """The wire on stdin/stdout. fd 1 is then pointed at stderr and fd 0 at /dev/null, so a
    stray print or a child process can never write into (or read from) the protocol stream."""
    wire_out, wire_in = os.dup(1), os.dup(0)
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return trio.StapledStream(trio.lowlevel.FdStream(wire_out), trio.lowlevel.FdStream(wire_in))
