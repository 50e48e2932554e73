"""Fetch through csp-web's MCP face next to mcp-server-fetch, the reference MCP fetch server,
on the same local pages in one run: latency p50 per page and extraction F1.

Run from the repository root::

    python bench/mcp_face.py [--corpus DIR] [--rounds N]

Both servers are spawned over stdio by the MCP SDK's own client and called with their fetch
tool, one page at a time: ``csp-web mcp`` (the daemon core in process: guard, robots.txt,
cache, rate limit, one audit write per op into its outbox) with ``web_fetch`` and
``no_cache: true``; ``python -m mcp_server_fetch --allow-private-ips`` (it refuses loopback
addresses otherwise) with ``fetch`` and ``max_length: 999999``, once honouring robots.txt as
it does by default (it fetches /robots.txt before every page) and once with
``--ignore-robots-txt``. The pages are the extraction dev corpus, served over plain HTTP by a
local origin in its own process at ``http://127.0.0.1:PORT/corpus/<id>``, robots.txt answered
404 (allowed); csp-web's guard is opened for that port and address (``allow_http``,
``allow_private``), its fetch rate limit raised so it never waits and its body caps doubled to
2 MB (one page is over the default 1 MB), as bench/fetch.py does. A page truncated by csp-web
(PARTIAL) is read on with its NEXT_START, its calls timed together.

Latency is one page's tools/call round trip(s) as the client sees them; each server first
fetches one page untimed (imports, caches). F1 is bench/extraction.py's metric (4-token
shingles, precision and recall averaged over pages) on the page content: csp-web's
``structuredContent.DATA``, mcp-server-fetch's text minus its ``Contents of <url>:`` line;
"as sent" scores the whole text content a model reads (csp-web's field lines included).

Measured 2026-11-24 on the shared 2-core machine at load average ~16 (five other helpers'
test runs; the third row also overlapped this branch's own test run), 88 pages, one round::

    csp-web mcp                           p50   56.55 ms  p90   86.06 ms
        F1 0.9854 (P 0.9817 R 0.9891)  as sent F1 0.9310
    mcp-server-fetch                      p50 5415.88 ms  p90 9466.77 ms
        F1 0.9517 (P 0.9212 R 0.9844)  as sent F1 0.9404
    mcp-server-fetch --ignore-robots-txt  p50 11128.80 ms p90 18760.31 ms
        F1 0.9517 (P 0.9212 R 0.9844)  as sent F1 0.9404

mcp-server-fetch's time is mostly readabilipy running Node's Readability (a ``node``
process per page); its latency under this load is not a figure to quote beyond "seconds".
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so `python bench/mcp_face.py` finds the packages
    sys.path.insert(0, str(REPO_ROOT))

from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.types import CallToolResult  # noqa: E402

from bench.extraction import (  # noqa: E402
    DEFAULT_CORPUS,
    PageScore,
    compare,
    load_corpus,
    markdown_to_text,
    summarise,
)
from bench.processes import start_serving  # noqa: E402
from tests.net._origin import Origin  # noqa: E402
from tests.net._origin import Reply as OriginReply  # noqa: E402

BODY_CAP_BYTES = 2_000_000
_TRUNCATED = re.compile(r"\n\n<error>Content truncated\..*</error>\Z", re.S)


@dataclass(frozen=True)
class Server:
    """One MCP server under test and how to ask it for a page."""

    label: str
    command: list[str]
    tool: str

    def arguments(self, url: str, start: int) -> dict[str, Any]:
        if self.tool == "web_fetch":
            return {"url": url, "no_cache": True, "max_chars": 200_000, "start": start}
        return {"url": url, "max_length": 999_999}


@dataclass(frozen=True)
class Fetched:
    content: str
    as_sent: str
    elapsed_ms: float
    calls: int


def page_path(page_id: str) -> str:
    return f"/corpus/{page_id}"


async def serve_origin(corpus: Path) -> None:
    """The origin process: every corpus page over HTTP on 127.0.0.1; prints its port."""
    origin = Origin("http")
    headers = [("content-type", "text/html; charset=utf-8")]
    for page in load_corpus(corpus):
        origin.routes[page_path(page.page_id)] = functools.partial(
            lambda data, _seen: OriginReply(200, headers, data), page.html.encode()
        )
    async with trio.open_nursery() as nursery:
        await nursery.start(functools.partial(origin.serve, ssl_context=None))
        print(origin.port, flush=True)


def start_origin(corpus: Path) -> tuple[subprocess.Popen[str], int]:
    return start_serving(str(Path(__file__).resolve()), "--origin", "--corpus", str(corpus))


def face_config(workdir: str, port: int) -> str:
    """csp-web's configuration for the run: the guard opened for the local origin only."""
    path = os.path.join(workdir, "config.yaml")
    Path(path).write_text(
        f"""daemon:
  state_dir: {workdir}/state
  log_level: warning
web:
  guard:
    allow_http: true
    allowed_ports: [{port}]
    allow_private: ["127.0.0.1"]
    max_body_bytes: {BODY_CAP_BYTES}
    max_decoded_bytes: {BODY_CAP_BYTES}
  fetch:
    max_chars_cap: 200000
    rate: {{per_minute: 1000000000, burst: 1000000}}
""",
        encoding="utf-8",
    )
    return path


