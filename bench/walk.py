"""The files one fetch TASK passes through, from the daemon's socket to its reply.

An in-process daemon (the web specialist, the embedded memory path) serves its Unix socket;
a local HTTPS origin (tests/net/_origin.py, mapped to origin.test by a fixed resolver) serves
one page. A client sends one uncached ``REQ:fetch IN:WEB``; from the moment its frame is
written until its reply is read, ``sys.setprofile`` (and ``threading.setprofile`` for worker
threads) records the source file of every Python function called. Calls made by the client
itself (this script's frames on the stack) are left out, and so are the origin's and the
standard library's: the count is of the project's files (protocol/, csp_web/, specialists/)
that the daemon's side of the walk passes through. Issue 23's goal is <= 25.

    python bench/walk.py [--all]     # --all also lists the files outside the project
"""

from __future__ import annotations

import argparse
import functools
import os
import ssl
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

import trio
import trustme

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so `python bench/walk.py` finds the packages
    sys.path.insert(0, str(REPO_ROOT))

from bench.csp_client import Client, check, fetch_task  # noqa: E402
from bench.origin import HOST, bench_config  # noqa: E402
from csp_web.app.memory_path import open_memory_path  # noqa: E402
from csp_web.core.daemon.compose import open_daemon  # noqa: E402
from csp_web.core.daemon.lifecycle import serve  # noqa: E402
from specialists.web import make_web  # noqa: E402
from tests.net._dns import FixedResolver  # noqa: E402
from tests.net._origin import PAGE, Origin  # noqa: E402
from tests.net._origin import Reply as OriginReply  # noqa: E402

PROJECT = tuple(str(REPO_ROOT / name) + os.sep for name in ("protocol", "csp_web", "specialists"))
THIS_FILE = str(Path(__file__).resolve())
TRIO_RUN = str(Path(trio.__file__).parent / "_core")
CONNECTION_TASK = "csp_web.core.transports.unix._run_handler"  # each accepted connection's task


class Walk:
    """The calls seen while recording: per source file, how many function calls."""

    def __init__(self) -> None:
        self.calls: Counter[tuple[str, str]] = Counter()

    def profile(self, frame: FrameType, event: str, _arg: Any) -> None:
        """The profile hook: count a Python call, by file and by the trio task it ran in,
        unless the client made it."""
        if event != "call" or self._clients(frame):
            return
        try:
            task = lineage(trio.lowlevel.current_task())
        except RuntimeError:  # a worker thread, or trio's scheduler between tasks
            task = "(no task)"
        self.calls[(frame.f_code.co_filename, task)] += 1

    @staticmethod
    def _clients(frame: FrameType) -> bool:
        """Whether this call runs on the client's side: a frame of this script below it in
        its trio task (the frames under the task's are trio's scheduler)."""
        seen: FrameType | None = frame
        while seen is not None and not seen.f_code.co_filename.startswith(TRIO_RUN):
            if seen.f_code.co_filename == THIS_FILE:
                return True
            seen = seen.f_back
        return False

    def project_files(self, *, background: bool) -> list[tuple[str, int]]:
        """Project files and their call counts: on the task's own walk (the tasks its
        connection started), or the daemon's background work meanwhile (``background``)."""
        files: Counter[str] = Counter()
        for (path, task), count in self.calls.items():
            on_walk = CONNECTION_TASK in task
            if path.startswith(PROJECT) and on_walk != background:
                files[os.path.relpath(path, REPO_ROOT)] += count
        return sorted(files.items())


def lineage(task: trio.lowlevel.Task) -> str:
    """A task's name and its ancestors', innermost first."""
    names = []
    seen: trio.lowlevel.Task | None = task
    while seen is not None:
        names.append(seen.name)
        nursery = seen.parent_nursery
        seen = nursery.parent_task if nursery is not None else None
    return " < ".join(names)


async def one_fetch(client: Client, url: str, walk: Walk) -> None:
    """Send one uncached fetch and read its reply, recording the daemon's calls meanwhile."""
    threading.setprofile(walk.profile)
    sys.setprofile(walk.profile)
    try:
        reply = await client.call(fetch_task(url, ("NO_CACHE", "true")))
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type,unused-ignore]  # None unsets it
    check(reply, "fetch")


async def run(walk: Walk) -> None:
    ca = trustme.CA()
    serving_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(HOST).configure_cert(serving_tls)
    trust = ssl.create_default_context()
    ca.configure_trust(trust)
    origin = Origin("https")
    origin.routes["/page"] = lambda _seen: OriginReply(200, [("content-type", "text/html")], PAGE)
    with tempfile.TemporaryDirectory(prefix="csp-walk-", dir="/tmp") as workdir:
        async with trio.open_nursery() as nursery:
            await nursery.start(functools.partial(origin.serve, ssl_context=serving_tls))
            config = bench_config(workdir, origin.port, "normal")
            web = make_web(resolver=FixedResolver({HOST: ["127.0.0.1"]}), ssl_context=trust)
            memory = open_memory_path(config)
            async with open_daemon(config, (web,), memory=memory) as daemon:
                socket_path = os.path.join(workdir, "csp.sock")
                serving = functools.partial(serve, daemon, stdio=None, socket_path=socket_path)
                await nursery.start(serving)
                async with await trio.open_unix_socket(socket_path) as stream:
                    client = Client(stream)
                    base = f"https://{HOST}:{origin.port}"
                    check(await client.call(fetch_task(base + "/page")), "warm-up fetch")
                    await one_fetch(client, base + "/page", walk)
                nursery.cancel_scope.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--all", action="store_true", help="also list files outside the project")
    args = parser.parse_args()
    walk = Walk()
    trio.run(run, walk)
    files = walk.project_files(background=False)
    for path, count in files:
        print(f"{count:6d}  {path}")
    if args.all:
        for path, count in walk.project_files(background=True):
            print(f"{count:6d}  (background) {path}")
        for task in sorted({task for _, task in walk.calls}):
            print(f"task: {task}")
    print(f"{len(files)} project files on the walk of one fetch TASK (goal <= 25)")
    print("reproduce: python bench/walk.py")


if __name__ == "__main__":
    main()
