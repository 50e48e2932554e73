"""Opening an office file's zip without letting it expand past a budget (a zip bomb).

DOCX, ODT and XLSX are zips of XML. The directory at the end of a zip declares each member's
uncompressed size; ``zipfile`` never yields more bytes than a member declares (it stops there
and the CRC check fails), so judging the declared sizes before anything is read bounds what
any reader built on ``zipfile`` (ours, mammoth's) can inflate.
"""

from __future__ import annotations

import io
import zipfile
import zlib

from ._xml import screen_prolog
from .document import Unreadable

# 64 MiB of XML is thousands of pages or a sheet of a million cells, far past what fetch's
# body cap lets in at honest ratios; mammoth's DOM (minidom) holds ~10 times its XML in
# memory, so this also keeps a DOCX within a worker's memory. The classic 42.zip declares
# petabytes, and a flat bomb's one member gigabytes.
MAX_UNPACKED_BYTES = 64 * 1024 * 1024
# Office XML deflates 5 to 20 times, a sheet of repeated cells up to ~100 times; a bomb
# thousands of times. Only members past RATIO_FLOOR_BYTES are judged: tiny members may
# compress oddly without costing anything.
MAX_RATIO = 200
RATIO_FLOOR_BYTES = 1024 * 1024
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
MAX_MEMBERS = 10_000  # a DOCX holds tens, a big workbook hundreds: thousands is a directory bomb


def open_zip(data: bytes, kind: str) -> zipfile.ZipFile:
    """The zip in ``data``, after its directory passed the budget.

    Raises ``Unreadable("corrupt_document")`` when the bytes are not a zip (truncated, not a
    zip at all) and ``Unreadable("too_large")`` when its members declare more than the budget.
    The caller owns the returned ZipFile (it holds only ``data``: nothing to close but memory).
    """
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError):
        raise Unreadable("corrupt_document", f"{kind}:not_a_zip") from None
    _judge(archive.infolist(), kind)
    return archive


def _judge(members: list[zipfile.ZipInfo], kind: str) -> None:
    if len(members) > MAX_MEMBERS:
        raise Unreadable("too_large", f"{kind}:zip_members")
    total = sum(member.file_size for member in members)
    if total > MAX_UNPACKED_BYTES:
        raise Unreadable("too_large", f"{kind}:unpacked_size")
    for member in members:
        if member.file_size > RATIO_FLOOR_BYTES and (
            member.file_size > MAX_RATIO * max(member.compress_size, 1)
        ):
            raise Unreadable("too_large", f"{kind}:zip_ratio")


def read_member(archive: zipfile.ZipFile, name: str, kind: str) -> bytes | None:
    """The bytes of member ``name`` (None when the zip has no such member).

    Raises ``Unreadable("corrupt_document")`` when the member's data is damaged (a bad CRC,
    a truncated stream).
    """
    try:
        return archive.read(name)
    except KeyError:
        return None
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError):
        raise Unreadable("corrupt_document", f"{kind}:damaged_member") from None


def open_office(data: bytes, kind: str) -> zipfile.ZipFile:
    """``open_zip``, then each XML part's prolog screened for a DTD (``screen_prolog``):
    the zip of an office file ready for a third-party parser. Raises ``Unreadable``.

    A part is judged by its bytes, not its name: relationships may name the main document
    ``word/body.bin``, and mammoth parses whatever they name."""
    archive = open_zip(data, kind)
    for name in archive.namelist():
        part = read_member(archive, name, kind) or b""
        if part.lstrip()[:1] == b"<" or part.startswith(_UTF16_BOMS):
            screen_prolog(part, kind)
    return archive


def optional_member(archive: zipfile.ZipFile, name: str | None, kind: str) -> bytes | None:
    """``read_member`` of a part a document reads without (properties, named styles): None
    when it is absent, or damaged in the zip, rather than the whole document unreadable."""
    if name is None:
        return None
    try:
        return read_member(archive, name, kind)
    except Unreadable:
        return None
