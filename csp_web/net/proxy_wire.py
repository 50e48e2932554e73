"""The proxy's bytes on the wire: request heads read, CONNECT targets split, tunnels spliced."""

from __future__ import annotations

import urllib.parse

import trio

from protocol import NumberError, parse_uint

MAX_HEAD_BYTES = 16 * 1024  # a proxy request head; Chromium's are well under 2 KiB
CHUNK_BYTES = 65536


async def read_head(
    stream: trio.SocketStream,
) -> tuple[tuple[bytes, bytes, list[tuple[bytes, bytes]]] | None, bytes]:
    """The request head (method, target, headers) and the bytes read past it; None when the
    peer hung up, or sent a head too long or malformed (answered 431 or 400)."""
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        if len(buffer) > MAX_HEAD_BYTES:
            await stream.send_all(b"HTTP/1.1 431 Request Header Fields Too Large\r\n\r\n")
            return None, b""
        data = await stream.receive_some(CHUNK_BYTES)
        if not data:
            return None, b""
        buffer += data
    head, _, rest = buffer.partition(b"\r\n\r\n")
    request_line, *header_lines = head.split(b"\r\n")
    parts = request_line.split(b" ")
    if len(parts) != 3:
        await stream.send_all(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        return None, b""
    headers = []
    for line in header_lines:
        name, _, value = line.partition(b":")
        headers.append((name.strip(), value.strip()))
    return (parts[0], parts[1], headers), rest


def split_authority(target: str) -> tuple[str, int]:
    """A CONNECT target's host and port (0, which the guard refuses, when it is no port)."""
    host, _, port = target.rpartition(":")
    try:
        number = parse_uint(port, max_digits=5)  # not "\xb2", nor 5000 digits
    except NumberError:
        number = 0
    return host.strip("[]"), number


def target_of(url: str) -> str:
    """``host:port`` of a URL, for a refusal's record (its first 100 chars if unparsable)."""
    try:
        parts = urllib.parse.urlsplit(url)
        return f"{parts.hostname}:{parts.port or 80}"
    except ValueError:
        return url[:100]


async def splice(a: trio.SocketStream, b: trio.SocketStream) -> None:
    """Copy both ways until either side ends, then end both."""

    async def pump(source: trio.SocketStream, sink: trio.SocketStream) -> None:
        try:
            while data := await source.receive_some(CHUNK_BYTES):
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        nursery.cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(pump, a, b)
        nursery.start_soon(pump, b, a)
