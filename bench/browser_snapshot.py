"""ACTION snapshot against @playwright/mcp's browser_snapshot on the same pages (issue 25).

    python bench/browser_snapshot.py [--rounds 20]

A local HTTPS origin (trustme, its own process) serves four pages at 127.0.0.1: a sign-up
form, a long article, a table, and a page of iframes. For each page, both take a snapshot
of the same content:

- bytes: our CONTENT against @playwright/mcp's whole tool result (the text a model reads)
  and against its YAML alone (the tree without its headers), as ratios (goal: <= 1.0);
- round trip on the form: snapshot, then click the Save button by its ref (ours: ACTION
  snapshot + ACTION click REF to a csp-web serve process over its socket, through its guard
  proxy and engine thread, one SESSION; theirs: browser_snapshot + browser_click over MCP
  stdio), rounds alternating so the host's load weighs on both alike; p50 and the ratio
  (goal: <= 1.0).

@playwright/mcp is npm-installed into a temporary directory (never the project's runtime)
and pointed at the same system Chromium; if npm cannot install it, the run says so. Timings
are wall-clock on whatever else the host is doing: compare figures from one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import ssl
import sys
import tempfile
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import trio
import trustme

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.browser import call, daemon_settings, install_mcp, p50
from bench.csp_client import connect
from bench.daemon_process import running_daemon
from bench.processes import start_serving
from specialists.browser.config import BrowserConfig
from specialists.browser.engine import find_executable, sandboxed
from tests.browser.support import spki_hash
from tests.net._origin import Origin, Route
from tests.net._origin import Reply as OriginReply

T = TypeVar("T")
_YAML = re.compile(r"```yaml\n(.*?)\n```", re.S)


# ---- the pages ---------------------------------------------------------------------------


def _form() -> bytes:
    fields = "".join(
        f'<p><label for="f{i}">{name}</label> <input id="f{i}" name="{name.lower()}"'
        f' placeholder="Your {name.lower()}"></p>'
        for i, name in enumerate(("Name", "Email", "Street", "City", "Postcode", "Phone"))
    )
    return (
        "<!doctype html><html lang=en><head><title>Sign up</title></head><body>"
        '<header><nav><a href="/">Home</a> <a href="/help">Help</a> <a href="/login">Log in</a>'
        "</nav></header><main><h1>Create your account</h1><form>"
        f"{fields}"
        '<p><label><input type="checkbox" name="news"> Send me the newsletter</label></p>'
        '<p><label>Country <select name="country"><option>Germany</option><option>France'
        "</option><option>Netherlands</option></select></label></p>"
        '<fieldset><legend>Plan</legend><label><input type="radio" name="plan" checked> Free'
        '</label> <label><input type="radio" name="plan"> Pro</label></fieldset>'
        '<p><button type="button" onclick="document.title=\'saved\'">Save</button>'
        ' <button type="reset">Reset</button></p></form></main>'
        '<footer><a href="/terms">Terms</a> <a href="/privacy">Privacy</a></footer>'
        "</body></html>"
    ).encode()


def _article() -> bytes:
    sentence = (
        "The North Sea has two high tides every day, about twelve hours and twenty-five"
        " minutes apart, and the harbour masters publish their tables a year ahead. "
    )
    sections = "".join(
        f"<h2>Section {s}</h2>"
        + "".join(
            f'<p>{sentence * 2}See <a href="/notes/{s}-{p}">note {s}.{p}</a>.</p>' for p in range(4)
        )
        for s in range(8)
    )
    return (
        "<!doctype html><html lang=en><head><title>Tides</title></head><body>"
        '<header><a href="/">Tide Tables</a></header><main><article><h1>Tides of the North'
        f" Sea</h1>{sections}</article></main><footer>Published 2026</footer></body></html>"
    ).encode()


def _table() -> bytes:
    rows = "".join(
        f'<tr><td><a href="/port/{i}">Port {i}</a></td><td>{i % 12:02d}:{i % 60:02d}</td>'
        f"<td>{(i * 37) % 500 / 100:.2f} m</td><td>{'rising' if i % 2 else 'falling'}</td></tr>"
        for i in range(50)
    )
    return (
        "<!doctype html><html lang=en><head><title>Ports</title></head><body><h1>High water"
        "</h1><table><thead><tr><th>Port</th><th>Time</th><th>Height</th><th>Trend</th></tr>"
        f"</thead><tbody>{rows}</tbody></table></body></html>"
    ).encode()


def _frames() -> bytes:
    inline = "<h2>Inline</h2><button>Inline button</button><a href='/a'>Inline link</a>"
    return (
        "<!doctype html><html lang=en><head><title>Frames</title></head><body><h1>Frames</h1>"
        f'<iframe title="inline" srcdoc="{inline}"></iframe>'
        '<iframe title="widget" src="/widget"></iframe><p>After the frames.</p></body></html>'
    ).encode()


WIDGET = (
    b"<!doctype html><title>Widget</title><h2>Widget</h2><input aria-label='Search'>"
    b"<button>Go</button><ul><li><a href='/w/1'>One</a></li><li><a href='/w/2'>Two</a></li></ul>"
)
PAGES = {"form": _form(), "article": _article(), "table": _table(), "iframes": _frames()}


def _answer(reply: OriginReply) -> Route:
    return lambda _seen: reply


async def serve_origin(pem_path: str) -> None:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pem_path)
    origin = Origin("https")
    html = [("content-type", "text/html; charset=utf-8")]
    for name, body in (*PAGES.items(), ("widget", WIDGET)):
        origin.routes[f"/{name}"] = _answer(OriginReply(200, html, body))
    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: origin.serve(ssl_context=context, task_status=task_status)
        )
        print(origin.port, flush=True)


# ---- @playwright/mcp, on a thread of its own ---------------------------------------------


class McpPeer:
    """@playwright/mcp over stdio, its client on its own thread and asyncio loop; ``call``
    runs one tool there (blocking) and returns its text."""

    def __init__(self, cli: str, executable: str, workdir: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.ready = threading.Event()
        self.stop = asyncio.Event()
        self.session: Any = None
        self.failure: BaseException | None = None
        self.served = asyncio.run_coroutine_threadsafe(
            self._serve(cli, executable, workdir), self.loop
        )
        self.ready.wait(120)
        if self.session is None:
            raise SystemExit(f"@playwright/mcp did not start: {self.failure!r}")

    async def _serve(self, cli: str, executable: str, workdir: str) -> None:
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
        path = os.path.join(workdir, "mcp-config.json")
        with open(path, "w") as file:
            json.dump(config, file)
        params = StdioServerParameters(command="node", args=[cli, "--config", path], cwd=workdir)
        try:
            async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                self.session = session
                self.ready.set()
                await self.stop.wait()
        except BaseException as exc:
            self.failure = exc
            self.ready.set()
            raise

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(120)

    def call(self, tool: str, arguments: dict[str, str]) -> str:
        result = self._run(self.session.call_tool(tool, arguments))
        text = "".join(getattr(part, "text", "") for part in result.content)
        if result.is_error:
            raise SystemExit(f"{tool} failed: {text[:300]}")
        return text

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        try:
            self.served.result(30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(30)


def ref_of(snapshot: str, line_start: str) -> str:
    for line in snapshot.splitlines():
        if line.lstrip(" -").startswith(line_start):
            found = re.search(r"\[ref=([a-z0-9]+)\]", line)
            if found:
                return found.group(1)
    raise SystemExit(f"no {line_start!r} in the snapshot:\n{snapshot[:2000]}")


# ---- the run -----------------------------------------------------------------------------


async def bench(socket_path: str, base: str, peer: McpPeer, rounds: int) -> dict[str, Any]:
    out: dict[str, Any] = {"bytes": {}}
    client = await connect(socket_path)
    async with client.stream:
        session = ("SESSION", "bench")

        async def ours(*fields: tuple[str, str]) -> str:
            reply = await call(client, "browser", "BROWSER_RESULT", *fields, session)
            return reply.get("CONTENT") or ""

        for name in PAGES:
            url = f"{base}/{name}"
            await ours(("ACTION", "navigate"), ("TARGET_URL", url))
            mine = await ours(("ACTION", "snapshot"))
            await trio.to_thread.run_sync(peer.call, "browser_navigate", {"url": url})
            theirs = await trio.to_thread.run_sync(peer.call, "browser_snapshot", {})
            found = _YAML.search(theirs)
            yaml = found.group(1) if found else theirs
            out["bytes"][name] = (len(mine.encode()), len(theirs.encode()), len(yaml.encode()))

        url = f"{base}/form"
        await ours(("ACTION", "navigate"), ("TARGET_URL", url))
        await trio.to_thread.run_sync(peer.call, "browser_navigate", {"url": url})

        async def our_round() -> float:
            start = time.perf_counter()
            ref = ref_of(await ours(("ACTION", "snapshot")), 'button "Save"')
            await ours(("ACTION", "click"), ("REF", ref))
            return (time.perf_counter() - start) * 1000

        def their_round() -> float:
            start = time.perf_counter()
            ref = ref_of(peer.call("browser_snapshot", {}), 'button "Save"')
            peer.call("browser_click", {"target": ref, "element": "Save button"})
            return (time.perf_counter() - start) * 1000

        await our_round()
        await trio.to_thread.run_sync(their_round)
        out["ours"], out["theirs"] = [], []
        for _ in range(rounds):  # alternating: the same load weighs on both
            out["ours"].append(await our_round())
            out["theirs"].append(await trio.to_thread.run_sync(their_round))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--origin", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.origin:
        trio.run(serve_origin, args.origin)
        return
    print(f"command: python bench/browser_snapshot.py --rounds {args.rounds}")
    executable = find_executable(BrowserConfig())
    issuer = trustme.CA().create_child_ca()
    with tempfile.TemporaryDirectory(prefix="csp-bench-snapshot-") as workdir:
        pem_path = os.path.join(workdir, "origin.pem")
        issuer.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(pem_path)
        proc, port = start_serving(str(Path(__file__).resolve()), "--origin", pem_path)
        try:
            run(args, executable, spki_hash(issuer), port, workdir)
        finally:
            proc.kill()
            proc.wait()


def run(args: argparse.Namespace, executable: str, spki: str, port: int, workdir: str) -> None:
    print(f"chromium: {executable}  sandbox: {'on' if sandboxed() else 'off (root)'}")
    try:
        cli = install_mcp(os.path.join(workdir, "mcp"))
        version = json.loads(Path(cli).with_name("package.json").read_text())["version"]
        peer = McpPeer(cli, executable, workdir)
    except SystemExit as exc:
        print(f"@playwright/mcp: cannot run here: {exc}")
        return
    print(f"@playwright/mcp {version} (npm, in a temporary directory), the same Chromium")
    try:
        with running_daemon(workdir, daemon_settings(workdir, port, spki, 200)) as daemon:
            base = f"https://127.0.0.1:{port}"
            got = trio.run(bench, daemon.socket_path, base, peer, args.rounds)
    finally:
        peer.close()
    print("snapshot bytes   ours   @playwright/mcp (whole / yaml)   ratio (whole / yaml)")
    for name, (mine, whole, yaml) in got["bytes"].items():
        print(
            f"  {name:9s} {mine:8d}  {whole:8d} / {yaml:8d}"
            f"          {mine / whole:4.2f}x / {mine / yaml:4.2f}x  (goal <= 1.0)"
        )
    mine, theirs = p50(got["ours"]), p50(got["theirs"])
    print(
        f"snapshot+click   p50 ours {mine:.1f} ms  @playwright/mcp {theirs:.1f} ms"
        f"  ratio {mine / theirs:4.2f}x (goal <= 1.0)"
    )


if __name__ == "__main__":
    main()
