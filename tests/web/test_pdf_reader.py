"""specialists.formats.pdf on real PDFs (LibreOffice, Chromium, pdflatex; a scan; encrypted),
and the worker process that runs any reader (specialists/web/pages/documents.py) at its bounds."""

from __future__ import annotations

import collections
import re

import pytest
import trio

from csp_web.core.api.errors import OpError
from protocol import ErrorCode
from specialists.formats import Document, Limits, Unreadable, unreadable_pages
from specialists.formats.pdf import read_pdf
from specialists.web.pages import documents
from specialists.web.pages.documents import Bounds, read_document, reader_for
from tests.web.pdf_support import (
    count_lie,
    fixture,
    flate_bomb,
    known,
    many_pages,
    no_page_loads,
    printed,
    with_bad_page,
)

WAIT_S = 30.0
_WORD = re.compile(r"\w+")
_HEADING = re.compile(r"^(#{1,6}) (.*)$", re.M)


def _words(text: str) -> collections.Counter[str]:
    return collections.Counter(w.lower() for w in _WORD.findall(text))


def token_f1(found: str, want: str) -> float:
    got, expected = _words(found), _words(want)
    common = sum((got & expected).values())
    return 2 * common / (sum(got.values()) + sum(expected.values()))


def _plain(markdown: str) -> str:
    return re.sub(r"<!-- page \d+ -->", "", _HEADING.sub(r"\2", markdown))


@pytest.mark.parametrize("name", printed())
def test_every_printed_pdf_reads_back_its_known_words(name: str) -> None:
    """Soft hyphens joined, two columns read one after the other: the words come back."""
    document = read_pdf(fixture(name), Limits())
    assert token_f1(_plain(document.markdown), known(name)) >= 0.99
    assert (document.no_text, document.cut) == (None, False)
    assert document.pages == document.pages_read


def test_headings_come_from_the_font_size_and_pages_are_marked() -> None:
    """chrome_12: an <h1> and <h2>s in Chromium's print, on two pages."""
    document = read_pdf(fixture("chrome_12_two"), Limits())
    headings = [(len(level), text) for level, text in _HEADING.findall(document.markdown)]
    want = [(len(level), text) for level, text in _HEADING.findall(known("chrome_12_two"))]
    assert headings == want
    assert document.markdown.count("<!-- page 2 -->") == 1
    assert "<!-- page 3 -->" not in document.markdown
    assert document.pages == 2


def test_two_headings_one_after_the_other_stay_two() -> None:
    """chrome_10 opens with <h2>Lines</h2><h2>Steps</h2>: a margin apart, not one wrapped
    heading."""
    document = read_pdf(fixture("chrome_10_one"), Limits())
    assert document.markdown.startswith("# Lines\n\n# Steps\n\n")


def test_latex_sections_are_headings_and_hyphenated_words_are_whole() -> None:
    document = read_pdf(fixture("tex_19_two_hyph"), Limits())
    headings = {text.replace("’", "'") for _, text in _HEADING.findall(document.markdown)}
    assert {text for _, text in _HEADING.findall(known("tex_19_two_hyph"))} <= headings
    assert "without socket" in document.markdown  # "with-/out" across a line end
    assert "\ufffe" not in document.markdown


def test_the_title_is_the_document_info_s_or_else_the_first_heading() -> None:
    chrome = read_pdf(fixture("chrome_10_one"), Limits())
    assert chrome.title == _HEADING.findall(known("chrome_10_one"))[0][1]
    libreoffice = read_pdf(fixture("lo_00_serif"), Limits())  # no Title in its info
    assert libreoffice.title == _HEADING.findall(known("lo_00_serif"))[0][1]
    assert (libreoffice.published or "")[:2] == "20"


def test_max_pages_reads_that_many_pages_at_n_and_all_past_the_last() -> None:
    """lo_02 has three pages: max_pages 2 reads two and says it cut, 3 reads all."""
    two = read_pdf(fixture("lo_02_serif_title"), Limits(max_pages=2))
    three = read_pdf(fixture("lo_02_serif_title"), Limits(max_pages=3))
    assert (two.pages, two.pages_read, two.cut) == (3, 2, True)
    assert "<!-- page 2 -->" in two.markdown
    assert "<!-- page 3 -->" not in two.markdown
    assert (three.pages, three.pages_read, three.cut) == (3, 3, False)
    assert three.markdown.startswith(two.markdown)


