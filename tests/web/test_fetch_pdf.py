"""fetch of a PDF end to end (issue 24, "Documents"): the dispatcher, the guarded client against
the local HTTPS origin, the reader in its worker process, the cache and the fileKey snapshot."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from csp_web.config import Config, with_section
from protocol import Reply, Status
from specialists.formats import Limits
from specialists.formats.pdf import read_pdf
from specialists.web.config import web_section
from specialists.web.pages.filekeys import file_key
from specialists.web.pages.loading import Page, document_words
from specialists.web.pages.ops_fetch import OPS
from specialists.web.services import WebServices
from tests.net._origin import Origin
from tests.web.conftest import DispatcherFactory
from tests.web.pages_support import fetch, hits, run, serve
from tests.web.pdf_support import (
    PDF_TYPE,
    count_lie,
    fixture,
    flate_bomb,
    many_pages,
    no_page_loads,
    with_bad_page,
)
from tests.web.test_fetch_hot import answered_alike, fetch_task, slow


@pytest.fixture
def web_config(web_config: Config) -> Config:
    """The suite's web config with the reader's address space at 256 MiB: every fixture reads
    within it, and a flate bomb meets it fast."""
    fetch_config = replace(web_section(web_config).fetch, reader_memory_bytes=256 << 20)
    return with_section(web_config, "web", replace(web_section(web_config), fetch=fetch_config))


def _frame(url: str, data: bytes, *, cached: bool = False) -> Reply:
    """The whole OK reply fetch gives for the one-page PDF ``data`` at ``url``."""
    document = read_pdf(data, Limits())
    markdown, title = document.markdown, document.title or ""
    key = file_key(Page(url, 200, PDF_TYPE, "document", markdown=markdown))
    declared = [("PUBLISHED", document.published or ""), ("LANG", document.lang or "")]
    return Reply(
        Status.OK,
        (
            ("SCOPE", "[origin.test]"),
            ("DATA", markdown),
            ("TITLE", title),
            *[(name, value) for name, value in declared if value],
            ("WORD_COUNT", str(document_words(markdown))),
            ("PAGES", "1"),
            ("CACHED", "true" if cached else "false"),
            ("URL", url),
            ("FILE_KEY", key),
            ("CONTENT_LENGTH", str(len(markdown))),
            ("TOKENS", str(math.ceil(len(markdown) / 4))),
            ("TRUNCATED", "false"),
            ("CITE", f'{url} "{title}"'),
        ),
    )


async def test_fetch_of_a_pdf_replies_its_markdown_title_and_pages(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    data = fixture("chrome_10_one")
    url = serve(origin, "/paper.pdf", data, PDF_TYPE)
    reply = await fetch(make_dispatcher(OPS), url)
    assert reply == _frame(url, data)
    assert (reply.get("DATA") or "").startswith("# ")


@pytest.mark.parametrize(
    ("path", "head"), [("/download", b""), ("/paper.pdf", b""), ("/junk", b"\r\n \n")]
)
async def test_an_octet_stream_pdf_is_read_by_its_magic_bytes_or_its_suffix(
    make_dispatcher: DispatcherFactory, origin: Origin, path: str, head: bytes
) -> None:
    data = head + fixture("chrome_10_one")
    url = serve(origin, path, data, "application/octet-stream")
    reply = await fetch(make_dispatcher(OPS), url)
    assert (reply.status, reply.get("PAGES")) == (Status.OK, "1")
    assert reply.get("DATA") == read_pdf(data, Limits()).markdown


async def test_a_pdf_pages_through_one_snapshot_by_start_as_html_does(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    """START and NEXT_START are character offsets into the one Markdown; the next part comes
    from the cache (one download) under the same fileKey."""
    dispatcher = make_dispatcher(OPS)
    data = fixture("lo_02_serif_title")
    markdown = read_pdf(data, Limits()).markdown
    url = serve(origin, "/long.pdf", data, PDF_TYPE)
    first = await fetch(dispatcher, url, ("MAX_CHARS", "3000"))
    second = await fetch(dispatcher, url, ("MAX_CHARS", "3000"), ("START", "3000"))
    assert (first.status, first.get("NEXT_START"), first.get("PAGES")) == (
        Status.PARTIAL,
        "3000",
        "3",
    )
    assert first.get("REMAINING_CHARS") == str(len(markdown) - 3000)
    assert (first.get("DATA") or "") + (second.get("DATA") or "") == markdown[:6000]
    assert (second.get("CACHED"), second.get("FILE_KEY")) == ("true", first.get("FILE_KEY"))
    assert hits(origin, "/long.pdf") == 1
    by_key = await run(
        dispatcher, "fetch", "CONTENT", None, ("FILE_KEY", first.get("FILE_KEY") or "")
    )
    assert by_key.get("DATA") == markdown[:8000]


async def test_max_pages_bounds_the_pages_read_at_n_and_past_the_last_page(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    """Three pages: MAX_PAGES 2 reads two (PAGES_READ 2); MAX_PAGES 3 reads all (no
    PAGES_READ), downloading again since the snapshot held fewer; MAX_PAGES 1 is then cut
    from the cached snapshot at its page marker."""
    dispatcher = make_dispatcher(OPS)
    data = fixture("lo_02_serif_title")
    url = serve(origin, "/three.pdf", data, PDF_TYPE)
    two = await fetch(dispatcher, url, ("MAX_PAGES", "2"))
    three = await fetch(dispatcher, url, ("MAX_PAGES", "3"), ("MAX_CHARS", "50000"))
    one = await fetch(dispatcher, url, ("MAX_PAGES", "1"), ("MAX_CHARS", "50000"))
    assert (two.get("PAGES"), two.get("PAGES_READ")) == ("3", "2")
    assert (three.get("PAGES"), three.get("PAGES_READ")) == ("3", None)
    assert three.get("DATA") == read_pdf(data, Limits()).markdown
    assert hits(origin, "/three.pdf") == 2
    assert (one.get("PAGES_READ"), one.get("CACHED")) == ("1", "true")
    assert one.get("DATA") == read_pdf(data, Limits(max_pages=1)).markdown
    assert "<!-- page 2 -->" not in (one.get("DATA") or "")


@pytest.mark.parametrize(("extra", "ok"), [(0, True), (1, False)])
async def test_max_pages_is_accepted_at_the_cap_and_refused_above_it(
    make_dispatcher: DispatcherFactory, origin: Origin, web: WebServices, extra: int, ok: bool
) -> None:
    cap = web.config.fetch.max_pages_cap
    url = serve(origin, "/cap.pdf", fixture("chrome_10_one"), PDF_TYPE)
    reply = await fetch(make_dispatcher(OPS), url, ("MAX_PAGES", str(cap + extra)))
    if ok:
        assert (reply.status, reply.get("PAGES")) == (Status.OK, "1")
    else:
        assert reply.get("ERROR") == f"invalid_field:MAX_PAGES above {cap}"
        assert hits(origin, "/cap.pdf") == 0  # refused before any download


async def test_max_pages_with_a_file_key_is_refused(make_dispatcher: DispatcherFactory) -> None:
    key = ("FILE_KEY", "fk_aaaaaaaaaaaaaaaa")
    reply = await run(make_dispatcher(OPS), "fetch", "CONTENT", None, key, ("MAX_PAGES", "2"))
    assert reply.get("ERROR") == "invalid_field:MAX_PAGES applies to URL: a FILE_KEY is fixed"


@pytest.mark.parametrize(
    ("name", "why", "pages"), [("scanned", "scanned", "1"), ("encrypted", "encrypted", None)]
)
async def test_a_pdf_without_a_text_layer_is_partial_naming_why(
    make_dispatcher: DispatcherFactory, origin: Origin, name: str, why: str, pages: str | None
) -> None:
    """SPEC R-2: never an OK with empty content; OCR is out of scope."""
    url = serve(origin, f"/{name}.pdf", fixture(name), PDF_TYPE)
    reply = await fetch(make_dispatcher(OPS), url)
    assert (reply.status, reply.get("ERROR")) == (Status.PARTIAL, f"no_text_layer:{why}")
    assert (reply.get("DATA"), reply.get("PAGES")) == ("", pages)


async def test_a_cover_with_no_text_within_max_pages_says_max_pages(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    url = serve(origin, "/cover.pdf", many_pages("lo_01_sans", 1, blank_first=True), PDF_TYPE)
    reply = await fetch(make_dispatcher(OPS), url, ("MAX_PAGES", "1"))
    assert (reply.status, reply.get("ERROR")) == (Status.PARTIAL, "no_text_layer:max_pages")
    assert (reply.get("PAGES"), reply.get("PAGES_READ")) == ("2", "1")


async def test_a_damaged_pdf_is_a_corrupt_document_as_a_damaged_office_file_is(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    url = serve(origin, "/bad.pdf", b"%PDF-1.7\n" + b"\x00" * 100, PDF_TYPE)
    reply = await fetch(make_dispatcher(OPS), url)
    assert (reply.status, reply.get("ERROR")) == (
        Status.FAIL,
        "corrupt_document:pdf:damaged",
    )
    assert reply.get("URL") == url


async def test_a_5_mb_pdf_reads_past_the_html_body_cap(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    """web.fetch.max_document_bytes (32 MiB), not guard.max_body_bytes (1 MB), caps a PDF."""
    data = fixture("chrome_10_one") + b"\n%" + b"x" * (5 << 20)
    url = serve(origin, "/big.pdf", data, PDF_TYPE)
    reply = await fetch(make_dispatcher(OPS), url)
    assert (reply.status, reply.get("PAGES")) == (Status.OK, "1")
    assert reply.get("DATA") == read_pdf(data, Limits()).markdown


async def test_a_50_mb_pdf_is_too_large_at_the_document_cap(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    data = fixture("chrome_10_one") + b"\n%" + b"x" * (50 << 20)
    url = serve(origin, "/huge.pdf", data, PDF_TYPE)
    reply = await fetch(make_dispatcher(OPS), url)
    assert (reply.status, reply.get("ERROR")) == (Status.FAIL, "too_large:max_document_bytes")


async def test_a_pdf_that_blows_the_reader_s_memory_is_too_large(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    """512 MiB of content stream in half a megabyte on the wire, against 256 MiB."""
    url = serve(origin, "/bomb.pdf", flate_bomb(512), PDF_TYPE)
    reply = await fetch(make_dispatcher(OPS), url)
    assert (reply.status, reply.get("ERROR")) == (Status.FAIL, "too_large:reader_memory")
    ok = serve(origin, "/ok.pdf", fixture("lo_01_sans"), PDF_TYPE)
    again = await fetch(make_dispatcher(OPS), ok)
    assert again.status is Status.OK  # the daemon is unharmed


async def test_several_urls_name_each_pdf_s_pages_on_its_fetch_line(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    pdf = serve(origin, "/one.pdf", fixture("chrome_10_one"), PDF_TYPE)
    scan = serve(origin, "/scan.pdf", fixture("scanned"), PDF_TYPE)
    urls = (("URL", pdf), ("URL", scan), ("MAX_PAGES", "5"))
    reply = await run(make_dispatcher(OPS), "fetch", "CONTENT", None, *urls)
    (line,) = [value for name, value in reply.fields if name == "FETCH"]
    assert " pages:1 " in line
    assert reply.get("FETCH_ERROR") == f"{scan} no_text_layer:scanned"


@pytest.mark.parametrize("order", [("1", "3", "2", "3", "1"), ("3", "1", "3", "2", "3")])
async def test_hits_of_a_document_at_several_max_pages_each_answer_their_own_pages(
    make_dispatcher: DispatcherFactory, origin: Origin, order: tuple[str, ...]
) -> None:
    """A document cut at MAX_PAGES is its own snapshot, never the entry's memo: hits asking
    for fewer or more pages in turn each answer what their task answers."""
    dispatcher = make_dispatcher(OPS)
    url = serve(origin, "/three.pdf", fixture("lo_02_serif_title"), PDF_TYPE)
    views = [[("MAX_PAGES", p), ("MAX_CHARS", "50000")] for p in order]
    views += [[("MAX_PAGES", p), ("MAX_CHARS", "30")] for p in order]
    for fields in views:
        await slow(dispatcher, fetch_task(url, *fields))
    assert await answered_alike(dispatcher, (url,), views) > 0


@pytest.mark.parametrize(
    ("path", "make", "unreadable"),
    [("/bad-page.pdf", with_bad_page, "2"), ("/count-lie.pdf", count_lie, "2-3")],
)
async def test_a_pdf_with_pages_that_will_not_load_answers_the_rest_partial_naming_them(
    make_dispatcher: DispatcherFactory, origin: Origin, path: str, make: object, unreadable: str
) -> None:
    assert callable(make)
    data = make()
    url = serve(origin, path, data, PDF_TYPE)
    dispatcher = make_dispatcher(OPS)
    reply = await fetch(dispatcher, url)
    assert (reply.status, reply.get("ERROR"), reply.get("PAGES")) == (
        Status.PARTIAL,
        f"corrupt_document:pdf:pages_unreadable:{unreadable}",
        "3",
    )
    assert reply.get("DATA") == read_pdf(data, Limits()).markdown
    assert "Tides reach the harbour" in (reply.get("DATA") or "")
    again = await fetch(dispatcher, url)  # from the cache (the hot route): the same answer
    assert (again.status, again.get("ERROR"), again.get("CACHED")) == (
        Status.PARTIAL,
        reply.get("ERROR"),
        "true",
    )


async def test_a_pdf_none_of_whose_pages_load_fails_as_a_corrupt_document(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    url = serve(origin, "/no-pages.pdf", no_page_loads(), PDF_TYPE)
    reply = await fetch(make_dispatcher(OPS), url)
    assert (reply.status, reply.get("ERROR")) == (
        Status.FAIL,
        "corrupt_document:pdf:pages_unreadable",
    )


async def test_several_urls_answer_a_pdf_with_an_unreadable_page_partial_naming_it(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    whole = serve(origin, "/one.pdf", fixture("chrome_10_one"), PDF_TYPE)
    damaged = serve(origin, "/bad-page.pdf", with_bad_page(), PDF_TYPE)
    reply = await run(
        make_dispatcher(OPS), "fetch", "CONTENT", None, ("URL", whole), ("URL", damaged)
    )
    assert (reply.status, reply.get("ERROR"), reply.get("DATA")) == (
        Status.PARTIAL,
        "corrupt_document:pdf:pages_unreadable:2",
        "fetched:2,failed:0",
    )
    assert reply.get("FETCH_ERROR") is None
