"""The document ops built on fetch read a PDF as fetch does (issue 24): the board lists it, the
File Cabinet keeps and pages its Markdown, a research job reads it as a source and says why a
scan was skipped."""

from __future__ import annotations

import math

import pytest

from csp_web.core.dispatch.dispatcher import Dispatcher
from protocol import Status
from specialists.formats import Limits
from specialists.formats.pdf import read_pdf
from specialists.web.docs import cabinet
from specialists.web.pages.fetch_fields import empty_error
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


@pytest.mark.parametrize("name", ["scanned", "encrypted"])
async def test_a_saved_pdf_without_a_text_layer_reads_back_saying_why_as_its_fetch_did(
    docs: Dispatcher, origin: Origin, name: str
) -> None:
    url = serve(origin, f"/{name}.pdf", fixture(name), PDF_TYPE)
    fetched = await ask(docs, "fetch", "CONTENT", ("URL", url))
    key = fetched.get("FILE_KEY") or ""
    assert (await ask(docs, "save", "ACK", ("FILE_KEY", key))).status is Status.OK
    back = await ask(docs, "cabinet", "CONTENT", ("FILE_KEY", key))
    assert fetched.get("ERROR") == f"no_text_layer:{name}"
    assert (back.status, back.get("ERROR"), back.get("DATA")) == (
        Status.PARTIAL,
        f"no_text_layer:{name}",
        "",
    )


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


@pytest.mark.parametrize(
    ("no_text", "error"),
    [("scanned", "no_text_layer:scanned"), (None, "empty_content:empty_body")]
    + [(bad, "empty_content:empty_body") for bad in ("x y", "A" * 5, "a" * 33, 7)],
)
def test_a_cabinet_entry_s_reason_is_believed_only_as_a_short_token(
    no_text: object, error: str
) -> None:
    """The fileKey's hash does not cover ``no_text``: a line in memory claiming odd text (or
    an entry saved before the reason was kept) reads as empty_body."""
    saved = cabinet.Saved("fk_a", "https://a.test/", None, None, 0.0, 1.0, "", no_text)  # type: ignore[arg-type]
    found = empty_error(saved.page(), "")
    assert found is not None
    assert f"{found[0].value}:{found[1]}" == error