def test_max_chars_cuts_the_markdown() -> None:
    document = read_pdf(fixture("lo_04_serif"), Limits(max_chars=1000))
    assert (len(document.markdown), document.cut) == (1000, True)


def test_a_scan_has_no_text_layer() -> None:
    """Its info's title is Chromium's file name for the page printed: no title."""
    scan = read_pdf(fixture("scanned"), Limits())
    assert (scan.markdown, scan.title, scan.pages, scan.pages_read) == ("", None, 1, 1)
    assert scan.no_text == "scanned"


def test_an_encrypted_pdf_says_so_and_an_owner_password_only_one_reads() -> None:
    assert read_pdf(fixture("encrypted"), Limits()) == Document(
        "", pages_read=0, no_text="encrypted"
    )
    locked = read_pdf(fixture("owner_locked"), Limits())
    assert locked.markdown == read_pdf(fixture("lo_00_serif"), Limits()).markdown


def test_blank_pages_read_within_max_pages_say_so() -> None:
    """A blank cover: the one page read has no text, the document has."""
    data = many_pages("lo_01_sans", 1, blank_first=True)
    cover = read_pdf(data, Limits(max_pages=1))
    assert (cover.no_text, cover.pages_read, cover.pages) == ("max_pages", 1, 2)
    assert read_pdf(data, Limits(max_pages=2)).no_text is None


def test_damaged_bytes_are_unreadable() -> None:
    with pytest.raises(Unreadable) as caught:
        read_pdf(b"%PDF-1.4\n" + b"\x00garbage" * 100, Limits())
    assert (caught.value.code, caught.value.detail) == (
        "corrupt_document",
        "pdf:damaged",
    )


def test_a_page_that_will_not_load_is_marked_and_the_others_read() -> None:
    """PDFium opens the file but not its page 2: pages 1 and 3 read, page 2 stands as its
    marker and a line saying it could not be read."""
    document = read_pdf(with_bad_page(), Limits())
    assert document.markdown == (
        "Tides reach the harbour twice a day\n\n<!-- page 2 -->\n\n"
        "<!-- page 2 unreadable -->\n\n<!-- page 3 -->\n\nTides reach the harbour twice a day"
    )
    assert (document.pages, document.pages_read, document.no_text) == (3, 3, None)
    assert unreadable_pages(document.markdown) == [2]


def test_a_page_count_past_the_page_tree_marks_the_missing_pages() -> None:
    document = read_pdf(count_lie(), Limits())
    assert unreadable_pages(document.markdown) == [2, 3]
    assert document.markdown.startswith("Tides reach the harbour twice a day\n\n")


def test_a_pdf_none_of_whose_pages_load_is_a_corrupt_document() -> None:
    with pytest.raises(Unreadable) as caught:
        read_pdf(no_page_loads(), Limits())
    assert (caught.value.code, caught.value.detail) == ("corrupt_document", "pdf:pages_unreadable")


def test_text_that_spells_the_unreadable_marker_is_no_marker() -> None:
    assert unreadable_pages("\\<!-- page 2 unreadable -->") == []


@pytest.mark.parametrize(
    ("content_type", "body", "url", "reader"),
    [
        ("application/pdf", b"", "https://a.test/x", "pdf"),
        ("application/octet-stream", b"%PDF-1.7\n", "https://a.test/download", "pdf"),
        ("application/octet-stream", b"\r\n %PDF-1.7\n", "https://a.test/x", "pdf"),
        ("application/octet-stream", b"\x00\x01", "https://a.test/paper.PDF?v=2", "pdf"),
        ("", b"%PDF-1.4", "https://a.test/x", "pdf"),
        ("application/octet-stream", b"\x00\x01", "https://a.test/x.bin", None),
        ("text/html", b"%PDF-1.4", "https://a.test/x.pdf", None),
    ],
)
def test_the_reader_is_chosen_by_type_then_magic_then_suffix(
    content_type: str, body: bytes, url: str, reader: str | None
) -> None:
    """A declared type other than an untyped one is believed: HTML named .pdf stays HTML (a
    text type over a binary signature reaches this as octet-stream: csp_web/net/sniff.py)."""
    assert reader_for(content_type, body, url) == reader


