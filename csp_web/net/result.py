"""What a fetch returns, and how its body becomes text."""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass
from email.message import Message

import httpx

# The HTML prescan looks at the first 1024 bytes only (WHATWG HTML §13.2.3.2).
_PRESCAN_BYTES = 1024
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([a-zA-Z0-9_.:-]+)""", re.I)
_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (b"\xfe\xff", "utf-16-be"))
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})


@dataclass(frozen=True)
class FetchResult:
    """The final response of a fetch, its body read and decoded from its content-coding.

    ``redirect_chain`` holds every URL requested, the first as given to the gate and the last
    equal to ``url``. Any status is a result: the op decides whether a 404 is a failure.
    """

    url: str
    status_code: int
    headers: httpx.Headers
    body: bytes
    content_type: str
    charset: str | None
    redirect_chain: tuple[str, ...]
    elapsed_s: float

    def text(self) -> str:
        """The body as text; see ``decode_text``."""
        return decode_text(self.body, charset=self.charset, content_type=self.content_type)


def parse_content_type(value: str) -> tuple[str, str | None]:
    """(lower-case media type, lower-case charset or None) from a Content-Type value."""
    message = Message()
    message["content-type"] = value
    media_type = message.get_content_type() if value else ""
    charset = message.get_param("charset")
    return media_type, charset.strip().lower() if isinstance(charset, str) else None


def decode_text(body: bytes, *, charset: str | None, content_type: str = "text/html") -> str:
    """``body`` as text: a BOM first (WHATWG Encoding §6), then the header's charset, then an
    HTML ``<meta charset>`` in the first 1024 bytes, then UTF-8; undecodable bytes become U+FFFD.

    An unknown charset name is skipped, never an error.
    """
    for bom, encoding in _BOMS:
        if body.startswith(bom):
            return body[len(bom) :].decode(encoding, errors="replace")
    candidates = [charset]
    if content_type in _HTML_TYPES:
        candidates.append(_meta_charset(body))
    for name in candidates:
        text = _decode_or_none(body, name)
        if text is not None:
            return text
    return body.decode("utf-8", errors="replace")


def _meta_charset(body: bytes) -> str | None:
    match = _META_CHARSET.search(body[:_PRESCAN_BYTES])
    return match.group(1).decode("ascii").lower() if match else None


def _decode_or_none(body: bytes, name: str | None) -> str | None:
    if not name:
        return None
    try:  # LookupError also covers codecs that are not text encodings ("base64", "rot13")
        return body.decode(name, errors="replace")
    except LookupError:
        return None
