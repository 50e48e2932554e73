"""The ``csp-web`` command: serve, check-config, send, replay, memory-sink.

Exit codes: 0 success; 1 a reply was FAIL (send) or a transcript differed (replay);
2 bad usage or configuration; 3 the daemon or peer could not be reached; 4 (serve) the daemon
stopped but its grace period cut tasks short (each was answered FAIL shutting_down).
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import signal
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from functools import partial

import trio

from protocol import (
    CLOSED,
    NEED_DATA,
    Connection,
    ErrorCode,
    Limits,
    ProtocolError,
    Status,
    Task,
    serialize,
)

from .client import ClientClosed, open_client
from .config import Config
from .config_load import ConfigError, load_config
from .logs import setup_logging

log = logging.getLogger("csp_web.cli")

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_CUT = 0, 1, 2, 3, 4


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="csp-web", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve CSP/1 on stdin/stdout and optionally a socket")
    serve.add_argument("--config", help="YAML file (default $CSP_WEB_CONFIG, else built-in)")
    serve.add_argument("--socket", help="also serve this Unix socket path")
    serve.add_argument("--no-stdin", action="store_true", help="serve the socket only")
    serve.add_argument("--log-json", action="store_true", help="JSON log lines on stderr")
    check = sub.add_parser("check-config", help="load a config strictly and report")
    check.add_argument("path", nargs="?")
    send = sub.add_parser("send", help="send frames (stdin or -e) and print the replies")
    send.add_argument("--socket", help="daemon socket (default: socket.path from config)")
    send.add_argument("--config")
    send.add_argument("-e", dest="frames", action="append", help="a frame; \\n for newlines")
    replay = sub.add_parser("replay", help="replay .csp transcripts and print differences")
    replay.add_argument("files", nargs="+")
    replay.add_argument("--socket", help="replay against a running daemon instead")
    replay.add_argument("--config")
    sink = sub.add_parser("memory-sink", help="run the reference Memory Specialist")
    sink.add_argument("--socket", required=True)
    sink.add_argument("--dir", required=True)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        config = load_config(getattr(args, "config", None) or getattr(args, "path", None))
    except ConfigError as exc:
        print(f"csp-web: config: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.command == "check-config":
        print(f"ok: {args.path or os.environ.get('CSP_WEB_CONFIG') or 'built-in defaults'}")
        return EXIT_OK
    as_json = getattr(args, "log_json", False) or config.daemon.log_json
    setup_logging(config.daemon.log_level, as_json=as_json)
    handlers = {"serve": _serve, "send": _send, "replay": _replay, "memory-sink": _sink}
    try:
        return handlers[args.command](args, config)
    except KeyboardInterrupt:
        return EXIT_OK


def _serve(args: argparse.Namespace, config: Config) -> int:
    from specialists import open_specialists

    from .daemon import StateDirBusy, hold_state_dir, open_stdio_stream, serve_daemon

    socket_path = args.socket or config.socket.path
    if args.no_stdin and not socket_path:
        print("csp-web: --no-stdin needs --socket or socket.path", file=sys.stderr)
        return EXIT_USAGE

    _raise_open_files_limit()

    async def run() -> int:
        stdio = None if args.no_stdin else open_stdio_stream()
        async with open_specialists(config) as (ops, extras):
            return await serve_daemon(
                config,
                ops,
                stdio=stdio,
                socket_path=socket_path,
                extras=extras,
                reload=partial(load_config, args.config),
            )

    try:
        with hold_state_dir(config.daemon.state_dir):  # before anything opens state
            cut = trio.run(run)
    except StateDirBusy as exc:
        print(f"csp-web: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (OSError, ValueError) as exc:
        log.error("cannot serve: %s", exc)
        return EXIT_UNREACHABLE
    return EXIT_CUT if cut else EXIT_OK


def _raise_open_files_limit() -> None:
    # Each socket connection holds a descriptor; the common soft limit of 1024 would cap
    # socket.max_connections below its default, so take what the hard limit allows.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _read_frames(args: argparse.Namespace) -> list[Task]:
    data = (
        "\n\n".join(f.replace("\\n", "\n") for f in args.frames) + "\n\n"
        if args.frames
        else sys.stdin.read()
    )
    codec = Connection(Limits(64 << 20, 64 << 20, 100_000))
    codec.receive_data(data.encode("utf-8"))
    codec.receive_data(b"")
    tasks = []
    while (event := codec.next_event()) not in (NEED_DATA, CLOSED):
        if not isinstance(event, Task):
            raise ProtocolError(ErrorCode.BAD_HEADER, "send takes TASK frames")
        tasks.append(event)
    return tasks


def _send(args: argparse.Namespace, config: Config) -> int:
    path = args.socket or config.socket.path
    if not path:
        print("csp-web: send needs --socket or socket.path", file=sys.stderr)
        return EXIT_USAGE
    try:
        tasks = _read_frames(args)
    except ProtocolError as exc:
        print(f"csp-web: not a valid frame: {exc}", file=sys.stderr)
        return EXIT_USAGE

    async def run() -> int:
        async with open_client(path) as client:
            replies = await client.call_many(list(tasks), timeout_s=600)
        for reply in replies:
            sys.stdout.buffer.write(serialize(reply))
        sys.stdout.flush()
        return EXIT_FAIL if any(r.status is Status.FAIL for r in replies) else EXIT_OK

    try:
        return trio.run(run)
    except (OSError, ClientClosed, trio.TooSlowError) as exc:
        print(f"csp-web: cannot reach {path}: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE


def _replay(args: argparse.Namespace, config: Config) -> int:
    from .replay_runner import replay_files

    with tempfile.TemporaryDirectory(prefix="csp-web-replay-") as state:
        # Its own state even with --socket: never the outbox or cron jobs of a running daemon.
        config = replace(config, daemon=replace(config.daemon, state_dir=state))
        failures = trio.run(replay_files, args.files, config, args.socket)
    return EXIT_FAIL if failures else EXIT_OK


def _sink(args: argparse.Namespace, config: Config) -> int:
    from .memory_sink import serve_memory_sink

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_memory_sink, args.socket, args.dir, config.memory)
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:  # stop: a write in progress finishes in its thread
                    nursery.cancel_scope.cancel()
                    return

    try:
        trio.run(run)
    except OSError as exc:
        log.error("cannot serve: %s", exc)
        return EXIT_UNREACHABLE
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
