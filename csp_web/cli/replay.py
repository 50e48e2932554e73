"""``csp-web replay``: run transcripts in-process (a fresh daemon core) or over a socket.

In-process replay brings its own reference Memory Specialist, in a temporary folder that lives
as long as the replay, so transcripts that write and read memory replay the same on every run.
A transcript with a cassette beside it (``foo.csp`` + ``foo.cassette.json``) replays with its
upstream exchanges served offline; ``record`` writes that cassette from the live upstreams
(csp_web.cli.cassette_run).
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, replace

import trio
import trio.testing

from csp_web.cli.cassette import CassetteError, cassette_path
from csp_web.cli.cassette_run import (
    OpenDaemon,
    Upstream,
    record_transcript,
    replay_with_cassette,
)
from csp_web.cli.transcript import Transcript, TranscriptError, parse_transcript, replay
from csp_web.config import Config
from csp_web.core.api.context import Peer
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.core.wire.connection import Shutdown, StreamOptions, serve_connection
from csp_web.sink.server import serve_memory_sink


async def replay_in_memory(transcript: Transcript, dispatcher: Dispatcher) -> list[str]:
    """Replay over an in-memory stream pair served by ``dispatcher``'s connection loop."""
    client, server = trio.testing.memory_stream_pair()
    options = StreamOptions(dispatcher.services.config.connection, None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            serve_connection, server, dispatcher, Peer("replay"), options, Shutdown()
        )
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


async def replay_files(
    files: Sequence[str],
    config: Config,
    socket_path: str | None,
    *,
    open_daemon: OpenDaemon,
    record: bool = False,
    upstream: Upstream | None = None,
) -> int:
    """Replay each file, print its differences; the number of failing files. Without
    ``socket_path`` the replay is in-process (a daemon from ``open_daemon``), with its own
    Memory Specialist. ``record``
    (in-process only) writes each file's cassette from ``upstream`` (default: the live
    internet) and still reports how the replies differ from the transcript."""
    run = _Run(open_daemon, record, upstream or Upstream())
    if socket_path is not None:
        return await _replay_all(files, config, socket_path, run)
    async with own_memory_sink(config) as with_sink:
        return await _replay_all(files, with_sink, None, run)


@dataclass(frozen=True)
class _Run:
    """How this replay runs its in-process daemons and their cassettes."""

    open_daemon: OpenDaemon
    record: bool
    upstream: Upstream


async def _replay_all(
    files: Sequence[str],
    config: Config,
    socket_path: str | None,
    run: _Run,
) -> int:
    failures = 0
    async with AsyncExitStack() as stack:
        shared: Dispatcher | None = None  # one daemon for the transcripts without a cassette
        for index, name in enumerate(files):
            try:
                text = await trio.Path(name).read_text("utf-8")
                transcript = parse_transcript(text, name)
            except (OSError, TranscriptError) as exc:
                print(f"FAIL {name}: {exc}")
                failures += 1
                continue
            cassette = cassette_path(name)
            if run.record or await trio.Path(cassette).exists():
                own = _own_state(config, index)
                diffs = await _with_cassette(transcript, cassette, own, socket_path, run)
            elif socket_path:
                diffs = await replay_over_socket(transcript, socket_path)
            else:
                if shared is None:
                    daemon = await stack.enter_async_context(run.open_daemon(config))
                    shared = daemon.dispatcher
                diffs = await replay_in_memory(transcript, shared)
            print(f"{'FAIL' if diffs else 'ok'}   {name}")
            for line in diffs:
                print(line)
            failures += bool(diffs)
        sys.stdout.flush()
    return failures


def _own_state(config: Config, index: int) -> Config:
    # A cassette's run has its own state and cache: nothing another transcript left is served.
    state_dir = os.path.join(config.daemon.state_dir, f"cassette-{index}")
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    return replace(config, daemon=replace(config.daemon, state_dir=state_dir))


async def _with_cassette(
    transcript: Transcript,
    cassette: str,
    config: Config,
    socket_path: str | None,
    run: _Run,
) -> list[str]:
    if socket_path is not None:
        # A running daemon's client cannot be pointed at the cassette's origin.
        return [f"{cassette}: a cassette replays in-process only (without --socket)"]
    if run.record:
        return await record_transcript(
            transcript,
            cassette,
            config,
            replay_in_memory,
            run.upstream,
            open_daemon=run.open_daemon,
        )
    try:
        return await replay_with_cassette(
            transcript, cassette, config, replay_in_memory, open_daemon=run.open_daemon
        )
    except (OSError, CassetteError) as exc:
        return [str(exc)]
