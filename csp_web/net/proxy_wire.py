"""The proxy's bytes on the wire: request heads read, CONNECT targets split, tunnels spliced,
and a plain-http request relayed: one request, its answer, then the client connection closes."""

from __future__ import annotations

import contextlib
import urllib.parse

import h11
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


Head = tuple[bytes, bytes, list[tuple[bytes, bytes]]]  # method, target, headers


async def relay_one(
    client: trio.SocketStream, upstream: trio.SocketStream, *, sent: Head, received: bytes
) -> None:
    """Send ``sent`` (the request head the proxy judged, in origin form) and the body of the
    client's request (``received``: its head and the bytes read past it) up, then its answer
    down with ``Connection: close``, and end. h11 frames both sides: the body as the client's
    head declares it, the answer by its own framing.

    Spliced instead, a client connection carried whatever the client sent next (another URL,
    another host) to this upstream unjudged, and the upstream's bytes past its answer (more
    than its Content-Length, a keep-alive answer to that next request) reached a client that
    took them for another host's answer. A client sending more than one request, or anything
    that is not HTTP/1.1, has the connection closed."""
    inbound, outbound = h11.Connection(h11.SERVER), h11.Connection(h11.CLIENT)
    inbound.receive_data(received)
    try:
        await _relay_request(client, upstream, inbound, outbound, sent)
        async with trio.open_nursery() as nursery:
            # As the splice did: the client hanging up (or sending more) ends the wait for
            # an upstream that never answers.
            nursery.start_soon(_until_heard, client, nursery.cancel_scope)
            await _relay_response(client, upstream, inbound, outbound)
            nursery.cancel_scope.cancel()
    except h11.ProtocolError:
        return  # either side broke HTTP/1.1: the connection ends, nothing more is relayed


async def _until_heard(stream: trio.SocketStream, scope: trio.CancelScope) -> None:
    """Cancel ``scope`` once ``stream`` says anything: its end, or bytes nobody will relay."""
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        await stream.receive_some(CHUNK_BYTES)
    scope.cancel()


async def _relay_request(
    client: trio.SocketStream,
    upstream: trio.SocketStream,
    inbound: h11.Connection,
    outbound: h11.Connection,
    sent: Head,
) -> None:
    method, target, headers = sent
    request = h11.Request(method=method, target=target, headers=headers)
    await upstream.send_all(outbound.send(request) or b"")
    while True:
        if inbound.they_are_waiting_for_100_continue:  # its Expect went no further
            await client.send_all(
                inbound.send(h11.InformationalResponse(status_code=100, headers=[])) or b""
            )
        event = await _next_event(inbound, client)
        if isinstance(event, h11.Data):
            await upstream.send_all(outbound.send(h11.Data(data=event.data)) or b"")
        elif isinstance(event, h11.EndOfMessage):
            await upstream.send_all(outbound.send(h11.EndOfMessage()) or b"")
            return
        elif not isinstance(event, h11.Request):
            raise h11.RemoteProtocolError("the client left mid-request")


async def _relay_response(
    client: trio.SocketStream,
    upstream: trio.SocketStream,
    inbound: h11.Connection,
    outbound: h11.Connection,
) -> None:
    while True:
        event = await _next_event(outbound, upstream)
        if isinstance(event, h11.InformationalResponse):
            continue  # a 100 Continue was the proxy's to give, and it gave it
        if isinstance(event, h11.Response):
            kept = [(k, v) for k, v in event.headers if k not in _ANSWER_HOP_HEADERS]
            answer = h11.Response(
                status_code=event.status_code,
                headers=[*kept, (b"connection", b"close")],
                reason=event.reason,
            )
            await client.send_all(inbound.send(answer) or b"")
        elif isinstance(event, h11.Data):
            await client.send_all(inbound.send(h11.Data(data=event.data)) or b"")
        elif isinstance(event, h11.EndOfMessage):
            await client.send_all(inbound.send(h11.EndOfMessage()) or b"")
            return
        else:
            raise h11.RemoteProtocolError("the upstream left mid-answer")


# Hop-by-hop (RFC 9110 §7.6.1), and the framing h11 writes again for the client.
_ANSWER_HOP_HEADERS = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade", b"te"}
)


async def _next_event(connection: h11.Connection, stream: trio.SocketStream) -> object:
    """The next event of ``connection``, reading ``stream`` as it needs (``b""`` is EOF)."""
    while (event := connection.next_event()) is h11.NEED_DATA:
        connection.receive_data(bytes(await stream.receive_some(CHUNK_BYTES)))
    return event
