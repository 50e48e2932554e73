"""A download reaches fetch's document readers (issue 25): in a daemon composed as the
catalogue composes it, a PDF the page downloads is kept in web's fileKey store, and
``REQ:fetch FILE_KEY`` of its key answers the PDF's text."""

from __future__ import annotations

import functools
import pathlib
from dataclasses import replace

import trio

from csp_web.app.catalog import catalogue
from csp_web.config import Config, with_section
from csp_web.core.api.context import Peer
from csp_web.core.api.ports import Seams
from csp_web.core.daemon.compose import open_daemon
from csp_web.net import GuardConfig
from protocol import Status, Task
from specialists.tool.config import ToolConfig
from specialists.web.config import WebConfig
from tests.net._origin import Origin, Reply, Seen

WAIT_S = 60.0  # a first Chromium launch on a loaded 2-core host, a page and a PDF read
FIXTURES = pathlib.Path(__file__).parent.parent / "web" / "fixtures" / "pdf"
PDF = (FIXTURES / "chrome_08_one.pdf").read_bytes()
TEXT = "No workspace root may be, contain or lie inside the daemon's state dir"


def _route(seen: Seen) -> Reply:
    if seen.target.startswith("/notes.pdf"):
        disposition = ("content-disposition", 'attachment; filename="notes.pdf"')
        return Reply(200, [("content-type", "application/pdf"), disposition], PDF)
    page = b'<html><body><a id="get" href="/notes.pdf">notes</a></body></html>'
    return Reply(200, [("content-type", "text/html")], page)


def _config(config: Config, origin: Origin) -> Config:
    guard = GuardConfig(
        allow_http=True, allowed_ports=(origin.port,), allow_private=("127.0.0.1/32",)
    )
    memory = replace(config.memory, socket_path=None)
    web = replace(WebConfig(), guard=guard)
    return with_section(
        with_section(replace(config, memory=memory), "web", web), "tool", ToolConfig()
    )


def _task(op: str, out: str, *fields: tuple[str, str]) -> Task:
    return Task(op, "TOOL" if op == "browser" else "WEB", out, None, fields)


async def test_fetch_reads_a_downloaded_pdf_by_its_file_key(
    config: Config, nursery: trio.Nursery
) -> None:
    origin = Origin("http", routes={"/": _route, "/notes.pdf": _route})
    await nursery.start(functools.partial(origin.serve, ssl_context=None))
    async with open_daemon(
        _config(config, origin), catalogue(seams=Seams()), memory=None
    ) as daemon:
        peer = Peer("t", uid=1000)
        with trio.fail_after(WAIT_S):
            clicked = await daemon.dispatcher.run(
                _task(
                    "browser",
                    "BROWSER_RESULT",
                    ("ACTION", "navigate"),
                    ("TARGET_URL", origin.url("127.0.0.1", "/")),
                    ("SESSION", "d"),
                ),
                peer,
            )
            assert clicked.status is Status.OK, clicked
            clicked = await daemon.dispatcher.run(
                _task(
                    "browser",
                    "BROWSER_RESULT",
                    ("ACTION", "click"),
                    ("SELECTOR", "css:#get"),
                    ("SESSION", "d"),
                ),
                peer,
            )
            assert clicked.status is Status.OK, clicked
            download = clicked.get("DOWNLOAD") or ""
            key, name, size, kind = download.split(" ")
            assert (name, size, kind) == ("notes.pdf", str(len(PDF)), "application/pdf")
            read = await daemon.dispatcher.run(
                _task("fetch", "CONTENT", ("FILE_KEY", key), ("MAX_CHARS", "20000")), peer
            )
    assert read.status in (Status.OK, Status.PARTIAL), read
    assert TEXT in (read.get("DATA") or ""), read
