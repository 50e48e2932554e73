"""Budgets: wire bytes, decoded bytes (a gzip bomb is cut off, not inflated) and one deadline
for the whole operation."""

from __future__ import annotations

import gzip
import zlib

import pytest
import trio

from csp_web.core.api.errors import OpError
from csp_web.net import GuardedClient
from csp_web.net.body import CappedDecoder, LargerBody, _length
from protocol import ErrorCode

from ._origin import BOMB_DECODED_BYTES, WAIT_S, Origin, Reply, Seen, gzip_bomb

CAP = 10_000


async def too_large(client: GuardedClient, url: str, **caps: int) -> str:
    """The TOO_LARGE detail fetching ``url`` raises."""
    with trio.fail_after(WAIT_S), pytest.raises(OpError) as caught:
        await client.fetch(url, **caps)  # type: ignore[arg-type]
    assert caught.value.code == ErrorCode.TOO_LARGE
    return caught.value.detail


@pytest.mark.parametrize("route", ["bytes", "chunked-bytes"])
async def test_a_body_of_max_body_bytes_is_read_and_one_more_byte_is_too_large(
    client: GuardedClient, origin: Origin, route: str
) -> None:
    with trio.fail_after(WAIT_S):
        result = await client.fetch(
            origin.url("origin.test", f"/{route}/{CAP}"), max_body_bytes=CAP
        )
    assert len(result.body) == CAP
    over = origin.url("origin.test", f"/{route}/{CAP + 1}")
    assert await too_large(client, over, max_body_bytes=CAP) == "max_body_bytes"


async def test_the_default_wire_cap_is_one_megabyte(client: GuardedClient, origin: Origin) -> None:
    with trio.fail_after(WAIT_S):
        result = await client.fetch(origin.url("origin.test", "/chunked-bytes/1000000"))
    assert len(result.body) == 1_000_000
    over = origin.url("origin.test", "/chunked-bytes/1000001")
    assert await too_large(client, over) == "max_body_bytes"


@pytest.mark.parametrize("coding", ["gzip", "deflate", "raw-deflate"])
async def test_a_body_decoding_to_max_decoded_bytes_is_read_and_one_more_is_too_large(
    client: GuardedClient, origin: Origin, coding: str
) -> None:
    with trio.fail_after(WAIT_S):
        result = await client.fetch(
            origin.url("origin.test", f"/{coding}/{CAP}"), max_decoded_bytes=CAP
        )
    assert result.body == b"a" * CAP
    over = origin.url("origin.test", f"/{coding}/{CAP + 1}")
    assert await too_large(client, over, max_decoded_bytes=CAP) == "max_decoded_bytes"


async def test_a_gzip_bomb_is_refused_as_too_large(client: GuardedClient, origin: Origin) -> None:
    assert await too_large(client, origin.url("origin.test", "/bomb")) == "max_decoded_bytes"


def test_a_gzip_bomb_fed_whole_inflates_no_more_than_the_cap_plus_one_byte() -> None:
    bomb = gzip_bomb()
    assert len(bomb) * 100 < BOMB_DECODED_BYTES  # a real bomb: over 100x expansion
    decoder = CappedDecoder("gzip", max_bytes=CAP)
    with pytest.raises(OpError) as caught:
        decoder.feed(bomb)
    assert caught.value.detail == "max_decoded_bytes"
    assert decoder.produced == CAP + 1


def test_a_decoder_fed_byte_by_byte_decodes_the_same_body() -> None:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    data = bytes(range(256)) * 40
    encoded = compressor.compress(data) + compressor.flush()
    decoder = CappedDecoder("x-gzip", max_bytes=len(data))
    for index in range(len(encoded)):
        decoder.feed(encoded[index : index + 1])
    assert decoder.finish() == data


@pytest.mark.parametrize(
    ("coding", "body", "detail"),
    [
        ("br", b"\x0b\x02\x80hello\x03", "unsupported_encoding"),
        ("gzip, gzip", b"", "unsupported_encoding"),
        ("gzip", b"this is not gzip", "bad_encoding"),
    ],
)
async def test_an_encoding_we_cannot_decode_fails_the_fetch(
    client: GuardedClient, origin: Origin, coding: str, body: bytes, detail: str
) -> None:
    origin.routes["/odd"] = lambda _seen: Reply(headers=[("content-encoding", coding)], body=body)
    with trio.fail_after(WAIT_S), pytest.raises(OpError) as caught:
        await client.fetch(origin.url("origin.test", "/odd"))
    assert (caught.value.code, caught.value.detail) == (ErrorCode.FETCH_FAILED, detail)


async def test_the_client_asks_only_for_encodings_it_can_bound(
    client: GuardedClient, origin: Origin
) -> None:
    with trio.fail_after(WAIT_S):
        await client.fetch(origin.url("origin.test", "/echo"), headers={"Accept-Encoding": "br"})
    assert origin.requests[0].headers["accept-encoding"] == "gzip, deflate"


