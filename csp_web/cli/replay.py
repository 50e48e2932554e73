"""``csp-web replay``: run transcripts in-process (a fresh daemon core) or over a socket.

In-process replay brings its own reference Memory Specialist, in a temporary folder that lives
as long as the replay, so transcripts that write and read memory replay the same on every run.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace

import trio
import trio.testing

from csp_web.cli.transcript import Transcript, TranscriptError, parse_transcript, replay
from csp_web.config import Config
from csp_web.core.connection import Shutdown, StreamOptions, serve_stream
from csp_web.core.context import Peer
from csp_web.core.dispatch import Dispatcher
from csp_web.memory.sink.server import serve_memory_sink


async def replay_in_memory(transcript: Transcript, dispatcher: Dispatcher) -> list[str]:
    """Replay over an in-memory stream pair served by ``dispatcher``'s connection loop."""
    client, server = trio.testing.memory_stream_pair()
    options = StreamOptions(dispatcher.services.config.connection, None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_stream, server, dispatcher, Peer("replay"), options, Shutdown())
        try:
            return await replay(transcript, client)
        finally:
            await client.aclose()


async def replay_over_socket(transcript: Transcript, path: str) -> list[str]:
    stream = await trio.open_unix_socket(path)
    async with stream:
        return await replay(transcript, stream)


@asynccontextmanager
async def own_memory_sink(config: Config) -> AsyncIterator[Config]:
    """Run a fresh reference Memory Specialist for the block; ``config`` pointed at it, with
    the daemon's state in the same temporary folder."""
    with tempfile.TemporaryDirectory(prefix="csp-web-replay-", dir="/tmp") as folder:
        socket_path = os.path.join(folder, "sock", "memory.sock")
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_memory_sink, socket_path, os.path.join(folder, "memory"))
            yield replace(
                config,
                daemon=replace(config.daemon, state_dir=os.path.join(folder, "state")),
                memory=replace(config.memory, socket_path=socket_path),
            )
            nursery.cancel_scope.cancel()


async def replay_files(files: Sequence[str], config: Config, socket_path: str | None) -> int:
    """Replay each file, print its differences; the number of failing files. Without
    ``socket_path`` the replay is in-process, with its own Memory Specialist."""
    if socket_path is not None:
        return await _replay_all(files, config, socket_path)
    async with own_memory_sink(config) as with_sink:
        return await _replay_all(files, with_sink, None)


async def _replay_all(files: Sequence[str], config: Config, socket_path: str | None) -> int:
    from csp_web.app.compose import open_app_daemon

    failures = 0
    async with open_app_daemon(config) as daemon:
        dispatcher = daemon.dispatcher
        for name in files:
            try:
                text = await trio.Path(name).read_text("utf-8")
                transcript = parse_transcript(text, name)
            except (OSError, TranscriptError) as exc:
                print(f"FAIL {name}: {exc}")
                failures += 1
                continue
            if socket_path:
                diffs = await replay_over_socket(transcript, socket_path)
            else:
                diffs = await replay_in_memory(transcript, dispatcher)
            print(f"{'FAIL' if diffs else 'ok'}   {name}")
            for line in diffs:
                print(line)
            failures += bool(diffs)
        sys.stdout.flush()
    return failures
