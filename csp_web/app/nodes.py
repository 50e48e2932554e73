"""``csp-web nodes approve CODE | list | revoke NAME`` (the operator's side, talking to the
running daemon over its socket) and ``csp-web node run`` (the reference node).

Exit codes as the other commands: 0 done, 1 the daemon answered FAIL, 2 bad usage, 3 the
daemon could not be reached; ``node run`` also 5 when its token or pairing is refused.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import trio

from csp_web.cli.discover import SOCKET_HELP, client_socket
from csp_web.client.trio_client import ClientClosed, open_client
from csp_web.config import Config
from protocol import Reply, Status, Task

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3


def add_node_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    nodes = sub.add_parser("nodes", help="list, approve or revoke paired nodes")
    nodes.add_argument("--socket", metavar="PATH", help=SOCKET_HELP)
    nodes.add_argument("--config", help="YAML configuration file (default: $CSP_WEB_CONFIG)")
    nodes.add_argument("--json", action="store_true", help="print the daemon's reply as JSON")
    actions = nodes.add_subparsers(
        dest="nodes_action", required=True, metavar="ACTION", help="list, approve or revoke"
    )
    actions.add_parser("list", help="paired nodes: platform, capabilities, connected, seen")
    approve = actions.add_parser("approve", help="approve a node's pairing code")
    approve.add_argument("code", metavar="CODE")
    revoke = actions.add_parser("revoke", help="forget a node and cut its link now")
    revoke.add_argument("name", metavar="NAME")
    node = sub.add_parser("node", help="run the reference node")
    run = node.add_subparsers(
        dest="node_action", required=True, metavar="ACTION", help="run: serve a daemon's tasks"
    )
    _node_run_parser(run.add_parser("run", help="connect to a daemon and serve its tasks"))


def _node_run_parser(run: argparse.ArgumentParser) -> None:
    run.add_argument("--connect", required=True, help="the daemon's node socket, or host:port")
    run.add_argument("--name", required=True, help="this node's name ([a-z0-9._-])")
    run.add_argument("--config", help=argparse.SUPPRESS)
    run.add_argument("--token-file", help="where the token is kept (default: per name)")
    run.add_argument("--fingerprint", help="the daemon's TLS certificate SHA-256 (host:port)")
    run.add_argument("--display", help="X display for screen_record (default: $DISPLAY)")
    run.add_argument("--camera-device", default="/dev/video0", help="V4L2 camera device")
    run.add_argument(
        "--camera-source", help="an ffmpeg lavfi source instead of a camera (testsrc=...)"
    )
    run.add_argument("--location", help="a fixed position LAT,LON[,ACCURACY_M]")
    run.add_argument("--max-record-s", type=float, default=30.0, help="screen_record cap")


def _default_token_file(name: str) -> str:
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return os.path.join(base, "csp-web-node", f"{name}.token")


def node_run_main(args: argparse.Namespace) -> int:
    from specialists.node.agent import NodeOptions, run_node
    from specialists.node.backends import BackendOptions

    location = None
    if args.location:
        try:
            parts = [float(p) for p in args.location.split(",")]
        except ValueError:
            parts = []
        if len(parts) not in (2, 3):
            print("csp-web: --location is LAT,LON[,ACCURACY_M]", file=sys.stderr)
            return EXIT_USAGE
        location = (parts[0], parts[1], parts[2] if len(parts) == 3 else 0.0)
    backends = BackendOptions(
        display=args.display,
        camera_device=args.camera_device,
        camera_source=args.camera_source,
        location=location,
        max_record_s=args.max_record_s,
    )
    token_file = args.token_file or _default_token_file(args.name)
    options = NodeOptions(args.connect, args.name, token_file, args.fingerprint, backends=backends)
    return trio.run(run_node, options)


def nodes_main(args: argparse.Namespace, config: Config) -> int:
    path = client_socket("nodes", args.socket, config)
    if path is None:
        return EXIT_UNREACHABLE
    fields = [("ACTION", args.nodes_action)]
    if args.nodes_action == "approve":
        fields.append(("CODE", args.code))
    elif args.nodes_action == "revoke":
        fields.append(("NAME", args.name))
    task = Task("nodes", "SYS", "NODES", None, tuple(fields))
    try:
        reply = trio.run(_call, path, task)
    except (OSError, ClientClosed, trio.TooSlowError) as exc:
        print(f"csp-web: cannot reach the daemon at {path}: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    if args.json:
        print(json.dumps({"status": str(reply.status), "fields": reply.fields}))
    else:
        print(render(reply))
    return EXIT_OK if reply.status is Status.OK else EXIT_FAIL


async def _call(path: str, task: Task) -> Reply:
    async with open_client(path) as client:
        return await client.call(task, timeout_s=60.0)


def _pending_table(values: list[str]) -> list[str]:
    """The pairings waiting for ``csp-web nodes approve``, when there are any."""
    rows = [json.loads(value) for value in values if value.startswith("{")]
    if not rows:
        return []
    lines = ["", f"{'PENDING CODE':<13} {'NAME':<20} {'PLATFORM':<18} {'SOURCE':<24} EXPIRES IN"]
    for row in rows:
        lines.append(
            f"{row['code']:<13} {row['name']:<20} {row['platform']:<18} {row['source']:<24} "
            f"{row['expires_in_s']} s"
        )
    return lines


def render(reply: Reply) -> str:
    """The reply for a person: a table for ``list``, else its DATA (or ERROR)."""
    if reply.status is not Status.OK:
        return f"FAIL {reply.get('ERROR')}"
    rows = [json.loads(line) for line in reply.get_all("NODE") if line.startswith("{")]
    if not (reply.get("DATA") or "").startswith("nodes:"):
        return reply.get("DATA") or ""
    lines = [f"{'NAME':<20} {'PLATFORM':<18} {'CONNECTED':<9} {'LAST SEEN':<19} CAPABILITIES"]
    for row in rows:
        seen = row.get("last_seen")
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seen)) if seen else "-"
        when = "now" if row["connected"] else when
        connected = "yes" if row["connected"] else "no"
        caps = ",".join(row["capabilities"]) or "-"
        lines.append(f"{row['name']:<20} {row['platform']:<18} {connected:<9} {when:<19} {caps}")
    lines += _pending_table(reply.get_all("PENDING"))
    tls = reply.get("TLS")
    if tls is not None:
        address, _, fingerprint = tls.partition(" ")
        lines.append(f"TLS listener {address}, certificate {fingerprint}")
    return "\n".join(lines)