def servers(config_path: str) -> list[Server]:
    python = sys.executable
    fetch = [python, "-m", "mcp_server_fetch", "--allow-private-ips"]
    return [
        Server(
            "csp-web mcp",
            [python, "-m", "csp_web", "mcp", "--config", config_path, "--tool", "web_fetch"],
            "web_fetch",
        ),
        Server("mcp-server-fetch", fetch, "fetch"),
        Server("mcp-server-fetch --ignore-robots-txt", [*fetch, "--ignore-robots-txt"], "fetch"),
    ]


@asynccontextmanager
async def open_server(server: Server) -> AsyncIterator[Client]:
    env = {"PYTHONPATH": str(REPO_ROOT)}
    params = StdioServerParameters(command=server.command[0], args=server.command[1:], env=env)
    async with Client(params) as client:
        yield client


async def fetch_page(client: Client, server: Server, url: str) -> Fetched:
    """The page through ``server``; raises SystemExit when the tool answers an error."""
    content, as_sent, start, calls = "", [], 0, 0
    started = time.perf_counter()
    while True:
        result = await client.call_tool(server.tool, server.arguments(url, start))
        calls += 1
        assert isinstance(result, CallToolResult)
        text = "".join(block.text for block in result.content if block.type == "text")
        if result.is_error:
            raise SystemExit(f"{server.label}: {url}: {text[:200]}")
        as_sent.append(text)
        structured = result.structured_content or {}
        if server.tool != "web_fetch":
            content = _TRUNCATED.sub("", text.split("\n", 1)[1] if "\n" in text else "")
            break
        content += structured["DATA"]
        if "NEXT_START" not in structured:
            break
        start = int(structured["NEXT_START"])
    elapsed_ms = (time.perf_counter() - started) * 1000
    return Fetched(content, "\n".join(as_sent), elapsed_ms, calls)


async def measure(server: Server, base: str, corpus: Path) -> list[tuple[PageScore, PageScore]]:
    pages = load_corpus(corpus)
    scores = []
    async with open_server(server) as client:
        await fetch_page(client, server, base + page_path(pages[0].page_id))  # warm-up, untimed
        for page in pages:
            got = await fetch_page(client, server, base + page_path(page.page_id))
            kind, truth = page.page_type, page.truth
            content = PageScore(
                page.page_id,
                kind,
                *compare(markdown_to_text(got.content), truth),
                got.elapsed_ms,
                0.0,
            )
            sent = PageScore(
                page.page_id,
                kind,
                *compare(markdown_to_text(got.as_sent), truth),
                got.elapsed_ms,
                0.0,
            )
            scores.append((content, sent))
    return scores


def row(label: str, scores: Sequence[tuple[PageScore, PageScore]]) -> str:
    content = summarise([c for c, _ in scores])
    sent = summarise([s for _, s in scores])
    times = sorted(c.elapsed_ms for c, _ in scores)
    p90 = times[min(len(times) - 1, int(0.9 * len(times)))]
    return (
        f"{label:<38} p50 {statistics.median(times):7.2f} ms  p90 {p90:7.2f} ms  "
        f"F1 {content.f1:.4f} (P {content.precision:.4f} R {content.recall:.4f})  "
        f"as sent F1 {sent.f1:.4f}"
    )


async def run(args: argparse.Namespace) -> None:
    proc, port = start_origin(args.corpus)
    try:
        with tempfile.TemporaryDirectory(prefix="csp-bench-mcp-", dir="/tmp") as workdir:
            base = f"http://127.0.0.1:{port}"
            lines = []
            for server in servers(face_config(workdir, port)):
                for _ in range(args.rounds):
                    lines.append(row(server.label, await measure(server, base, args.corpus)))
    finally:
        proc.kill()
        proc.wait()
    print(f"{len(load_corpus(args.corpus))} pages of {args.corpus}, one at a time over stdio:")
    for line in lines:
        print("  " + line)
    print(f"reproduce: python bench/mcp_face.py --corpus {args.corpus} --rounds {args.rounds}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--rounds", type=int, default=1, help="runs per server")
    parser.add_argument("--origin", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.origin:
        trio.run(serve_origin, args.corpus)
    else:
        trio.run(run, args)


if __name__ == "__main__":
    main()
