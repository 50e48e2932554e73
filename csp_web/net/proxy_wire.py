"""The proxy's bytes on the wire: request heads read, CONNECT targets split, tunnels spliced,
and a plain-http request relayed: one request, its answer, then the client connection closes."""

from __future__ import annotations

import contextlib
import errno
import urllib.parse

import h11
import trio

from protocol import NumberError, parse_uint

MAX_HEAD_BYTES = 16 * 1024  # a proxy request head; Chromium's are well under 2 KiB
CHUNK_BYTES = 65536


async def read_head(
    stream: trio.SocketStream,
) -> tuple[tuple[bytes, bytes, list[tuple[bytes, bytes]], bytes] | None, bytes]:
    """The request head (method, target, headers, HTTP version) and the bytes read past it;
    None when the peer hung up, or sent a head too long or malformed (answered 431 or 400)."""
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
    return (parts[0], parts[1], headers, parts[2]), rest


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


class Broken(Exception):
    """One side of a relay failed: ``side`` is ``"client"`` or ``"upstream"``, ``reason`` its
    class (``malformed``, ``reset``, ``closed``, ``timeout``), for a log line and a 502."""

    def __init__(self, side: str, reason: str) -> None:
        super().__init__(f"{side} {reason}")
        self.side, self.reason = side, reason


_REASONS = {  # a 502's body: what became of the upstream's answer
    "malformed": "was malformed",
    "reset": "was cut off (connection reset)",
    "closed": "ended early (connection closed)",
    "timeout": "timed out",
}


async def relay_one(
    client: trio.SocketStream, upstream: trio.SocketStream, *, sent: Head, received: bytes
) -> Broken | None:
    """Send ``sent`` (the request head the proxy judged, in origin form) and the body of the
    client's request (``received``: its head and the bytes read past it) up, then its answer
    down with ``Connection: close``, and end. h11 frames both sides: the body as the client's
    head declares it, the answer by its own framing.

    Spliced instead, a client connection carried whatever the client sent next (another URL,
    another host) to this upstream unjudged, and the upstream's bytes past its answer (more
    than its Content-Length, a keep-alive answer to that next request) reached a client that
    took them for another host's answer. A client sending more than one request, or anything
    that is not HTTP/1.0 or 1.1, has the connection closed.

    Returns None when the answer went whole, else how it broke (nothing raised): a client
    request h11 refuses is answered 400 before anything goes up; an upstream answer that
    breaks (refused by h11, reset, ended early) before its head reached the client is answered
    ``502 Bad Gateway`` naming the reason, after its head the connection just ends."""
    inbound, outbound = h11.Connection(h11.SERVER), h11.Connection(h11.CLIENT)
    inbound.receive_data(received)
    try:
        await _next_event(inbound, client, "client")  # the head the proxy read: h11's rules
    except Broken as refused:
        await _plain_answer(
            client, b"400 Bad Request", b"bad request: not HTTP/1.x (1.1 needs a Host)\n"
        )
        return refused
    answered = [False]  # whether a head of the answer went to the client
    failures: list[Broken] = []
    try:
        await _relay(client, upstream, inbound, outbound, sent, answered)
    except* Broken as group:  # bare, or out of the nursery watching the client
        failures.append(_first(group))
    if not failures:
        return None
    broken = failures[0]
    if broken.side == "upstream" and not answered[0]:
        body = f"bad gateway: the upstream's answer {_REASONS[broken.reason]}\n"
        await _plain_answer(client, b"502 Bad Gateway", body.encode())
    return broken


async def _relay(
    client: trio.SocketStream,
    upstream: trio.SocketStream,
    inbound: h11.Connection,
    outbound: h11.Connection,
    sent: Head,
    answered: list[bool],
) -> None:
    try:
        await _relay_request(client, upstream, inbound, outbound, sent)
    except Broken as broken:
        if broken.side == "client":
            raise
        # The upstream stopped reading (it may have answered early): read its answer.
    async with trio.open_nursery() as nursery:
        # As the splice did: the client hanging up (or sending more) ends the wait for an
        # upstream that never answers.
        nursery.start_soon(_until_heard, client, nursery.cancel_scope)
        try:
            await _relay_response(client, upstream, inbound, outbound, answered)
        finally:
            nursery.cancel_scope.cancel()


