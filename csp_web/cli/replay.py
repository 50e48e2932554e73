"""``csp-web replay``: run transcripts in-process (a fresh daemon core) or over a socket.

In-process replay brings its own reference Memory Specialist, in a temporary folder that lives
as long as the replay, so transcripts that write and read memory replay the same on every run.
A transcript with a cassette beside it (``foo.csp`` + ``foo.cassette.json``) replays with its
upstream exchanges served offline; a record mode (csp_web.cli.record_mode) writes that
cassette from the live upstreams (csp_web.cli.cassette_run) and the replies received into the
transcript (csp_web.cli.transcript_write).
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, replace
from functools import partial

import trio
import trio.testing

from csp_web.cli.cassette import CassetteError, cassette_path, read_cassette
from csp_web.cli.cassette_run import (
    OpenDaemon,
    Upstream,
    record_transcript,
    replay_with_cassette,
)
from csp_web.cli.record_mode import Plan, RecordMode, plan, recorded
from csp_web.cli.transcript import (
    Transcript,
    TranscriptError,
    compare,
    parse_transcript,
    replay,
)
from csp_web.cli.transcript_write import rewrite_expected
from csp_web.config import Config
from csp_web.core.api.context import Peer
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.core.wire.connection import Shutdown, StreamOptions, serve_connection
from csp_web.sink.server import serve_memory_sink
from protocol import Reply

# A line printed under a transcript that says what a recording wrote, not a difference.
NOTE = "note: "


async def replay_in_memory(
    transcript: Transcript,
    dispatcher: Dispatcher,
    *,
    heard: list[list[Reply]] | None = None,
) -> list[str]:
    """Replay over an in-memory stream pair served by ``dispatcher``'s connection loop;
    ``heard`` gets each step's replies (``transcript.replay``)."""
    client, server = trio.testing.memory_stream_pair()
    options = StreamOptions(dispatcher.services.config.connection, None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            serve_connection, server, dispatcher, Peer("replay"), options, Shutdown()
        )
        try:
            return await replay(transcript, client, heard=heard)
        finally:
            await client.aclose()


class Unreachable(Exception):
    """The daemon socket a replay was pointed at cannot be connected to."""

    def __init__(self, path: str, cause: OSError) -> None:
        super().__init__(f"cannot reach {path}: {cause.strerror or cause}")


async def replay_over_socket(transcript: Transcript, path: str) -> list[str]:
    """Replay over a connection to the daemon at ``path``; Unreachable when there is none."""
    try:
        stream = await trio.open_unix_socket(path)
    except OSError as exc:
        raise Unreachable(path, exc) from exc
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
    mode: RecordMode | None = None,
    upstream: Upstream | None = None,
) -> int:
    """Replay each file, print its differences; the number of failing files. Without
    ``socket_path`` the replay is in-process (a daemon from ``open_daemon``), with its own
    Memory Specialist. ``mode`` (in-process only; csp_web.cli.record_mode) says which
    cassettes are recorded, from ``upstream`` (default: the live internet); a file whose
    cassette was recorded gets the replies received written in as its expected ones."""
    run = _Run(open_daemon, mode, upstream or Upstream())
    if socket_path is not None:
        return await _replay_all(files, config, socket_path, run)
    async with own_memory_sink(config) as with_sink:
        return await _replay_all(files, with_sink, None, run)


@dataclass(frozen=True)
class _Run:
    """How this replay runs its in-process daemons and their cassettes."""

    open_daemon: OpenDaemon
    mode: RecordMode | None
    upstream: Upstream


@dataclass(frozen=True)
class _File:
    """One transcript file: its name, its text and what was parsed from it."""

    name: str
    text: str
    transcript: Transcript


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
                file = _File(name, text, parse_transcript(text, name))
            except (OSError, UnicodeDecodeError, TranscriptError) as exc:
                print(f"FAIL {name}: {exc}")
                failures += 1
                continue
            cassette = cassette_path(name)
            how = plan(run.mode, await trio.Path(cassette).exists())
            if how is not Plan.LIVE:
                own = _own_state(config, index)
                diffs = await _with_cassette(file, cassette, own, socket_path, run, how)
            elif socket_path:
                diffs = await replay_over_socket(file.transcript, socket_path)
            else:
                if shared is None:
                    daemon = await stack.enter_async_context(run.open_daemon(config))
                    shared = daemon.dispatcher
                diffs = await replay_in_memory(file.transcript, shared)
            failing = any(not line.startswith(NOTE) for line in diffs)
            print(f"{'FAIL' if failing else 'ok'}   {name}")
            for line in diffs:
                print(line)
            failures += failing
        sys.stdout.flush()
    return failures


def _own_state(config: Config, index: int) -> Config:
    # A cassette's run has its own state and cache: nothing another transcript left is served.
    state_dir = os.path.join(config.daemon.state_dir, f"cassette-{index}")
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    return replace(config, daemon=replace(config.daemon, state_dir=state_dir))


async def _with_cassette(
    file: _File,
    cassette: str,
    config: Config,
    socket_path: str | None,
    run: _Run,
    how: Plan,
) -> list[str]:
    if socket_path is not None:
        # A running daemon's client cannot be pointed at the cassette's origin.
        return [f"{cassette}: a cassette replays in-process only (without --socket)"]
    try:
        if recorded(how):
            return await _record(file, cassette, config, run, how)
        return await replay_with_cassette(
            file.transcript, cassette, config, replay_in_memory, open_daemon=run.open_daemon
        )
    except (OSError, CassetteError) as exc:
        return [str(exc)]


async def _record(file: _File, cassette: str, config: Config, run: _Run, how: Plan) -> list[str]:
    """Record ``file``'s cassette (appending to it for ``Plan.EPISODES``), then write the
    replies received into the transcript; the differences left (a reply that never came)
    and a note of what was written."""
    kept = None
    if how is Plan.EPISODES:
        kept = await read_cassette(cassette)  # a corrupt one is refused, never overwritten
    heard: list[list[Reply]] = []
    await record_transcript(
        file.transcript,
        cassette,
        config,
        partial(replay_in_memory, heard=heard),
        run.upstream,
        open_daemon=run.open_daemon,
        kept=kept,
    )
    text, changed = rewrite_expected(file.text, file.transcript, heard)
    notes = [f"{NOTE}recorded {cassette}"] if await trio.Path(cassette).exists() else []
    if changed:
        await _write_atomically(file.name, text)
        notes.append(f"{NOTE}wrote {changed} expected {'reply' if changed == 1 else 'replies'}")
    left = parse_transcript(text, file.name)
    return notes + [
        f"step {number}: {line}"
        for number, (step, replies) in enumerate(zip(left.steps, heard, strict=False), 1)
        for line in compare(step.expected, replies)
    ]


async def _write_atomically(path: str, text: str) -> None:
    await trio.Path(path + ".tmp").write_text(text, "utf-8")
    await trio.Path(path + ".tmp").rename(path)
