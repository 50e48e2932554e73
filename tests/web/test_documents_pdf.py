"""The document ops built on fetch read a PDF as fetch does (issue 24): the board lists it, the
File Cabinet keeps and pages its Markdown, a research job reads it as a source and says why a
scan was skipped."""

from __future__ import annotations

import math

from csp_web.core.dispatch.dispatcher import Dispatcher
from protocol import Status
from specialists.formats import Limits
from specialists.formats.pdf import read_pdf
from specialists.web.services import WebServices
from tests.net._origin import Origin
from tests.web.pages_support import serve
from tests.web.pdf_support import PDF_TYPE, fixture
from tests.web.test_documents import ask, docs, workspace
from tests.web.test_research import research, run_job, searx_route, steps

FIXTURES = (docs, workspace, research)  # the fixtures these tests take, imported by name


async def test_a_fetched_pdf_is_on_the_board_and_pages_back_from_the_cabinet(
    docs: Dispatcher, origin: Origin
) -> None:
    data = fixture("lo_02_serif_title")
    markdown = read_pdf(data, Limits()).markdown
    url = serve(origin, "/report.pdf", data, PDF_TYPE)
    fetched = await ask(docs, "fetch", "CONTENT", ("URL", url), ("MAX_CHARS", "50000"))
    key = fetched.get("FILE_KEY")
    assert key is not None
    assert (fetched.status, fetched.get("DATA")) == (Status.OK, markdown)
    board = await ask(docs, "board", "BOARD")
    assert board.get_all("FILE") == [
        f"{key} {url} chars:{len(markdown)} tokens:{math.ceil(len(markdown) / 4)} "
        f'turns_left:4 "{fetched.get("TITLE")}"'
    ]
    assert (await ask(docs, "save", "ACK", ("FILE_KEY", key))).status is Status.OK
    back = await ask(docs, "cabinet", "CONTENT", ("FILE_KEY", key), ("MAX_CHARS", "4000"))
    rest = await ask(docs, "cabinet", "CONTENT", ("FILE_KEY", key), ("START", "4000"))
    assert (back.status, back.get("NEXT_START")) == (Status.PARTIAL, "4000")
    assert (back.get("DATA") or "") + (rest.get("DATA") or "") == markdown[:12000]


async def test_a_research_job_reads_a_pdf_source_and_skips_a_scan_saying_why(
    research: tuple[Dispatcher, WebServices], origin: Origin
) -> None:
    dispatcher, _ = research
    report = serve(origin, "/report.pdf", fixture("chrome_12_two"), PDF_TYPE)
    scan = serve(origin, "/scan.pdf", fixture("scanned"), PDF_TYPE)
    searx_route(origin, ["/scan.pdf", "/report.pdf"])
    reply = await run_job(dispatcher, ("MAX_SOURCES", "1"))
    title = read_pdf(fixture("chrome_12_two"), Limits()).title
    assert reply.status is Status.OK
    assert reply.get_all("CITE") == [f'{report} "{title}"']
    assert ("fetch", scan, "no_text_layer:scanned") in steps(reply)
    assert ("fetch", report, "ok") in steps(reply)