async def _read(data: bytes, bounds: Bounds, within_s: float = WAIT_S) -> Document:
    with trio.fail_after(WAIT_S):
        return await read_document(
            "pdf", data, Limits(), trio.current_time() + within_s, bounds=bounds
        )


async def test_the_worker_answers_what_the_reader_answers() -> None:
    data = fixture("chrome_12_two")
    assert await _read(data, Bounds()) == read_pdf(data, Limits())


@pytest.mark.parametrize("make", [with_bad_page, count_lie])
async def test_the_worker_answers_a_pdf_with_pages_that_will_not_load(make: object) -> None:
    """A page PDFium cannot load is the reader's to mark, never the worker's death."""
    assert callable(make)
    data = make()
    assert await _read(data, Bounds()) == read_pdf(data, Limits())


async def test_a_flate_bomb_meets_the_worker_s_memory_bound_as_too_large() -> None:
    """512 MiB of content stream against 256 MiB of address space: the worker dies, the
    caller gets a code."""
    with pytest.raises(OpError) as caught:
        await _read(flate_bomb(512), Bounds(memory_bytes=256 << 20))
    assert (caught.value.code, caught.value.detail) == (ErrorCode.TOO_LARGE, "reader_memory")


@pytest.mark.slow  # a worker runs for a second of CPU
async def test_a_long_document_meets_the_worker_s_cpu_bound_as_too_large() -> None:
    with pytest.raises(OpError) as caught:
        await _read(many_pages("tex_19_two_hyph", 60), Bounds(cpu_s=1))
    assert (caught.value.code, caught.value.detail) == (ErrorCode.TOO_LARGE, "reader_cpu")


async def test_a_worker_past_the_deadline_is_killed_and_answers_timeout() -> None:
    with pytest.raises(OpError) as caught:
        await _read(many_pages("tex_19_two_hyph", 60), Bounds(), within_s=0.2)
    assert (caught.value.code, caught.value.detail) == (ErrorCode.FETCH_FAILED, "timeout")


@pytest.mark.parametrize("limit", [1, 2])
async def test_workers_past_the_limit_wait_for_one_to_end(limit: int) -> None:
    """N workers run at once; read N+1 waits (its deadline still counting)."""
    limiter = trio.CapacityLimiter(limit)
    documents.WORKERS.set(limiter)
    long = many_pages("tex_19_two_hyph", 60)
    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            for _ in range(limit + 1):
                nursery.start_soon(_read, long, Bounds())
            while limiter.statistics().tasks_waiting < 1:
                await trio.sleep(0.01)
            assert limiter.borrowed_tokens == limit
            nursery.cancel_scope.cancel()


async def test_an_answer_past_the_output_cap_is_too_large() -> None:
    with pytest.raises(OpError) as caught:
        await _read(fixture("chrome_12_two"), Bounds(max_output_bytes=1000))
    assert (caught.value.code, caught.value.detail) == (ErrorCode.TOO_LARGE, "reader_output")


@pytest.mark.parametrize(
    "answer",
    [b"[]", b'{"markdown": 1}', b'{"markdown": "", "pages": -1}', b'{"markdown": "", "x": 1}'],
)
def test_a_worker_answer_of_the_wrong_shape_is_the_reader_s_failure(answer: bytes) -> None:
    """A worker a hostile file subverted may write anything: only a Document of the right
    types is taken."""
    with pytest.raises(OpError) as caught:
        documents._answer("pdf", 0, answer, b"")
    assert (caught.value.code, caught.value.detail) == (
        ErrorCode.UNSUPPORTED_CONTENT,
        "pdf:reader_failed",
    )


@pytest.mark.parametrize(
    "answer",
    [b'{"code": "internal_error", "detail": "x"}', b'{"code": "too_large", "detail": "a\\nb"}'],
)
def test_a_worker_error_outside_the_reader_codes_or_words_is_its_failure(answer: bytes) -> None:
    with pytest.raises(OpError) as caught:
        documents._answer("pdf", documents.REPORTED_EXIT, answer, b"")
    assert (caught.value.code, caught.value.detail) == (
        ErrorCode.UNSUPPORTED_CONTENT,
        "pdf:reader_failed",
    )
