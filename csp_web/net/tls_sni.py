"""The server name a TLS ClientHello asks for (RFC 6066 §3), read from a tunnel's first bytes.

Sans-IO: the caller reads, this parses what it was given. A ClientHello may span several TLS
records (RFC 8446 §5.1); their payloads are joined until the handshake message is whole.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_HELLO_BYTES = 16 * 1024  # a ClientHello with every extension fits; past it: no name read
_HANDSHAKE = 0x16
_CLIENT_HELLO = 0x01
_SERVER_NAME = 0x0000
_HOST_NAME = 0x00


@dataclass(frozen=True)
class Hello:
    """What the bytes so far say: ``complete`` False while more are needed; ``name`` the
    host_name asked for (lower-case), None when there is none or the bytes are no ClientHello."""

    complete: bool
    name: str | None = None


def read_hello(data: bytes) -> Hello:
    """The server name in ``data``, the first bytes a client sent through a tunnel."""
    message = _handshake(data)
    if message is None:
        return Hello(len(data) >= MAX_HELLO_BYTES)
    if not message or message[0] != _CLIENT_HELLO:
        return Hello(True)
    try:
        return Hello(True, _server_name(message))
    except IndexError:  # malformed: no server completes a handshake with it either
        return Hello(True)


def _handshake(data: bytes) -> bytes | None:
    """The first handshake message, joined from the records; None while it is incomplete,
    b"" when the bytes are no handshake records."""
    payload, offset = b"", 0
    while True:
        if len(payload) >= 4 and len(payload) >= 4 + int.from_bytes(payload[1:4], "big"):
            return payload[: 4 + int.from_bytes(payload[1:4], "big")]
        if len(data) < offset + 5:
            return None
        if data[offset] != _HANDSHAKE:
            return b""
        length = int.from_bytes(data[offset + 3 : offset + 5], "big")
        if len(data) < offset + 5 + length:
            return None
        payload += data[offset + 5 : offset + 5 + length]
        offset += 5 + length


def _server_name(message: bytes) -> str | None:
    at = 4 + 2 + 32  # the message header, client_version, random
    at += 1 + message[at]  # session_id
    at += 2 + int.from_bytes(message[at : at + 2], "big")  # cipher_suites
    at += 1 + message[at]  # compression_methods
    if at >= len(message):
        return None  # no extensions
    end = at + 2 + int.from_bytes(message[at : at + 2], "big")
    at += 2
    while at + 4 <= end:
        kind, size = int.from_bytes(message[at : at + 2], "big"), message[at + 2 : at + 4]
        at += 4
        body = message[at : at + int.from_bytes(size, "big")]
        at += len(body)
        if kind == _SERVER_NAME:
            return _host_name(body)
    return None


def _host_name(body: bytes) -> str | None:
    at, end = 2, 2 + int.from_bytes(body[:2], "big")
    while at + 3 <= end:
        kind, size = body[at], int.from_bytes(body[at + 1 : at + 3], "big")
        name = body[at + 3 : at + 3 + size]
        if kind == _HOST_NAME:
            # Not ASCII (no DNS name is): kept, marked, so it is refused as another host.
            return name.decode("ascii", "replace").lower().removesuffix(".")
        at += 3 + size
    return None
