"""The csp-web command: serve, send, health, replay, check-config, config, memory-sink, memory,
mcp, nodes, node.

Exit codes: 0 success; 1 a reply was FAIL (send), a transcript differed (replay) or the
daemon is degraded (health);
2 bad usage or configuration, including a socket path that cannot be set up safely
(or a state dir another daemon holds); 3 the daemon or peer could not be reached; 4 (serve) the
daemon stopped but its grace period cut tasks short (each was answered FAIL shutting_down).
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import signal
import sys
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from functools import partial
from importlib import resources

import trio

from csp_web import __version__
from csp_web.app.catalog import config_sections
from csp_web.app.nodes import add_node_commands, node_run_main, nodes_main
from csp_web.app.tracing import check_tracing
from csp_web.cli.discover import SOCKET_HELP, NoDaemonFound, client_socket, daemon_socket
from csp_web.cli.memory import MemoryOptions, add_memory_parser, memory_main
from csp_web.cli.record_mode import RecordMode
from csp_web.cli.send import SendOptions, leaves, send_main
from csp_web.config import Config, ConfigError
from csp_web.config.load import complete_sections, load_config, serving_socket
from csp_web.core.api import extras
from csp_web.core.api.logs import setup_logging
from csp_web.core.transports.unix import SocketSetupError
from specialists.tool.config import workspace_overlaps, workspace_unwritable

log = logging.getLogger(__name__)

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_CUT = 0, 1, 2, 3, 4
DEFAULT_CONFIG = "default_config.yaml"  # package data: the repository's config.yaml
_RUN_DAEMON = ("serve", "mcp", "replay", "check-config")  # commands that open redis.url
_CONFIG_HELP = "YAML configuration file (default: $CSP_WEB_CONFIG, else the embedded defaults)"
# Commands that talk to a running daemon: they print results, not the daemon's op log.
_CLIENTS = ("send", "replay", "nodes", "health", "memory")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="csp-web",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"csp-web {__version__}")
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", help="what to do; COMMAND -h for more"
    )
    serve = sub.add_parser("serve", help="serve CSP/1 on stdin/stdout and optionally a socket")
    serve.add_argument("--config", help=_CONFIG_HELP)
    serve.add_argument("--socket", metavar="PATH", help="also serve this Unix socket path")
    serve.add_argument("--no-stdin", action="store_true", help="serve the socket only")
    serve.add_argument("--log-json", action="store_true", help="JSON log lines on stderr")
    _send_parser(sub)
    add_node_commands(sub)  # nodes approve|list|revoke, node run (csp_web/app/nodes.py)
    replay = sub.add_parser("replay", help="replay .csp transcripts and print differences")
    replay.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="transcript files (.csp); one with a cassette beside it replays offline from it",
    )
    replay.add_argument(
        "--socket", metavar="PATH", help="replay against the daemon at PATH instead"
    )
    replay.add_argument("--config", help=_CONFIG_HELP + "; in-process replay only")
    recording = replay.add_mutually_exclusive_group()
    recording.add_argument(
        "--record-mode",
        choices=[mode.value for mode in RecordMode],
        help="what to do with each FILE's cassette (foo.csp -> foo.cassette.json), as vcrpy:"
        " none replays only; once records a missing one; new_episodes appends new requests;"
        " all records again. A recorded FILE gets the replies received as its expected ones."
        " Default: a cassette that exists replays as none. In-process only",
    )
    recording.add_argument(
        "--record",
        dest="record_mode",
        action="store_const",
        const=RecordMode.ALL.value,
        help="--record-mode all: record every cassette again from the live upstreams"
        " (secrets redacted) and write the replies into each FILE",
    )
    check = sub.add_parser("check-config", help="load a configuration strictly and report")
    check.add_argument(
        "path", nargs="?", metavar="FILE", help="the file (default: $CSP_WEB_CONFIG)"
    )
    config = sub.add_parser("config", help="print configuration")
    config.add_argument(
        "--default",
        action="store_true",
        required=True,
        help="print the embedded default configuration, every setting documented",
    )
    sink = sub.add_parser("memory-sink", help="run the reference Memory Specialist")
    sink.add_argument("--socket", required=True, metavar="PATH", help="Unix socket to serve")
    sink.add_argument("--dir", required=True, help="folder the writes are stored in")
    sink.add_argument("--config", help=_CONFIG_HELP + "; its memory: retention settings")
    add_memory_parser(sub, _CONFIG_HELP)  # memory ls|cat (csp_web/cli/memory.py)
    _mcp_parser(sub)
    health = sub.add_parser(
        "health",
        help="probe a running daemon: exit 0 healthy, 1 degraded (a reason line), 3 unreachable",
    )
    health.add_argument("--socket", metavar="PATH", help=SOCKET_HELP)
    health.add_argument("--config", help=_CONFIG_HELP)
    health.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS", help="default 5")
    return parser


def _mcp_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    mcp = sub.add_parser(
        "mcp",
        help="serve the ops as MCP tools (stdio, or streamable HTTP with --http)",
        description="Serve csp-web's ops as MCP tools, one per op (web_fetch, web_search, ...), "
        "each call a CSP/1 task to the daemon core: a running daemon with --socket, else one "
        "run in this process with --config. See docs/mcp.md.",
    )
    mcp.add_argument("--config", help=_CONFIG_HELP)
    mcp.add_argument("--socket", metavar="PATH", help="use the running daemon at PATH")
    mcp.add_argument(
        "--http",
        metavar="PORT_OR_PATH",
        help="serve streamable HTTP at /mcp on 127.0.0.1:PORT (0: any free port) or on the "
        "Unix socket PATH, instead of stdio; the URL is printed on stdout",
    )
    mcp.add_argument(
        "--tool",
        dest="tools",
        action="append",
        metavar="NAME",
        help="expose only this tool (repeatable; default: every op but IN:SYS, shell_exec "
        "only when tool.exec.workspace_roots is set)",
    )


def _send_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    send = sub.add_parser(
        "send",
        help="send frames (stdin or -e) and print each reply as it arrives",
        description="Send CSP/1 frames to a daemon: each frame goes out as soon as it is "
        "complete and each reply is printed as it arrives. Frames without ID get one unique "
        "across runs. Exit 0 when every reply is OK or PARTIAL, 1 when any is FAIL, 2 on bad "
        "usage or a malformed frame, 3 when the daemon cannot be reached.",
    )
    send.add_argument("--socket", metavar="PATH", help=SOCKET_HELP)
    send.add_argument("--config", help=_CONFIG_HELP)
    send.add_argument(
        "-e",
        dest="frames",
        action="append",
        metavar="FRAME",
        help="a frame to send instead of stdin (repeatable); \\n separates its lines, "
        "escapes inside a quoted value stay the value's own",
    )
    send.add_argument("--json", action="store_true", help="print each reply as one JSON line")
    send.add_argument(
        "--wait",
        action="store_true",
        help="send each frame only after the previous reply arrived (for dependent frames)",
    )
    send.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="how long to wait for each reply (default 600); exit 3 when one does not come",
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "config":
        return _print_default_config()
    try:
        path = getattr(args, "config", None) or getattr(args, "path", None)
        config = complete_sections(load_config(path, sections=config_sections()), config_sections())
    except ConfigError as exc:
        print(f"csp-web: config: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.command in _RUN_DAEMON and config.redis.shared and not extras.installed("redis"):
        # A fleet member without its shared state would run cron and quotas alone: refuse.
        setting = "redis.url" if config.redis.url else "redis.sentinel"
        print(f"csp-web: {setting} is set: {extras.install_hint('redis')}", file=sys.stderr)
        return EXIT_USAGE
    if args.command == "check-config":
        print(f"ok: {args.path or os.environ.get('CSP_WEB_CONFIG') or 'built-in defaults'}")
        for root, path in workspace_overlaps(config):
            print(f"note: tool.exec.workspace_roots: {root} overlaps {path}: read-only there")
        for unwritable in workspace_unwritable(config):
            print(f"note: tool.exec.workspace_roots: {unwritable}")
        return EXIT_OK
    as_json = getattr(args, "log_json", False) or config.daemon.log_json
    level = config.daemon.log_level
    if args.command in _CLIENTS and level in ("debug", "info"):
        level = "warning"  # client commands print results, not the daemon's op log
    setup_logging(level, as_json=as_json)
    handlers: dict[str, Callable[[argparse.Namespace, Config], int]] = {
        "serve": _serve,
        "send": _send,
        "health": _health,
        "replay": _replay,
        "memory-sink": _sink,
        "memory": _memory,
        "mcp": _mcp,
        "nodes": nodes_main,
        "node": lambda args, config: node_run_main(args),
    }
    try:
        return handlers[args.command](args, config)
    except KeyboardInterrupt:
        return EXIT_OK


def _print_default_config() -> int:
    try:
        text = resources.files("csp_web").joinpath(DEFAULT_CONFIG).read_text("utf-8")
    except OSError as exc:
        print(f"csp-web: the embedded {DEFAULT_CONFIG} is missing: {exc}", file=sys.stderr)
        return EXIT_USAGE
    sys.stdout.write(text)
    return EXIT_OK


def _run_service(run: Callable[[], Awaitable[int | None]], what: str) -> int:
    """trio.run ``run`` and return its exit code (None is EXIT_OK); a startup failure is one
    line on stderr, never a traceback."""
    try:
        code = trio.run(run)
    except BaseException as exc:
        causes = leaves(exc)
        if not causes or not all(isinstance(c, SocketSetupError | OSError) for c in causes):
            raise
        setup = [c for c in causes if isinstance(c, SocketSetupError)]
        print(f"csp-web: {what}: {(setup or causes)[0]}", file=sys.stderr)
        return EXIT_USAGE if setup else EXIT_UNREACHABLE
    return EXIT_OK if code is None else code


def _serve(args: argparse.Namespace, config: Config) -> int:
    from csp_web.app.compose import open_app_daemon
    from csp_web.app.metrics_serve import open_metrics
    from csp_web.core.daemon.lifecycle import serve
    from csp_web.core.daemon.statedir import StateDirBusy, hold_state_dir
    from csp_web.core.transports.stdio import open_stdio_stream
    from csp_web.core.transports.systemd import activated_socket_path

    # Read systemd's variables (and drop them) before any child process starts.
    activated = activated_socket_path()
    socket_path = args.socket or config.socket.path or activated
    if args.no_stdin and not socket_path:
        print("csp-web: --no-stdin needs --socket or socket.path", file=sys.stderr)
        return EXIT_USAGE
    try:
        config = serving_socket(config, socket_path)
        check_tracing(config.otel)
    except ConfigError as exc:
        print(f"csp-web: config: {exc}", file=sys.stderr)
        return EXIT_USAGE

    def reload() -> Config:  # on SIGHUP, as served: a ConfigError keeps the running settings
        new = load_config(args.config, sections=config_sections(), regular_only=True)
        return serving_socket(complete_sections(new, config_sections()), socket_path)

    _raise_open_files_limit()

    async def run() -> int:
        stdio = None if args.no_stdin else open_stdio_stream()
        async with open_app_daemon(config) as daemon, open_metrics(config, daemon):
            cut = await serve(
                daemon,
                stdio=stdio,
                socket_path=socket_path,
                reload=reload,
            )
        return EXIT_CUT if cut else EXIT_OK

    try:
        # Before anything opens state; the lock file names the socket for client commands.
        with hold_state_dir(config.daemon.state_dir, socket_path=socket_path):
            return _run_service(run, "cannot serve")
    except StateDirBusy as exc:
        print(f"csp-web: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _raise_open_files_limit() -> None:
    # Each socket connection holds a descriptor; the common soft limit of 1024 would cap
    # socket.max_connections below its default, so take what the hard limit allows.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _send(args: argparse.Namespace, config: Config) -> int:
    path = client_socket("send", args.socket, config)
    if path is None:
        return EXIT_UNREACHABLE
    frames = tuple(args.frames) if args.frames else None
    return send_main(SendOptions(path, frames, args.json, args.wait, args.timeout))


def _health(args: argparse.Namespace, config: Config) -> int:
    from csp_web.cli.health import HealthOptions, health_main

    try:
        path = daemon_socket(args.socket, config)
    except NoDaemonFound as exc:  # a probe's answer, as for a daemon that does not answer
        print(f"unreachable: {exc}")
        return EXIT_UNREACHABLE
    return health_main(HealthOptions(path, args.timeout))


def _memory(args: argparse.Namespace, config: Config) -> int:
    path = client_socket("memory", args.socket, config)
    if path is None:
        return EXIT_UNREACHABLE
    return memory_main(MemoryOptions(path, args.memory_action, args.target, args.timeout))


def _replay(args: argparse.Namespace, config: Config) -> int:
    from csp_web.app.compose import open_app_daemon
    from csp_web.cli.replay import Unreachable, replay_files

    if not args.socket and not _tracing_ready(config):
        return EXIT_USAGE
    with tempfile.TemporaryDirectory(prefix="csp-web-replay-") as state:
        # Its own state even with --socket: never the outbox or cron jobs of a running daemon.
        config = replace(config, daemon=replace(config.daemon, state_dir=state))
        mode = None if args.record_mode is None else RecordMode(args.record_mode)
        if mode is not None and args.socket:
            print(
                "csp-web replay: --record and --record-mode run in-process; drop --socket",
                file=sys.stderr,
            )
            return EXIT_USAGE
        try:
            failures = trio.run(
                partial(replay_files, open_daemon=open_app_daemon, mode=mode),
                args.files,
                config,
                args.socket,
            )
        except Unreachable as exc:
            print(f"csp-web: replay: {exc}", file=sys.stderr)
            return EXIT_UNREACHABLE
    return EXIT_FAIL if failures else EXIT_OK


def _tracing_ready(config: Config) -> bool:
    """Whether an in-process daemon may start as ``otel:`` asks; else says why on stderr."""
    try:
        check_tracing(config.otel)
    except ConfigError as exc:
        print(f"csp-web: config: {exc}", file=sys.stderr)
        return False
    return True


def _sink(args: argparse.Namespace, config: Config) -> int:
    from csp_web.sink.server import serve_memory_sink

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_memory_sink, args.socket, args.dir, config.memory)
            log.info("csp-web memory-sink ready (socket %s, store %s)", args.socket, args.dir)
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:  # stop: a write in progress finishes in its thread
                    nursery.cancel_scope.cancel()
                    return

    return _run_service(run, "memory-sink")


def _mcp(args: argparse.Namespace, config: Config) -> int:
    if not extras.installed("mcp"):
        print(f"csp-web: mcp: not_available:{extras.install_hint('mcp')}", file=sys.stderr)
        return EXIT_USAGE
    if not args.socket and not _tracing_ready(config):  # its daemon runs in this process
        return EXIT_USAGE
    from csp_web.app.compose import open_in_process_daemon
    from csp_web.app.mcp_attach import NoDaemonSocket, run_mcp_face
    from csp_web.mcp_face.serve import FaceOptions, serve_mcp_face
    from csp_web.mcp_face.tools import ToolTableError

    tools = tuple(args.tools) if args.tools else None

    def face(socket_path: str | None, config: Config) -> int:
        async def run() -> int:
            options = FaceOptions(socket_path, args.http, tools)
            code = EXIT_OK
            try:
                await serve_mcp_face(config, options, in_process=open_in_process_daemon)
            except* ToolTableError as group:
                print(f"csp-web: mcp: {leaves(group)[0]}", file=sys.stderr)
                code = EXIT_USAGE
            return code

        return _run_service(run, "mcp")

    if args.socket:
        return face(args.socket, config)
    try:  # the user's running daemon, else one in process serving its socket for the next
        return run_mcp_face(
            config, attached=lambda path: face(path, config), own=partial(face, None)
        )
    except NoDaemonSocket as exc:
        print(f"csp-web: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ConfigError as exc:
        print(f"csp-web: config: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
