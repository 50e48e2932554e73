"""Document readers: which PDF library, how fast, how faithful, and what a worker process costs.

    python bench/formats.py [--rounds N]

Reads every PDF of ``tests/web/fixtures/pdf/`` (22 documents printed by LibreOffice, Chromium
and pdflatex from texts held here: ``make_pdfs.py`` there remakes them) with each library's
own text extraction, timed interleaved file by file so the host's load falls on all alike:

- ``pypdfium2`` (Apache-2.0 / BSD-3, PDFium's C++ through ctypes): ``PdfTextPage.get_text_range``;
- ``pypdf`` (BSD-3, pure Python): ``PageObject.extract_text``;
- ``pdfminer.six`` (MIT, pure Python): ``high_level.extract_text`` (its layout analysis);
- ``read_pdf``: our reader (``specialists/formats/pdf.py``) on the library chosen, which adds
  soft-hyphen joins, headings by font size and page markers;
- ``worker``: ``read_document("pdf", ...)`` (specialists/web/pages/documents.py): the same
  reader in a fresh worker process with its address-space limit, and beside it the cost of a
  worker that reads an empty document (the spawn overhead alone).

It prints, per reader, pages per second (pages over the total of the best time of each file)
and text accuracy: token F1 of the words (``\\w+``, lower-cased, as a multiset) against the
known text beside each PDF; for ``read_pdf`` also heading recall (the known ``#`` headings
found as Markdown headings). pypdf and pdfminer.six are not dependencies of csp-web: install
them for this run only (``pip install pypdf pdfminer.six``); a library missing is skipped.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import io
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import trio

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so `python bench/formats.py` finds the packages
    sys.path.insert(0, str(REPO_ROOT))

from specialists.formats import Limits  # noqa: E402
from specialists.formats.pdf import read_pdf  # noqa: E402
from specialists.web.pages.documents import read_document  # noqa: E402

FIXTURES = REPO_ROOT / "tests" / "web" / "fixtures" / "pdf"
_WORD = re.compile(r"\w+")
_HEADING = re.compile(r"^#{1,6} (.*)$", re.M)
_MARKER = re.compile(r"^<!-- page \d+ -->$", re.M)

Extract = Callable[[bytes], tuple[str, int]]  # PDF bytes -> (text, pages)


def with_pypdfium2(data: bytes) -> tuple[str, int]:
    import pypdfium2

    pdf = pypdfium2.PdfDocument(data)
    try:
        texts = []
        for page in pdf:
            textpage = page.get_textpage()
            texts.append(textpage.get_text_range())
            textpage.close()
            page.close()
        return "\n".join(texts), len(pdf)
    finally:
        pdf.close()


def with_pypdf(data: bytes) -> tuple[str, int]:
    import pypdf

    reader = pypdf.PdfReader(io.BytesIO(data))
    return "\n".join(page.extract_text() for page in reader.pages), len(reader.pages)


def with_pdfminer(data: bytes) -> tuple[str, int]:
    from pdfminer.high_level import extract_text
    from pdfminer.pdfpage import PDFPage

    pages = sum(1 for _ in PDFPage.get_pages(io.BytesIO(data)))
    return extract_text(io.BytesIO(data)), pages


def with_read_pdf(data: bytes) -> tuple[str, int]:
    document = read_pdf(data, Limits())
    return document.markdown, document.pages or 0


def with_worker(data: bytes) -> tuple[str, int]:
    async def read() -> tuple[str, int]:
        document = await read_document("pdf", data, Limits(), trio.current_time() + 60)
        return document.markdown, document.pages or 0

    return trio.run(read)


LIBRARIES: dict[str, tuple[str | None, Extract]] = {
    "pypdfium2": ("pypdfium2", with_pypdfium2),
    "pypdf": ("pypdf", with_pypdf),
    "pdfminer.six": ("pdfminer", with_pdfminer),
    "read_pdf": (None, with_read_pdf),
    "worker": (None, with_worker),
}


def words(text: str) -> collections.Counter[str]:
    return collections.Counter(w.lower() for w in _WORD.findall(text))


def token_f1(found: str, known: str) -> float:
    """F1 of the words of ``found`` against those of ``known``, as multisets."""
    got, want = words(found), words(known)
    common = sum((got & want).values())
    if not common:
        return 0.0
    precision, recall = common / sum(got.values()), common / sum(want.values())
    return 2 * precision * recall / (precision + recall)


def heading_recall(markdown: str, known: str) -> float:
    want = [h.lower() for h in _HEADING.findall(known)]
    got = {h.strip().lower() for h in _HEADING.findall(markdown)}
    return sum(h in got for h in want) / len(want) if want else 1.0


def documents() -> list[tuple[str, bytes, str]]:
    """(name, PDF bytes, known Markdown) for every PDF with its known text beside it."""
    return [
        (pdf.stem, pdf.read_bytes(), pdf.with_suffix(".md").read_text("utf-8"))
        for pdf in sorted(FIXTURES.glob("*.pdf"))
        if pdf.with_suffix(".md").exists()
    ]


def available() -> dict[str, Extract]:
    found = {}
    for name, (module, extract) in LIBRARIES.items():
        if module is None or importlib.util.find_spec(module) is not None:
            found[name] = extract
        else:
            print(f"{name}: not installed, skipped", file=sys.stderr)
    return found


def run(rounds: int) -> None:
    docs = documents()
    readers = available()
    best: dict[str, list[float]] = {name: [] for name in readers}
    f1: dict[str, list[float]] = {name: [] for name in readers}
    headings: list[float] = []
    total_pages = 0
    for name, data, known in docs:
        times: dict[str, list[float]] = {reader: [] for reader in readers}
        for _ in range(rounds):
            for reader, extract in readers.items():  # interleaved: one file, every reader
                started = time.perf_counter()
                text, pages = extract(data)
                times[reader].append(time.perf_counter() - started)
        for reader, extract in readers.items():
            text, pages = extract(data)
            best[reader].append(min(times[reader]))
            plain = _MARKER.sub("", text)
            f1[reader].append(token_f1(_HEADING.sub(r"\1", plain), known))
            if reader == "read_pdf":
                headings.append(heading_recall(text, known))
        total_pages += pages
        print(f"{name}: {pages} pages", file=sys.stderr)
    print(f"{len(docs)} PDFs, {total_pages} pages, best of {rounds} per file")
    print(f"{'reader':<14}{'pages/s':>10}{'F1 mean':>10}{'F1 min':>10}")
    for reader in readers:
        rate = total_pages / sum(best[reader])
        print(
            f"{reader:<14}{rate:>10.1f}{statistics.mean(f1[reader]):>10.4f}{min(f1[reader]):>10.4f}"
        )
    if headings:
        print(f"read_pdf heading recall: {statistics.mean(headings):.3f}")
    if "worker" in readers:
        print(f"worker spawn overhead: {spawn_overhead(rounds) * 1000:.0f} ms per document")


def spawn_overhead(rounds: int) -> float:
    """The best wall time of a worker that reads the smallest PDF there is (one empty page):
    what a process per document costs beside the parse."""
    empty = (
        b"%PDF-1.1\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n"
        b"2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>endobj\n"
        b"3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 10 10]>>endobj\n"
        b"trailer<</Root 1 0 R>>\n"
    )
    times = []
    for _ in range(max(rounds, 3)):
        started = time.perf_counter()
        with_worker(empty)
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    run(parser.parse_args().rounds)


if __name__ == "__main__":
    main()
