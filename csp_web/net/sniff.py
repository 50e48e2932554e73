"""Whether a body declared as text is text (WHATWG MIME Sniffing, §7.1-7.2).

    media_type = sniffed_type("text/html", body[:HEADER_BYTES])   # "application/octet-stream"

Servers put ``text/html`` or ``text/plain`` on whatever they serve (a PDF behind a CMS, a zip
from a download script); read as text, such a body answers ``%PDF-1.7 ... obj`` or control
bytes as a page's content. A declared ``text/html`` or ``text/plain`` whose first bytes are a
binary signature (``SIGNATURES``: the PDF, archive and image patterns of WHATWG's table for an
unknown type) is taken for what a server says when it says nothing, ``application/octet-stream``:
fetch then reads it by its magic bytes or URL suffix (``documents.reader_for``), or refuses it
as ``unsupported_content``. ``text/plain`` is held to WHATWG's "text or binary" rule too: a
binary data byte in its first ``HEADER_BYTES`` (no byte order mark before) makes it binary.
``text/html`` is not (browsers never sniff it for binary bytes: a NUL in a page is the page's
slip), unless its header holds binary bytes and not one ``<``: then it is no markup at all.
"""

from __future__ import annotations

import codecs
import re

OCTET_STREAM = "application/octet-stream"
SNIFFED = frozenset({"text/html", "text/plain"})
HEADER_BYTES = 1445  # WHATWG's resource header: the bytes sniffing reads
# WHATWG §7.1's patterns that no text begins with (each holds a byte no text has, or, PDF and
# PostScript, a mark only those files open with).
SIGNATURES = (
    b"%PDF-",
    b"%!PS-Adobe-",
    b"PK\x03\x04",  # zip: DOCX, ODT, XLSX, EPUB, JAR
    b"\x1f\x8b\x08",  # gzip
    b"Rar!\x1a\x07",
    b"7z\xbc\xaf\x27\x1c",
    b"\x89PNG\r\n\x1a\n",
    b"GIF87a",
    b"GIF89a",
    b"\xff\xd8\xff",  # JPEG
    b"\x00\x00\x01\x00",  # ICO
    b"\x00\x00\x02\x00",  # CUR
    b"OggS\x00",
    b"\x1aE\xdf\xa3",  # WebM, Matroska
    b"\x00asm",  # WebAssembly
)
_WEBP = re.compile(rb"RIFF.{4}WEBPVP", re.S)
# WHATWG's binary data bytes: controls no text holds (tab, LF, FF, CR and ESC are text; ESC
# opens ISO-2022-JP's shifts).
_BINARY = re.compile(rb"[\x00-\x08\x0b\x0e-\x1a\x1c-\x1f]")
_BOMS = (codecs.BOM_UTF8, codecs.BOM_UTF16_BE, codecs.BOM_UTF16_LE)


def sniffed_type(media_type: str, head: bytes) -> str:
    """``media_type``, or ``OCTET_STREAM`` when it is ``text/html`` or ``text/plain`` and
    ``head`` (the body's first bytes, ``HEADER_BYTES`` of them are read) is not text (see the
    module's docstring). Pure."""
    if media_type not in SNIFFED:
        return media_type
    header = head[:HEADER_BYTES]
    if header.startswith(SIGNATURES) or _WEBP.match(header):
        return OCTET_STREAM
    if header.startswith(_BOMS) or _BINARY.search(header) is None:
        return media_type
    if media_type == "text/plain" or b"<" not in header:
        return OCTET_STREAM
    return media_type
