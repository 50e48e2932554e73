"""What a fetch returns, and how its body becomes text."""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from email.message import Message

import httpx

from csp_web.net.charset import codec_for, decode_body

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
    """``body`` as text, decoded as browsers decode it (``charset.py``): a BOM, then the
    header's ``charset``, then for HTML (or an untyped body) a ``<meta>`` in the first 1,024
    bytes, then detection on undeclared bytes; JSON, UTF-8 by RFC 8259, is never guessed at.
    Undecodable bytes become U+FFFD; an unknown charset name is skipped, never an error."""
    if _is_json(content_type) and codec_for(charset) is None:
        start = len(codecs.BOM_UTF8) if body.startswith(codecs.BOM_UTF8) else 0
        return body[start:].decode("utf-8", errors="replace")
    html = content_type in _HTML_TYPES or not content_type
    return decode_body(body, declared=charset, html=html)


def _is_json(content_type: str) -> bool:
    return content_type in ("application/json", "text/json") or content_type.endswith("+json")
