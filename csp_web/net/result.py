"""What a fetch returns, and how its body becomes text: decoded (``decode_text``) and held to
what a reader may print (``readable``)."""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass
from email.message import Message

import httpx

from csp_web.net.charset import codec_for, decode_body

_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
# What a page's text may not hand a reader: C0 controls but tab and newline, DEL and the C1
# controls (a terminal obeys ESC and CSI; SPEC F-5 keeps them off reply lines raw, and search
# results and document metadata drop them). A terminal sequence (ECMA-48 CSI: colours,
# cursor moves; OSC: titles, links) goes whole, not its ESC alone; any other ESC goes alone
# (the letter after it may be the text's); a carriage return is a line's end.
_TERMINAL = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?|\x9b[0-?]*[ -/]*[@-~]?"
    r"|[\x1b\x9d]\][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
)
_UNREADABLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_DROPPED = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f]")


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
    """``body`` as text, decoded as browsers decode it (``charset.py``): a BOM,
    then the header's ``charset``, then for HTML (or an untyped body) a ``<meta>`` in the
    first 1,024 bytes, then detection on undeclared bytes; JSON, UTF-8 by RFC 8259, is never
    guessed at. Undecodable bytes become U+FFFD; an unknown charset name is skipped, never an
    error. Text that is not HTML comes back ``readable``; HTML is, once parsed
    (``specialists.web.pages.reading``)."""
    if _is_json(content_type) and codec_for(charset) is None:
        start = len(codecs.BOM_UTF8) if body.startswith(codecs.BOM_UTF8) else 0
        return readable(body[start:].decode("utf-8", errors="replace"))
    if content_type in _HTML_TYPES:  # markup: its views are made readable once parsed
        # (&#27; is ESC only then); a raw NUL would be U+FFFD in an attribute by then.
        return decode_body(body, declared=charset, html=True).replace("\x00", "")
    return readable(decode_body(body, declared=charset, html=not content_type))


def _is_json(content_type: str) -> bool:
    return content_type in ("application/json", "text/json") or content_type.endswith("+json")


def readable(text: str) -> str:
    """``text`` without what a page's text may not hand a reader (``_UNREADABLE``): terminal
    sequences whole, other controls dropped, vertical tab and form feed as spaces, CR and
    CRLF as LF. ``text`` itself (the same object) when it holds none: the usual case costs
    one scan."""
    if _UNREADABLE.search(text) is None:
        return text
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = text.replace("\x0b", " ").replace("\x0c", " ")
    if "\x1b" in text or "\x9b" in text or "\x9d" in text:
        text = _TERMINAL.sub("", text)
    return _DROPPED.sub("", text)
