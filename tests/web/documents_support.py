"""Real and hostile office files for the document readers' tests.

The real ones are LibreOffice's output committed under ``fixtures/documents/`` (sources in
``src/``, remade by ``fixtures/documents/make.sh``); the hostile ones are built here from
them, byte by byte, so each test says exactly what was damaged.
"""

from __future__ import annotations

import io
import struct
import zipfile
from pathlib import Path

DOCUMENTS = Path(__file__).parent / "fixtures" / "documents"

BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
 <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
 <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
 <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
 <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<lolz>&lol9;</lolz>
"""
EXTERNAL_ENTITY = b"""<?xml version="1.0"?>
<!DOCTYPE rss [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>
<rss version="2.0"><channel><title>&xxe;</title></channel></rss>
"""


def fixture(name: str) -> bytes:
    return (DOCUMENTS / name).read_bytes()


def rezip(data: bytes, replace: dict[str, bytes]) -> bytes:
    """The zip ``data`` with the members named in ``replace`` given new bytes (deflated),
    those it lacks added at its end."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as target:
        names = source.namelist()
        for name in names:
            body = replace.get(name, source.read(name))
            target.writestr(name, body, zipfile.ZIP_DEFLATED)
        for name, body in replace.items():
            if name not in names:
                target.writestr(name, body, zipfile.ZIP_DEFLATED)
    return out.getvalue()


def declare_size(data: bytes, name: str, size: int) -> bytes:
    """The zip ``data`` with member ``name``'s uncompressed size rewritten to ``size`` in its
    local header and the central directory: a directory that lies."""
    raw = bytearray(data)
    encoded = name.encode()
    for signature, size_at, name_at in ((b"PK\x03\x04", 22, 30), (b"PK\x01\x02", 24, 46)):
        start = 0
        while (start := raw.find(signature, start)) >= 0:
            if raw[start + name_at : start + name_at + len(encoded)] == encoded:
                struct.pack_into("<I", raw, start + size_at, size)
            start += 4
    return bytes(raw)