def _first(group: BaseExceptionGroup[Broken]) -> Broken:
    leaf: BaseException = group
    while isinstance(leaf, BaseExceptionGroup):
        leaf = leaf.exceptions[0]
    assert isinstance(leaf, Broken)
    return leaf


async def _plain_answer(client: trio.SocketStream, status: bytes, body: bytes) -> None:
    """A short text answer of the proxy's own, closing; a client gone already hears none."""
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        await client.send_all(
            b"HTTP/1.1 " + status + b"\r\nContent-Type: text/plain\r\nConnection: close\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )


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
    try:
        head = outbound.send(h11.Request(method=method, target=target, headers=headers))
    except h11.ProtocolError as exc:
        raise Broken("client", "malformed") from exc
    await _send(upstream, head, "upstream")
    while True:
        if inbound.they_are_waiting_for_100_continue:  # its Expect went no further
            continue_ = h11.InformationalResponse(status_code=100, headers=[])
            await _send(client, inbound.send(continue_), "client")
        event = await _next_event(inbound, client, "client")
        if isinstance(event, h11.Data):
            await _send(upstream, outbound.send(h11.Data(data=event.data)), "upstream")
        elif isinstance(event, h11.EndOfMessage):
            await _send(upstream, outbound.send(h11.EndOfMessage()), "upstream")
            return
        else:  # the client left mid-request
            raise Broken("client", "closed")


async def _relay_response(
    client: trio.SocketStream,
    upstream: trio.SocketStream,
    inbound: h11.Connection,
    outbound: h11.Connection,
    answered: list[bool],
) -> None:
    while True:
        event = await _next_event(outbound, upstream, "upstream")
        if isinstance(event, h11.InformationalResponse):
            continue  # a 100 Continue was the proxy's to give, and it gave it
        if isinstance(event, h11.Response):
            names = {k for k, _ in event.headers}
            if b"transfer-encoding" in names and b"content-length" in names:
                raise Broken("upstream", "malformed")  # two framings (RFC 9112 §6.1)
            kept = [(k, v) for k, v in event.headers if k not in _ANSWER_HOP_HEADERS]
            answer = h11.Response(
                status_code=event.status_code,
                headers=[*kept, (b"connection", b"close")],
                reason=event.reason,
            )
            await _send(client, _to_client(inbound, answer), "client")
            answered[0] = True
        elif isinstance(event, h11.Data):
            await _send(client, _to_client(inbound, h11.Data(data=event.data)), "client")
        elif isinstance(event, h11.EndOfMessage):
            await _send(client, _to_client(inbound, h11.EndOfMessage()), "client")
            return
        else:  # the upstream left mid-answer
            raise Broken("upstream", "closed")


def _to_client(inbound: h11.Connection, event: h11.Event) -> bytes | None:
    """``event`` (made of the upstream's answer) as bytes for the client; an answer h11 will
    not write (a body past its length, a status it cannot send) is the upstream's fault."""
    try:
        return inbound.send(event)
    except h11.ProtocolError as exc:
        raise Broken("upstream", "malformed") from exc


# Hop-by-hop (RFC 9110 §7.6.1), and the framing h11 writes again for the client.
_ANSWER_HOP_HEADERS = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade", b"te"}
)
_FAILURES = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


def _failed(side: str, exc: BaseException) -> Broken:
    timed_out = isinstance(exc, OSError) and exc.errno == errno.ETIMEDOUT
    return Broken(side, "timeout" if timed_out else "reset")


async def _send(stream: trio.SocketStream, data: bytes | None, side: str) -> None:
    try:
        await stream.send_all(data or b"")
    except _FAILURES as exc:
        raise _failed(side, exc) from exc


async def _next_event(connection: h11.Connection, stream: trio.SocketStream, side: str) -> object:
    """The next event of ``connection``, reading ``stream`` as it needs (``b""`` is EOF);
    Broken(``side``, ...) when the stream fails or h11 refuses what it sent."""
    ended = False
    try:
        while (event := connection.next_event()) is h11.NEED_DATA:
            data = bytes(await stream.receive_some(CHUNK_BYTES))
            ended = not data
            connection.receive_data(data)
    except h11.ProtocolError as exc:
        raise Broken(side, "closed" if ended else "malformed") from exc
    except _FAILURES as exc:
        raise _failed(side, exc) from exc
    return event
