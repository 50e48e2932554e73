"""Whether a body declared as text is text (WHATWG MIME Sniffing, §7.1-7.2).

    media_type = sniffed_type("text/html", body[:HEADER_BYTES])   # "application/octet-stream"

Servers put ``text/html`` or ``text/plain`` on whatever they serve (a PDF behind a CMS, a zip
from a download script); read as text, such a body answers ``%PDF-1.7 ... obj`` or control
bytes as a page's content. A declared ``text/html`` or ``text/plain`` whose first bytes are a
binary signature (``SIGNATURES``: the PDF, archive and image patterns of WHATWG's table for an
unknown type) is taken for what a server says when it says nothing, ``application/octet-stream``:
fetch then reads it by its magic bytes or URL suffix (``documents.reader_for``), or refuses it
as ``unsupported_content``. ``text/plain`` is held to WHATWG's "text or binary" rule too, as
WHATWG holds it: only under the "check-for-apache-bug flag", a Content-Type of ``text/plain``
with no charset or with ``ISO-8859-1`` or ``UTF-8`` (what Apache put on everything); a page
that declares another charset (UTF-16 and UTF-32 above all, whose characters are half NUL
bytes) said what its bytes are. Under the flag it is binary when its first ``HEADER_BYTES``
(no byte order mark before) hold a NUL or ``BINARY_SHARE`` of binary data bytes: laxer than
browsers, which download the file on any one, because a download helps no agent and a log
keeps a terminal's BEL, SI (``\x1b[m\x0f``, TERM=screen's colour reset) or backspace.
``text/html`` is not sniffed for binary bytes (browsers never do: a NUL in a page is the
page's slip), unless its header is binary by that rule and holds not one ``<``: then it is no
markup at all (never for a declared UTF-16 or UTF-32 page).
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
# The charsets of WHATWG's check-for-apache-bug flag (none is the bare ``text/plain``).
APACHE_BUG_CHARSETS = frozenset({None, "iso-8859-1", "utf-8"})
# Binary data bytes (NUL aside) past this share of the header make it binary. Random or
# compressed bytes hold 26 in 256 of them (10.2 %), and a NUL in 1,445 bytes 99.6 % of the
# time, so the NUL alone tells nearly all binary; text with a terminal's controls holds far
# fewer: counted on the line, a SI per colour reset (TERM=screen) is one byte in 17 to 25 of
# ``ls --color`` output (4 to 6 %, the densest case found), one in 45 of a coloured pytest log
# (2 %), and a BEL or a backspace now and then is less.
BINARY_SHARE = 0.1


def sniffed_type(media_type: str, head: bytes, charset: str | None = None) -> str:
    """``media_type``, or ``OCTET_STREAM`` when it is ``text/html`` or ``text/plain`` and
    ``head`` (the body's first bytes, ``HEADER_BYTES`` of them are read) is not text, given
    the Content-Type's ``charset`` parameter (lower-case; see the module's docstring). Pure."""
    if media_type not in SNIFFED:
        return media_type
    header = head[:HEADER_BYTES]
    if header.startswith(SIGNATURES) or _WEBP.match(header):
        return OCTET_STREAM
    if header.startswith(_BOMS) or not _binary(header):
        return media_type
    if media_type == "text/plain":
        return OCTET_STREAM if charset in APACHE_BUG_CHARSETS else media_type
    wide = charset is not None and charset.startswith(("utf-16", "utf-32", "ucs-"))
    return OCTET_STREAM if b"<" not in header and not wide else media_type


def _binary(header: bytes) -> bool:
    """Whether ``header`` holds a NUL, or binary data bytes for ``BINARY_SHARE`` of it."""
    if b"\x00" in header:
        return True
    found = len(_BINARY.findall(header))
    return found > 0 and found >= BINARY_SHARE * len(header)
