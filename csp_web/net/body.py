"""Reading a response under caps: its header block, then its body's bytes on the wire and
after decoding.

We read ``response.aiter_raw()`` (wire bytes, still content-encoded) and inflate with our own
``zlib`` decompressor, asking it for at most cap + 1 bytes per call. httpx's ``aiter_bytes``
would inflate each network chunk whole before we could count it (64 KiB of gzip can hold
64 MiB of zeros), so a gzip bomb is cut off after about ``max_decoded_bytes`` of output here,
never inflated in full. Only identity, gzip and deflate are accepted, and the client asks for
no others (``Accept-Encoding: gzip, deflate``).

A caller may name a ``LargerBody``: a larger cap for the responses it judges deserve one
(fetch: the documents its reader table serves, ``web.fetch.max_document_bytes``), judged by the
media type and URL before the body is read, else by its first ``HEAD_BYTES`` decoded bytes; a
declared Content-Length is then checked against the cap that applies. Every other response
keeps the caller's caps, so HTML is still refused at ``max_body_bytes``.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import httpx
import trio

from csp_web.core.api.errors import OpError
from csp_web.net.result import parse_content_type
from csp_web.net.sniff import sniffed_type
from protocol import ErrorCode, NumberError, parse_uint

ACCEPT_ENCODING = "gzip, deflate"
_NO_BODY_STATUSES = frozenset({204, 304})  # RFC 9110 §6.4.1
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
# The decoded bytes a LargerBody judges a body by: the most the reader table's sniffs read
# (a feed's root element, specialists/formats/feed.py SNIFF_BYTES; magic bytes need 1,024).
HEAD_BYTES = 4096
# How long a cancelled read may take to close its connection: a close is one send to the
# socket buffer, so this bounds only a peer that stopped reading (the shutdown grace is 5 s).
ABANDON_S = 0.5


@dataclass(frozen=True)
class LargerBody:
    """A larger cap, ``max_bytes`` on the wire and decoded (``name`` in TOO_LARGE's detail),
    for a response ``applies`` to: called with its media type, its URL and its first decoded
    bytes (b"" before any arrived, then at most ``HEAD_BYTES``), pure and cheap."""

    max_bytes: int
    name: str
    applies: Callable[[str, str, bytes], bool]


class CappedDecoder:
    """Decodes one content-coding, refusing output past ``max_bytes``.

    ``produced`` counts decoded bytes so far; it never exceeds ``max_bytes + 1``.
    Raises OpError(TOO_LARGE, "max_decoded_bytes") or OpError(FETCH_FAILED, "bad_encoding").
    """

    def __init__(self, coding: str, *, max_bytes: int, name: str = "max_decoded_bytes") -> None:
        coding = coding.strip().lower()
        if coding not in ("", "identity", *_WBITS):
            raise OpError(ErrorCode.FETCH_FAILED, "unsupported_encoding")
        self._wbits = _WBITS.get(coding)
        self._inflater = None if self._wbits is None else zlib.decompressobj(self._wbits)
        self._started = False
        self._max_bytes = max_bytes
        self._name = name
        self._parts: list[bytes] = []
        self.produced = 0

    def widen(self, max_bytes: int, name: str) -> None:
        """Refuse output past ``max_bytes`` from now on, as TOO_LARGE ``name``."""
        self._max_bytes, self._name = max_bytes, name

    def head(self) -> bytes:
        """The first ``HEAD_BYTES`` decoded so far."""
        return b"".join(self._parts)[:HEAD_BYTES]

    def feed(self, data: bytes) -> None:
        """Decode ``data``, the next wire bytes."""
        if self._inflater is None:
            self._keep(data)
            return
        self._keep(self._inflate(data, self._max_bytes - self.produced + 1))

    def feed_head(self, data: bytes) -> bytes:
        """Decode ``data`` until ``HEAD_BYTES`` are decoded in all; what is left of it, not yet
        decoded, is returned for ``feed`` once the head is judged (so one chunk of a gzip bomb
        never inflates past the cap that is still to be settled)."""
        need = HEAD_BYTES - self.produced
        if need <= 0:
            return data
        if self._inflater is None:
            self._keep(data[:need])
            return data[need:]
        self._keep(self._inflate(data, need))
        return self._inflater.unconsumed_tail

    def finish(self) -> bytes:
        """Everything decoded, once the wire has no more bytes."""
        if self._inflater is not None:
            self._keep(self._inflater.flush())
        return b"".join(self._parts)

    def _inflate(self, data: bytes, limit: int) -> bytes:
        assert self._inflater is not None
        try:
            out = self._inflater.decompress(data, limit)
        except zlib.error as exc:
            # "deflate" is zlib-wrapped by RFC 9110 §8.4.1.2, yet servers send it raw; httpx's
            # DeflateDecoder retries the same way.
            if self._started or self._wbits != zlib.MAX_WBITS:
                raise OpError(ErrorCode.FETCH_FAILED, "bad_encoding") from exc
            self._wbits = -zlib.MAX_WBITS
            self._inflater = zlib.decompressobj(self._wbits)
            return self._inflate(data, limit)
        self._started = self._started or bool(data)
        return out

    def _keep(self, data: bytes) -> None:
        self.produced += len(data)
        if self.produced > self._max_bytes:
            raise OpError(ErrorCode.TOO_LARGE, self._name)
        self._parts.append(data)


def header_bytes(response: httpx.Response) -> int:
    """The size of ``response``'s header block as parsed: the status line, one
    ``name: value`` line per field, the CRLFs and the blank line that ends it.

    h11 drops the optional whitespace around values, so a padded block counts a little less
    than it took on the wire; that slack is bounded by the buffer cap httpcore applies while
    the block is still arriving.
    """
    status_line = f"{response.http_version} {response.status_code} {response.reason_phrase}"
    fields = sum(len(name) + len(value) + 4 for name, value in response.headers.raw)
    return len(status_line.encode("latin-1", "replace")) + 2 + fields + 2


def check_header_bytes(response: httpx.Response, max_bytes: int) -> None:
    """Refuse a header block over ``max_bytes`` however it arrived.

    h11 caps only an *incomplete* block (httpcore: 100 KiB), so one that arrives whole in a
    single read (up to 64 KiB past that cap) would otherwise pass: issue 8.3.
    Raises OpError(TOO_LARGE, "max_header_bytes"); the caller owns and closes ``response``.
    """
    if header_bytes(response) > max_bytes:
        raise OpError(ErrorCode.TOO_LARGE, "max_header_bytes")


def sends_body(response: httpx.Response) -> bool:
    """Whether ``response`` is followed by a body: a HEAD answer's or a 204/304's
    Content-Length and Content-Encoding describe a body never sent."""
    return response.request.method != "HEAD" and response.status_code not in _NO_BODY_STATUSES


async def read_capped(
    response: httpx.Response,
    *,
    max_body_bytes: int,
    max_decoded_bytes: int,
    larger: LargerBody | None = None,
    url: str = "",
    gauge: Callable[[int], Awaitable[None]] | None = None,
) -> bytes:
    """The decoded body of a streamed ``response`` (requested as ``url``), read until the end
    or a cap: ``larger``'s when it applies to the response (see the module's docstring).

    Raises OpError(TOO_LARGE, "max_body_bytes") as soon as the declared Content-Length or
    the bytes received pass ``max_body_bytes``, OpError(TOO_LARGE, "max_decoded_bytes") as
    soon as decoding passes ``max_decoded_bytes``; OpError(TOO_LARGE, larger.name) past the
    larger cap. ``gauge`` is awaited with the bytes decoded so far after each chunk: what it
    raises (a budget that cannot cover them: ``client._Bill.cover``) cuts the body off the
    same way. The caller owns and closes ``response``.
    """
    if not sends_body(response):
        return b""  # their Content-Length and Content-Encoding describe a body never sent
    body = _Body(response, max_body_bytes, max_decoded_bytes, larger, url)
    body.judge(b"", final=larger is None)  # before any read: nothing to abandon yet
    chunks = response.aiter_raw()
    try:
        async for chunk in chunks:
            body.receive(chunk)
            if gauge is not None:
                await gauge(body.decoder.produced)
    except OpError:
        await _abandon(response, chunks)
        raise
    except trio.Cancelled:  # a deadline, or a budget run out (SPEC D-3): the origin is told
        with trio.CancelScope(shield=True), trio.move_on_after(ABANDON_S):
            await _abandon(response, chunks)
        raise
    return body.decoder.finish()


class _Body:
    """One body being read: the bytes received, the decoder, and the cap that applies (the
    caller's until ``larger`` is judged to apply)."""

    def __init__(
        self,
        response: httpx.Response,
        max_body_bytes: int,
        max_decoded_bytes: int,
        larger: LargerBody | None,
        url: str,
    ) -> None:
        self.declared = _length(response.headers.get("content-length", ""))
        coding = response.headers.get("content-encoding", "")
        self.decoder = CappedDecoder(coding, max_bytes=max_decoded_bytes)
        self.max_bytes, self.name = max_body_bytes, "max_body_bytes"
        self.media_type, self.charset = parse_content_type(response.headers.get("content-type", ""))
        self.larger, self.url = larger, url
        self.received = 0

    def judge(self, head: bytes, *, final: bool) -> None:
        """Settle the cap when ``larger`` applies given ``head`` (or when ``final``: the head
        is all there will be to judge by); hold the declared length to the settled cap, or
        before that to the larger of the two."""
        larger = self.larger
        media_type = sniffed_type(
            self.media_type, head, self.charset
        )  # as the result will say (client.py)
        if larger is not None and larger.applies(media_type, self.url, head):
            self.max_bytes, self.name = larger.max_bytes, larger.name
            self.decoder.widen(larger.max_bytes, larger.name)
            self.larger = None
        elif final:
            self.larger = None
        cap, name = self.max_bytes, self.name
        if self.larger is not None and self.larger.max_bytes > cap:
            # Unsettled, a length past the larger cap too is refused now, by its name, not
            # once a stalled origin's head (or the deadline) settles which cap applies.
            cap, name = self.larger.max_bytes, self.larger.name
        if self.declared > cap:
            raise OpError(ErrorCode.TOO_LARGE, name)

    def receive(self, chunk: bytes) -> None:
        """Count and decode ``chunk``; an unsettled cap is settled on the head decoded so far
        before the bytes pass it, and as soon as the head is complete."""
        self.received += len(chunk)
        if self.larger is not None and self.received > self.max_bytes:
            self.judge(self.decoder.head(), final=True)
        if self.received > self.max_bytes:
            raise OpError(ErrorCode.TOO_LARGE, self.name)
        if self.larger is not None:
            chunk = self.decoder.feed_head(chunk)
            if self.decoder.produced >= HEAD_BYTES:
                self.judge(self.decoder.head(), final=True)
        if chunk:
            self.decoder.feed(chunk)


async def _abandon(response: httpx.Response, chunks: AsyncIterator[bytes]) -> None:
    """Stop reading ``response`` early without leaving its stream half-iterated.

    httpx 0.28 and httpcore stream bodies through nested async generators; one dropped while
    suspended is finalised by trio with a ResourceWarning (encode/httpx#3686, fix unreleased).
    Closing the response first closes the connection, so the next read fails in the innermost
    generator and every generator of the chain runs to its end. Only bytes already buffered
    can still arrive, and they are discarded.
    """
    await response.aclose()
    with contextlib.suppress(httpx.HTTPError):
        async for _ in chunks:
            pass


def _length(declared: str) -> int:
    """A Content-Length in ASCII digits, else 0 (the body's own size is still counted).
    "²" passed str.isdigit() and made int() raise."""
    try:
        return parse_uint(declared)
    except NumberError:
        return 0
