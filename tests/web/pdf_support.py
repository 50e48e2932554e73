"""PDFs for the document tests: the committed fixtures (tests/web/fixtures/pdf, remade by
make_pdfs.py there) and PDFs built here to attack a reader: a flate bomb and a long document."""

from __future__ import annotations

import io
import zlib
from pathlib import Path

import pypdfium2

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "pdf"
PDF_TYPE = "application/pdf"
_MIB = 1 << 20


def fixture(name: str) -> bytes:
    """The bytes of ``fixtures/pdf/<name>.pdf``."""
    return (FIXTURES / f"{name}.pdf").read_bytes()


def known(name: str) -> str:
    """The known text (Markdown) ``fixtures/pdf/<name>.md`` holds for ``<name>.pdf``."""
    return (FIXTURES / f"{name}.md").read_text("utf-8")


def printed() -> list[str]:
    """The names of every fixture with a known text: the 22 printed documents."""
    return sorted(path.stem for path in FIXTURES.glob("*.md"))


def flate_bomb(decoded_mib: int) -> bytes:
    """A one-page PDF whose content stream inflates to ``decoded_mib`` MiB of no-op operators
    from about a thousandth of that on the wire. Built in milliseconds: after a full flush
    deflate output depends only on its input, so one compressed MiB is repeated."""
    chunk = b"q Q " * (_MIB // 4)
    deflate = zlib.compressobj(9)
    first = deflate.compress(chunk) + deflate.flush(zlib.Z_FULL_FLUSH)
    again = deflate.compress(chunk) + deflate.flush(zlib.Z_FULL_FLUSH)
    tail = deflate.flush()
    checksum = 1
    for _ in range(decoded_mib):
        checksum = zlib.adler32(chunk, checksum)
    stream = first + again * (decoded_mib - 1) + tail[:-4] + checksum.to_bytes(4, "big")
    return _pdf(
        b"<</Type/Catalog/Pages 2 0 R>>",
        b"<</Type/Pages/Kids[3 0 R]/Count 1>>",
        b"<</Type/Page/Parent 2 0 R/MediaBox[0 0 612 792]/Contents 4 0 R>>",
        b"<</Length %d/Filter/FlateDecode>>stream\n%b\nendstream" % (len(stream), stream),
    )


def _pdf(*objects: bytes) -> bytes:
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%b\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<</Size %d/Root 1 0 R>>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def many_pages(name: str, copies: int, *, blank_first: bool = False) -> bytes:
    """The fixture ``name``'s pages repeated ``copies`` times, as one PDF; after a blank page
    (a cover with no text) when ``blank_first``."""
    source = pypdfium2.PdfDocument(fixture(name))
    target = pypdfium2.PdfDocument.new()
    try:
        if blank_first:
            target.new_page(612, 792).close()
        for _ in range(copies):
            target.import_pages(source)
        buffer = io.BytesIO()
        target.save(buffer)
        return buffer.getvalue()
    finally:
        target.close()
        source.close()


_TEXT = b"BT /F1 12 Tf 72 720 Td (Tides reach the harbour twice a day) Tj ET"
_PAGE_OBJECTS = (
    b"<</Type/Page/Parent 2 0 R/MediaBox[0 0 612 792]/Contents 4 0 R"
    b"/Resources<</Font<</F1 5 0 R>>>>>>",
    b"<</Length %d>>stream\n%b\nendstream" % (len(_TEXT), _TEXT),
    b"<</Type/Font/Subtype/Type1/BaseFont/Helvetica>>",
)


def with_bad_page() -> bytes:
    """Three pages, the middle one a reference to an object that is no page: PDFium opens
    the file and loads pages 1 and 3 (one page object, twice) but not page 2."""
    return _pdf(
        b"<</Type/Catalog/Pages 2 0 R>>",
        b"<</Type/Pages/Kids[3 0 R 6 0 R 3 0 R]/Count 3>>",
        *_PAGE_OBJECTS,
        b"<</Type/Foo>>",
    )


def count_lie() -> bytes:
    """A page tree whose /Count says 3 over one kid: PDFium counts 3 and loads only page 1."""
    return _pdf(
        b"<</Type/Catalog/Pages 2 0 R>>", b"<</Type/Pages/Kids[3 0 R]/Count 3>>", *_PAGE_OBJECTS
    )


def no_page_loads() -> bytes:
    """Two pages, neither of them a page object."""
    return _pdf(
        b"<</Type/Catalog/Pages 2 0 R>>",
        b"<</Type/Pages/Kids[3 0 R 3 0 R]/Count 2>>",
        b"<</Type/Foo>>",
    )
