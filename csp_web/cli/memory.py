"""``csp-web memory ls [PREFIX]`` and ``csp-web memory cat PATH``: the memory store, browsed
from the shell through the running daemon, which relays IN:MEMORY frames to its Memory
Specialist (SPEC M-3).

``ls`` prints every stored path under PREFIX, one a line, asking page after page
(``REQ:list``, SPEC M-9); ``cat`` prints the writes stored at PATH in order (``REQ:read``,
M-7). Exit 0 done; 1 the daemon answered FAIL (``not_found``: nothing there), its ERROR on
stderr; 3 the daemon could not be reached.
"""

from __future__ import annotations

import argparse
import sys
import unicodedata
from dataclasses import dataclass

import trio

from csp_web.client.trio_client import Client, ClientClosed, open_client
from protocol import Reply, Status, Task

EXIT_OK, EXIT_FAIL, EXIT_UNREACHABLE = 0, 1, 3
PAGE_SIZE = 1000  # paths asked per REQ:list: the sink's cap, so few round trips
# What a terminal would act on rather than show (escape sequences, bidi overrides): a
# stored path may hold them, as any client may write one.
_HIDDEN = frozenset({"Cc", "Cf", "Zl", "Zp"})


@dataclass(frozen=True)
class MemoryOptions:
    """``action`` is ``ls`` (``target`` a PREFIX, "" for every path) or ``cat`` (a PATH)."""

    path: str
    action: str
    target: str
    timeout_s: float


def add_memory_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], config_help: str
) -> None:
    memory = sub.add_parser(
        "memory",
        help="browse the memory store through the running daemon: ls, cat",
        description="Browse the memory store through the running daemon, which relays "
        "IN:MEMORY frames to its Memory Specialist: ls prints every stored path under PREFIX, "
        "one a line; cat prints the writes stored at PATH, in order. Exit 0 done, 1 when the "
        "daemon answers FAIL (not_found: nothing there), 3 when no daemon answers.",
    )
    memory.add_argument(
        "--socket", metavar="PATH", help="daemon socket (default: socket.path, else found)"
    )
    memory.add_argument("--config", help=config_help)
    memory.add_argument(
        "--timeout", type=float, default=60.0, metavar="SECONDS", help="per request (60)"
    )
    actions = memory.add_subparsers(
        dest="memory_action", required=True, metavar="ACTION", help="ls or cat"
    )
    ls = actions.add_parser("ls", help="the stored paths under PREFIX, one a line")
    ls.add_argument("target", nargs="?", default="", metavar="PREFIX", help="default: all")
    cat = actions.add_parser("cat", help="the writes stored at PATH, in order")
    cat.add_argument("target", metavar="PATH")


def memory_main(options: MemoryOptions) -> int:
    """Run ``options.action`` against the daemon; the exit code (see the module)."""
    return trio.run(run_memory, options)


async def run_memory(options: MemoryOptions) -> int:
    """``memory_main`` inside a running trio loop: prints on stdout and stderr."""
    try:
        async with open_client(options.path) as client:
            if options.action == "cat":
                return await _cat(client, options)
            return await _ls(client, options)
    except (OSError, ClientClosed, trio.TooSlowError) as exc:
        why = str(exc) or type(exc).__name__
        print(f"csp-web: cannot reach the daemon at {options.path}: {why}", file=sys.stderr)
        return EXIT_UNREACHABLE


async def _cat(client: Client, options: MemoryOptions) -> int:
    task = Task("read", "MEMORY", "CONTENT", None, (("PATH", options.target),))
    reply = await client.call(task, timeout_s=options.timeout_s)
    if reply.status is not Status.OK:
        return _failed("cat", reply)
    sys.stdout.write(shown(reply.get("DATA") or "", keep="\n\t"))
    return EXIT_OK


async def _ls(client: Client, options: MemoryOptions) -> int:
    """Every page of paths under the prefix; a NEXT_START that does not move past the page
    (a Memory Specialist's bug) ends the listing with an error instead of looping."""
    start: str | None = None
    while True:
        reply = await client.call(_list_task(options.target, start), timeout_s=options.timeout_s)
        if reply.status is not Status.OK:
            return _failed("ls", reply)
        paths = reply.get_all("PATH")
        sys.stdout.write("".join(f"{shown(path)}\n" for path in paths))
        sys.stdout.flush()
        following = reply.get("NEXT_START")
        if following is None:
            return EXIT_OK
        if not paths or following <= paths[-1]:
            print(f"csp-web: memory ls: NEXT_START {following!r} goes back", file=sys.stderr)
            return EXIT_FAIL
        start = following


def _list_task(prefix: str, start: str | None) -> Task:
    fields = [("MAX_RESULTS", str(PAGE_SIZE))]
    if prefix:
        fields.append(("PREFIX", prefix))
    if start is not None:
        fields.append(("START", start))
    return Task("list", "MEMORY", "PATHS", None, tuple(fields))


def _failed(action: str, reply: Reply) -> int:
    print(f"csp-web: memory {action}: {reply.get('ERROR')}", file=sys.stderr)
    return EXIT_FAIL


def shown(text: str, keep: str = "") -> str:
    """``text`` as a terminal should print it: control and format characters escaped
    (``\\x1b``, ``\\u202e``, ``\\U000e0001``) but those in ``keep``, everything else as
    it is. A stored write holds what pages said (titles, content), so ``cat`` escapes too:
    an OSC 52 or a title sequence from a hostile page must not reach the user's terminal."""
    return "".join(
        _escaped(ord(char)) if unicodedata.category(char) in _HIDDEN and char not in keep else char
        for char in text
    )


def _escaped(code: int) -> str:
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
