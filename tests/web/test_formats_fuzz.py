"""Any bytes given to a document reader give a Document or an Unreadable with a catalogue
code and a reply-safe detail, nothing else: arbitrary bytes, and the committed files with a
few bytes changed or cut (hypothesis)."""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import ErrorCode
from specialists.formats import Document, Limits, Unreadable
from specialists.formats.docx import read_docx, read_odt
from specialists.formats.feed import read_feed
from specialists.formats.sheet import read_csv, read_xlsx
from tests.web.documents_support import fixture, rezip

Reader = Callable[[bytes, Limits], Document]
READERS: dict[str, tuple[Reader, str]] = {
    "docx": (read_docx, "report.docx"),
    "odt": (read_odt, "minutes.odt"),
    "xlsx": (read_xlsx, "ledger.xlsx"),
    "csv": (read_csv, "ledger.csv"),
    "feed": (read_feed, "atom.xml"),
}
CODES = {code.value for code in ErrorCode}
DETAIL = re.compile(r"[\w.:/+,-]{1,200}")  # documents._DETAIL: what the worker passes on
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _read_or_refuse(reader: Reader, data: bytes) -> None:
    refused: Unreadable | None = None
    try:
        document = reader(data, Limits(max_chars=20_000))
    except Unreadable as exc:
        refused = exc
    if refused is not None:
        assert refused.code in CODES
        assert DETAIL.fullmatch(refused.detail), refused.detail
    else:
        assert len(document.markdown) <= 20_000


@pytest.mark.parametrize("name", sorted(READERS))
@FUZZ
@given(data=st.binary(max_size=2048))
def test_arbitrary_bytes_are_read_or_refused_with_a_code(name: str, data: bytes) -> None:
    _read_or_refuse(READERS[name][0], data)


@pytest.mark.parametrize("name", sorted(READERS))
@FUZZ
@given(data=st.data())
def test_a_real_file_damaged_anywhere_is_read_or_refused_with_a_code(
    name: str, data: st.DataObject
) -> None:
    reader, fixture_name = READERS[name]
    body = bytearray(fixture(fixture_name))
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(0, len(body) - 1))
        body[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(len(body) // 2, len(body)))
    _read_or_refuse(reader, bytes(body[:cut]))


MAIN_PARTS = {
    "docx": "word/document.xml",
    "odt": "content.xml",
    "xlsx": "xl/worksheets/sheet1.xml",
}


@pytest.mark.parametrize("name", sorted(MAIN_PARTS))
@FUZZ
@given(data=st.data())
def test_a_damaged_main_part_in_a_sound_zip_is_read_or_refused_with_a_code(
    name: str, data: st.DataObject
) -> None:
    reader, fixture_name = READERS[name]
    original = fixture(fixture_name)
    with zipfile.ZipFile(io.BytesIO(original)) as archive:
        part = bytearray(archive.read(MAIN_PARTS[name]))
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(0, len(part) - 1))
        part[at] = data.draw(st.sampled_from(b'<>/"=&;: x\x00\xff'))
    cut = data.draw(st.integers(len(part) // 2, len(part)))
    _read_or_refuse(reader, rezip(original, {MAIN_PARTS[name]: bytes(part[:cut])}))


@pytest.mark.parametrize("name", ["docx", "odt", "xlsx", "feed"])
def test_an_xml_part_declaring_an_encoding_no_codec_has_is_corrupt(name: str) -> None:
    # Found by the test above: expat raises LookupError for an unknown encoding label.
    xml = b'<?xml version="1.0" encoding="xTF-8"?><a/>'
    reader, fixture_name = READERS[name]
    data = xml if name == "feed" else rezip(fixture(fixture_name), {MAIN_PARTS[name]: xml})
    with pytest.raises(Unreadable) as caught:
        reader(data, Limits())
    assert (caught.value.code, caught.value.detail) == ("corrupt_document", f"{name}:malformed_xml")
