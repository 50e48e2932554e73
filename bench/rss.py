"""Daemon RSS over a million pipelined pings (issue 21 §5): does memory stay flat?

``csp-web serve`` in its own process, audited as in production (IN:SYS summaries into the
durable outbox, delivered to the embedded Memory Specialist); 10 connections keep pings
pipelined until ``--frames`` replies came back, each connection opened afresh every
``--per-connection`` frames (so per-connection state is made and dropped, as with real
clients). The daemon's RSS is printed at 100k frames and at every further tenth; the goal is
RSS(1M) - RSS(100k) <= 10 MB. The anchor, RSS after the warm-up, is measured in the same run.

    python bench/rss.py [--frames 1000000] [--per-connection 20000]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.daemon import PING, read_replies, rss_mb, start_daemon
from protocol import Connection

CONNECTIONS = 10
WINDOW = 100  # pings in flight per connection


async def pipeline(path: str, frames: int) -> None:
    """``frames`` pings on one new connection, ``WINDOW`` in flight."""
    stream = await trio.open_unix_socket(path)
    codec = Connection()
    async with stream:
        for _ in range(frames // WINDOW):
            await stream.send_all(PING * WINDOW)
            await read_replies(stream, codec, WINDOW)


async def run(path: str, pid: int, frames: int, per_connection: int) -> None:
    step = 100_000
    await pipeline(path, 10_000)  # warm-up: imports, caches, the outbox's first pages
    anchor = rss_mb(pid)
    print(f"RSS after a 10k warm-up: {anchor:.1f} MB")
    done = 0
    marks: dict[int, float] = {}
    while done < frames:
        async with trio.open_nursery() as nursery:
            for _ in range(CONNECTIONS):
                nursery.start_soon(pipeline, path, per_connection)
        done += CONNECTIONS * per_connection
        if done % step == 0:
            marks[done] = rss_mb(pid)
            print(f"  {done:>9,} frames: RSS {marks[done]:.1f} MB", flush=True)
    growth = marks[max(marks)] - marks[step]
    print(
        f"RSS at {step:,} frames {marks[step]:.1f} MB, at {max(marks):,} {marks[max(marks)]:.1f}"
        f" MB: +{growth:.1f} MB (goal <= 10 MB; {growth * 1e6 / (max(marks) - step):.1f} B/frame)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=1_000_000)
    parser.add_argument("--per-connection", type=int, default=10_000)
    args = parser.parse_args()
    if args.frames % (CONNECTIONS * args.per_connection) or args.frames < 100_000:
        raise SystemExit("--frames must be >= 100000 and a multiple of 10 x --per-connection")
    workdir = tempfile.mkdtemp(prefix="csp-rss-", dir="/tmp")
    proc, path = start_daemon(workdir, audit_sys=True, synchronous="normal", memory_socket=None)
    try:
        trio.run(run, path, proc.pid, args.frames, args.per_connection)
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"reproduce: python bench/rss.py --frames {args.frames} --per-connection "
          f"{args.per_connection}")  # fmt: skip


if __name__ == "__main__":
    main()
