"""Browser and canvas ops against their floor and a peer, side by side in one run.

    python bench/browser.py [--rounds 30] [--actions 1000] [--no-mcp]

A local HTTPS origin (trustme, its own process) serves a small page at 127.0.0.1. Measured:

- warm navigate+extract and screenshot through the op, sent to a ``csp-web serve`` process over
  its Unix socket (CSP/1, dispatcher, guard proxy, engine thread, one SESSION) against a plain
  Playwright script doing the same steps on the same Chromium (the floor: no proxy, no trio,
  one page), rounds alternating so that the host's load weighs on both alike; p50 and the
  ratio (issue 10: <= 1.3x);
- navigate + snapshot through @playwright/mcp (npm, into a temporary directory, pointed at the
  same Chromium) against our navigate + extract; p50;
- cold start: a fresh daemon's first action, Chromium launch included;
- RSS of the Chromium processes after 0, half and all of ``--actions`` fresh-page actions
  (recycling every ``recycle_after_pages`` pages must hold it flat);
- canvas present + snapshot p50 (seed: < 1 s).

Anything that cannot run here is printed with the reason. Timings are wall-clock on whatever
else the host is doing: compare figures from one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import trio
import trustme

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.csp_client import Client, connect
from bench.daemon_process import DaemonProcess, running_daemon
from bench.processes import start_serving
from protocol import Reply, Status, Task
from specialists.browser.config import BrowserConfig
from specialists.browser.engine import find_executable, sandboxed
from tests.browser.support import chromium_processes, spki_hash
from tests.net._origin import Origin
from tests.net._origin import Reply as OriginReply

T = TypeVar("T")
PAGE = (
    b"<html><head><title>Bench</title></head><body><article><h1>Bench page</h1>"
    + b"<p>A paragraph of text for the extractor to keep. </p>" * 40
    + b"</article></body></html>"
)


# ---- the origin (its own process) --------------------------------------------------------


async def serve_origin(pem_path: str) -> None:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pem_path)
    origin = Origin("https")
    origin.routes["/page"] = lambda _seen: OriginReply(
        200, [("content-type", "text/html; charset=utf-8")], PAGE
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: origin.serve(ssl_context=context, task_status=task_status)
        )
        print(origin.port, flush=True)


def start_origin(issuer: trustme.CA, workdir: str) -> tuple[subprocess.Popen[str], int]:
    pem_path = os.path.join(workdir, "origin.pem")
    issuer.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(pem_path)
    return start_serving(str(Path(__file__).resolve()), "--origin", pem_path)


# ---- ours: a csp-web serve process, over its socket --------------------------------------


def daemon_settings(workdir: str, port: int, spki: str, recycle: int) -> dict[str, Any]:
    """The daemon's config: the origin's port and 127.0.0.1 opened, its key trusted by
    Chromium (trusted_spki), pages recycled as ``--recycle`` says."""
    return {
        "daemon": {"state_dir": os.path.join(workdir, "state"), "log_level": "warning"},
        "web": {"guard": {"allowed_ports": [port], "allow_private": ["127.0.0.1/32"]}},
        "tool": {"browser": {"trusted_spki": [spki], "recycle_after_pages": recycle}},
    }


async def call(client: Client, req: str, out: str, *fields: tuple[str, str]) -> Reply:
    reply = await client.call(Task(req, "TOOL", out, None, fields))
    if reply.status is not Status.OK:
        raise SystemExit(f"{req} failed: {reply}")
    return reply


async def timed(rounds: int, step: Callable[[], Awaitable[object]]) -> list[float]:
    out = []
    for _ in range(rounds):
        start = time.perf_counter()
        await step()
        out.append((time.perf_counter() - start) * 1000)
    return out


def p50(values: list[float]) -> float:
    return statistics.median(values)


def chromium_pss_kib(daemon_pid: int) -> int:
    """The Chromium processes' proportional set size (PSS: shared pages split between the
    processes sharing them, so the sum is what the browser really holds)."""
    total = 0
    for pid in chromium_processes(daemon_pid):
        try:
            with open(f"/proc/{pid}/smaps_rollup") as rollup:
                for line in rollup:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
        except OSError:
            continue
    return total


async def launches(client: Client) -> str:
    """How many Chromiums the daemon launched, from its stats' BROWSER line."""
    reply = await client.call(Task("stats", "SYS", "STATS", None, ()))
    words = dict(word.partition(":")[::2] for word in (reply.get("BROWSER") or "").split())
    return words.get("launches", "?")


