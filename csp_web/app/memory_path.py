"""The embedded Memory Specialist: the reference sink running inside the daemon.

With no ``memory.socket_path`` (the shipped default) the daemon still delivers every memory
write as a CSP/1 frame, to this sink, so the outbox drains and a first run never piles writes up
forever: the store under ``<state_dir>/memory`` is bounded by the retention settings. Each
connection is an in-process socket pair (no path on disk another process could open) served by
the sink's own lean loop, as ``csp-web memory-sink`` serves its socket; delivery and the relay
see a ``MemoryLink`` and nothing else.
"""

from __future__ import annotations

import functools
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from csp_web.config import Config
from csp_web.core.api.context import Peer
from csp_web.core.api.ports import MemoryPath
from csp_web.memory.link import MemoryLink, socket_link
from csp_web.memory.outbox import Outbox, open_outbox
from csp_web.memory.relay import MemoryRelay
from csp_web.sink.server import MemorySink, open_memory_sink
from protocol import format_decimal

EMBEDDED = "embedded"


@asynccontextmanager
async def open_memory_link(config: Config) -> AsyncIterator[tuple[MemoryLink, MemorySink | None]]:
    """The link to the configured Memory Specialist, and the embedded sink when it is the one.

    The embedded sink and its connections end on exit: leave this context after the outbox.
    """
    link = socket_link(config.memory)
    if link is not None:
        yield link, None
        return
    peer = Peer(EMBEDDED, os.getuid(), os.getpid())
    async with (
        open_memory_sink(config.memory_dir, config.memory) as sink,
        trio.open_nursery() as connections,
    ):

        async def connect() -> trio.abc.Stream:
            ours, theirs = trio.socket.socketpair()
            connections.start_soon(sink.serve_connection, trio.SocketStream(theirs), peer)
            return trio.SocketStream(ours)

        timeout_s = config.memory.connect_timeout_s
        yield MemoryLink(connect, name=EMBEDDED, connect_timeout_s=timeout_s), sink
        connections.cancel_scope.cancel()


def describe(sink: MemorySink) -> str:
    """The embedded store's figures for ``REQ:stats`` (a ``MEMORY`` line)."""
    store = sink.store
    return (
        f"embedded,count:{store.count},bytes:{store.bytes},"
        f"max_bytes:{store.retention.max_bytes},max_age_s:{format_decimal(store.retention.max_age_s)},"
        f"commits:{sink.commits.commits},failed_commits:{sink.commits.failed_commits}"
    )


def outbox_path(config: Config, outbox: Outbox, link: MemoryLink | None = None) -> MemoryPath:
    """``outbox`` as the daemon's memory path, relaying IN:MEMORY frames over ``link`` (by
    default to ``memory.socket_path``; with neither, they are memory_unavailable)."""
    return MemoryPath(outbox, MemoryRelay(config.memory, link))


@asynccontextmanager
async def open_memory_path(config: Config) -> AsyncIterator[MemoryPath]:
    """The configured memory path: the outbox at ``config.outbox_path`` delivering to
    ``memory.socket_path``, else to the embedded sink (whose figures ``REQ:stats`` shows on a
    ``MEMORY`` line); IN:MEMORY frames are relayed to the same one. All closed on exit, the
    outbox before the sink."""
    async with (
        open_memory_link(config) as (link, embedded),
        open_outbox(config.outbox_path, config.outbox, config.memory, link=link) as outbox,
    ):
        if embedded is None:
            yield MemoryPath(outbox, MemoryRelay(config.memory, link))
            return
        lines = {"MEMORY": functools.partial(describe, embedded)}
        storage = {"memory": lambda: embedded.commits.storage_full}
        yield MemoryPath(outbox, MemoryRelay(config.memory, link), lines, storage)