async def test_one_deadline_bounds_a_server_that_drips_forever(
    client: GuardedClient, origin: Origin
) -> None:
    # Each byte arrives well inside httpx's per-read timeout; only the overall deadline ends it.
    with trio.fail_after(WAIT_S), pytest.raises(OpError) as caught:
        await client.fetch(origin.url("origin.test", "/drip"), deadline_s=0.5)
    assert (caught.value.code, caught.value.detail) == (ErrorCode.FETCH_FAILED, "timeout")


async def test_the_deadline_covers_every_hop_of_a_redirect_chain(
    client: GuardedClient, origin: Origin
) -> None:
    def to_drip(_seen: Seen) -> Reply:
        return Reply(302, [("location", "/drip")])

    origin.routes["/to-drip"] = to_drip
    with trio.fail_after(WAIT_S), pytest.raises(OpError) as caught:
        await client.fetch(origin.url("origin.test", "/to-drip"), deadline_s=0.5)
    assert caught.value.detail == "timeout"
    assert origin.paths() == ["/to-drip", "/drip"]


@pytest.mark.parametrize(
    ("declared", "length"), [("12", 12), ("", 0), ("²", 0), ("٣", 0), ("1_0", 0)]
)
def test_a_declared_length_counts_only_when_it_is_ascii_digits(declared: str, length: int) -> None:
    """A Content-Length such as "²" passed str.isdigit() and made int() raise."""
    assert _length(declared) == length


def _serve_gzip(origin: Origin, path: str, content_type: str, body: bytes) -> str:
    headers = [("content-type", content_type), ("content-encoding", "gzip")]
    data = gzip.compress(body)
    origin.routes[path] = lambda _seen: Reply(200, headers, data)
    return origin.url("origin.test", path)


LARGER = LargerBody(
    2_000_000,
    "max_document_bytes",
    lambda media_type, url, head: media_type == "application/pdf" or head.startswith(b"%PDF-"),
)


@pytest.mark.parametrize(
    ("content_type", "head"), [("application/pdf", b"a"), ("application/octet-stream", b"%PDF-")]
)
async def test_a_larger_body_decodes_to_its_cap_and_one_more_byte_is_too_large(
    client: GuardedClient, origin: Origin, content_type: str, head: bytes
) -> None:
    """Judged by type before a byte is read, or by the first decoded bytes: the decoded cap
    widens with the wire cap (the default guard's are 1 MB)."""
    at = _serve_gzip(origin, "/at", content_type, head + b"a" * (LARGER.max_bytes - len(head)))
    over = _serve_gzip(origin, "/over", content_type, head + b"a" * (LARGER.max_bytes + 1))
    with trio.fail_after(WAIT_S):
        result = await client.fetch(at, larger_body=LARGER)
    assert len(result.body) == LARGER.max_bytes
    assert await too_large(client, over, larger_body=LARGER) == "max_document_bytes"  # type: ignore[arg-type]


async def test_a_body_the_larger_cap_does_not_apply_to_keeps_the_guard_s_caps(
    client: GuardedClient, origin: Origin
) -> None:
    over = _serve_gzip(origin, "/page", "text/html", b"<p>" + b"a" * 1_000_000)
    assert await too_large(client, over, larger_body=LARGER) == "max_decoded_bytes"  # type: ignore[arg-type]


def _serve_declared(origin: Origin, path: str, declared: int, sent: bytes) -> str:
    """A body of octet-stream (the larger cap unsettled until its head) declaring ``declared``
    bytes, of which only ``sent`` arrive: then the origin stalls, never closing."""
    head = (
        f"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: {declared}"
    )
    raw = (head.encode() + b"\r\n\r\n" + sent, b"")
    origin.routes[path] = lambda _seen: Reply(raw=raw, hold_body=trio.Event())
    return origin.url("origin.test", path)


async def test_a_declared_length_past_every_cap_is_refused_before_the_head_settles_which(
    client: GuardedClient, origin: Origin
) -> None:
    """Past the larger cap too, a declared length is too large whichever cap applies: refused
    at once, not at the deadline of an origin that sent a few bytes and stalled."""
    over = _serve_declared(origin, "/over", LARGER.max_bytes + 1, b"%PDF-1.7")
    assert await too_large(client, over, larger_body=LARGER) == "max_document_bytes"  # type: ignore[arg-type]
    body = b"%PDF-" + b"a" * (LARGER.max_bytes - 5)
    at = origin.url("origin.test", "/at")
    origin.routes["/at"] = lambda _seen: Reply(
        headers=[("content-type", "application/octet-stream")], body=body
    )
    with trio.fail_after(WAIT_S):
        result = await client.fetch(at, larger_body=LARGER)
    assert len(result.body) == LARGER.max_bytes  # at the cap, declared: judged by its head