async def bench_ours(
    daemon: DaemonProcess, url: str, rounds: int, actions: int, floor: Floor
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    client = await connect(daemon.socket_path)
    start = time.perf_counter()
    await call(client, "browser", "BROWSER_RESULT", ("ACTION", "navigate"), ("TARGET_URL", url))
    out["cold_ms"] = (time.perf_counter() - start) * 1000
    session = ("SESSION", "bench")

    async def nav_extract() -> None:
        navigate = (("ACTION", "navigate"), ("TARGET_URL", url), session)
        await call(client, "browser", "BROWSER_RESULT", *navigate)
        await call(client, "browser", "BROWSER_RESULT", ("ACTION", "extract"), session)

    async def shot() -> None:
        await call(client, "browser", "BROWSER_RESULT", ("ACTION", "screenshot"), session)

    await nav_extract()
    await floor.measure("nav_extract")
    for name, step in (("nav_extract", nav_extract), ("screenshot", shot)):
        out[name], out[f"floor_{name}"] = [], []
        for _ in range(rounds):  # alternating: the same load weighs on both
            out[name] += await timed(1, step)
            out[f"floor_{name}"].append(await floor.measure(name))

    async def present_snapshot() -> None:
        size = (("WIDTH", "1280"), ("HEIGHT", "720"))
        await call(client, "canvas", "CANVAS_RESULT", ("ACTION", "present"), ("URL", url), *size)
        await call(client, "canvas", "CANVAS_RESULT", ("ACTION", "snapshot"))

    out["canvas"] = await timed(rounds, present_snapshot)
    # Free what pins the current browser, so recycling can retire it.
    await call(client, "canvas", "CANVAS_RESULT", ("ACTION", "hide"))
    await call(client, "browser", "BROWSER_RESULT", ("ACTION", "close"), session)
    rss = [chromium_pss_kib(daemon.pid)]
    for i in range(actions):
        await call(client, "browser", "BROWSER_RESULT", ("ACTION", "navigate"), ("TARGET_URL", url))
        if i + 1 in (actions // 2, actions):
            rss.append(chromium_pss_kib(daemon.pid))
    out["pss_kib"] = rss
    out["launches"] = await launches(client)
    await client.stream.aclose()
    return out


# ---- the floor: plain Playwright, same Chromium ------------------------------------------


class Floor:
    """A plain Playwright script on the same Chromium, on its own thread and asyncio loop;
    ``step`` runs one of its steps there and returns the time the step took, measured there.
    Its rounds alternate with ours, so load on the host weighs on both alike."""

    def __init__(self, executable: str, spki: str, url: str, shots: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.url, self.shot_path = url, os.path.join(shots, "floor.png")
        self.page: Any = None
        self._call(self._start(executable, spki))

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    async def _start(self, executable: str, spki: str) -> None:
        from playwright.async_api import async_playwright

        self.playwright = await async_playwright().start()
        args = [f"--ignore-certificate-errors-spki-list={spki}"]
        self.browser = await self.playwright.chromium.launch(
            executable_path=executable, args=args, chromium_sandbox=sandboxed()
        )
        self.page = await (await self.browser.new_context()).new_page()

    async def _step(self, name: str) -> float:
        start = time.perf_counter()
        if name == "nav_extract":
            await self.page.goto(self.url, wait_until="load")
            await self.page.title()
            await self.page.content()
        else:  # written to a file, as the op does
            await self.page.screenshot(type="png", path=self.shot_path)
        return (time.perf_counter() - start) * 1000

    async def measure(self, name: str) -> float:
        return await trio.to_thread.run_sync(lambda: self._call(self._step(name)))

    def close(self) -> None:
        async def stop() -> None:
            await self.browser.close()
            await self.playwright.stop()

        self._call(stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()


def _in_thread(fn: Callable[[], T]) -> T:
    """``fn()`` in a fresh thread: asyncio.run there, away from any loop of this one."""
    box: list[T] = []
    thread = threading.Thread(target=lambda: box.append(fn()))
    thread.start()
    thread.join()
    return box[0]


# ---- @playwright/mcp ---------------------------------------------------------------------


def install_mcp(workdir: str) -> str:
    """npm-install @playwright/mcp into ``workdir``; its cli.js path, or SystemExit(reason)."""
    if shutil.which("npm") is None:
        raise SystemExit("npm is not on PATH")
    result = subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--prefix", workdir, "@playwright/mcp"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    cli = os.path.join(workdir, "node_modules", "@playwright", "mcp", "cli.js")
    if result.returncode != 0 or not os.path.exists(cli):
        raise SystemExit(f"npm install @playwright/mcp failed: {result.stderr.strip()[-300:]}")
    return cli


def bench_mcp(cli: str, executable: str, workdir: str, url: str, rounds: int) -> list[float]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    config = {
        "browser": {
            "browserName": "chromium",
            "isolated": True,
            "launchOptions": {
                "executablePath": executable,
                "headless": True,
                "chromiumSandbox": sandboxed(),
            },
            "contextOptions": {"ignoreHTTPSErrors": True},
        }
    }
    config_path = os.path.join(workdir, "mcp-config.json")
    with open(config_path, "w") as file:
        json.dump(config, file)
    # cwd: the server writes its .playwright-mcp/ output folder there.
    params = StdioServerParameters(command="node", args=[cli, "--config", config_path], cwd=workdir)

    async def main() -> list[float]:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()

            async def step() -> None:
                result = await session.call_tool("browser_navigate", {"url": url})
                if result.is_error:
                    raise SystemExit(f"browser_navigate failed: {result.content}")
                await session.call_tool("browser_snapshot", {})

            await step()
            times = []
            for _ in range(rounds):
                start = time.perf_counter()
                await step()
                times.append((time.perf_counter() - start) * 1000)
            return times

    return _in_thread(lambda: asyncio.run(main()))


# ---- the run -----------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--actions", type=int, default=1000)
    parser.add_argument("--recycle", type=int, default=200, help="recycle_after_pages")
    parser.add_argument("--no-mcp", action="store_true")
    parser.add_argument("--origin", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.origin:
        trio.run(serve_origin, args.origin)
        return
    executable = find_executable(BrowserConfig())
    issuer = trustme.CA().create_child_ca()
    spki = spki_hash(issuer)
    with tempfile.TemporaryDirectory(prefix="csp-bench-browser-") as workdir:
        proc, port = start_origin(issuer, workdir)
        url = f"https://127.0.0.1:{port}/page"
        try:
            run(args, executable, spki, url, workdir, port)
        finally:
            proc.kill()
            proc.wait()


def run(
    args: argparse.Namespace, executable: str, spki: str, url: str, workdir: str, port: int
) -> None:
    print(
        f"command: python bench/browser.py --rounds {args.rounds} --actions {args.actions}"
        f" --recycle {args.recycle}{' --no-mcp' if args.no_mcp else ''}"
    )
    print(
        f"chromium: {executable}  sandbox: {'on' if sandboxed() else 'off (root)'}"
        f"  cpus: {os.cpu_count()}"
    )
    floor = Floor(executable, spki, url, workdir)
    settings = daemon_settings(workdir, port, spki, args.recycle)
    try:
        with running_daemon(workdir, settings) as daemon:
            ours = trio.run(bench_ours, daemon, url, args.rounds, args.actions, floor)
    finally:
        floor.close()
    for name in ("nav_extract", "screenshot"):
        mine, base = p50(ours[name]), p50(ours[f"floor_{name}"])
        print(
            f"{name:12s} p50 ours {mine:7.1f} ms  playwright {base:7.1f} ms"
            f"  ratio {mine / base:4.2f}x (target <= 1.3x)"
        )
        figure = (f"browser {name} p50", f"{mine:.1f} ms", f"{base:.1f} ms Playwright")
        print("\t".join((*figure, f"{mine / base:.2f}x", "<= 1.3x")))  # for scripts/bench
    print(f"cold start   first action {ours['cold_ms']:.0f} ms (Chromium launch included)")
    rss = ours["pss_kib"]
    marks = [0, args.actions // 2, args.actions]
    print(
        "chromium PSS "
        + ", ".join(f"after {m}: {r / 1024:.0f} MiB" for m, r in zip(marks, rss, strict=False))
        + f"  (launches {ours['launches']}, recycle every {args.recycle} pages)"
    )
    print(f"canvas       present+snapshot p50 {p50(ours['canvas']):.1f} ms (seed < 1000 ms)")
    if args.no_mcp:
        print("@playwright/mcp: skipped (--no-mcp)")
        return
    try:
        cli = install_mcp(os.path.join(workdir, "mcp"))
        theirs = bench_mcp(cli, executable, workdir, url, args.rounds)
    except SystemExit as exc:
        print(f"@playwright/mcp: cannot run here: {exc}")
        return
    mine = p50(ours["nav_extract"])
    print(
        f"vs mcp       navigate+snapshot p50 @playwright/mcp {p50(theirs):.1f} ms,"
        f" ours navigate+extract {mine:.1f} ms"
        f" ({'ours faster' if mine < p50(theirs) else 'ours slower'})"
    )


if __name__ == "__main__":
    main()
