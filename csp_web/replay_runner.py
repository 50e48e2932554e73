"""``csp-web replay``: run transcripts in-process (a fresh daemon core) or over a socket."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import trio
import trio.testing

from .config import Config
from .connection import Shutdown, StreamOptions, serve_stream
from .context import Peer
from .daemon import build_dispatcher
from .dispatch import Dispatcher
from .outbox import open_outbox
from .transcript import Transcript, TranscriptError, parse_transcript, replay


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


async def replay_files(files: Sequence[str], config: Config, socket_path: str | None) -> int:
    """Replay each file, print its differences; the number of failing files."""
    from specialists import open_specialists

    failures = 0
    async with (
        open_outbox(config.outbox_path, config.outbox, config.memory) as outbox,
        open_specialists(config) as (ops, extras),
    ):
        dispatcher = build_dispatcher(config, outbox, ops, extras=extras)
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
