"""A raw HTTP/1.1 origin that writes whatever bytes a test scripts, framing errors included.

``_origin.Origin`` speaks through h11, which refuses to send a body longer than its
Content-Length; this one sends each scripted answer as it stands and keeps the connection
open afterwards, reading the next request on it, as a keep-alive origin would.

    origin = RawOrigin("https", answers={"/smuggle": (first + second,)})

An answer is a tuple of pieces sent now, each in a write of its own (over TLS: records of
their own) and all delivered in one socket send, so the client finds them together; and a
tuple sent once ``release`` is set (then ``sent`` is set). Any other path gets ``page(path)``.
``seen`` records (connection number, path) for every request that reached the origin.
"""

from __future__ import annotations

import functools
import ssl
from dataclasses import dataclass, field

import trio


def response(body: bytes, *, length: int | None = None) -> bytes:
    """A 200 text/html response whose Content-Length is ``length`` (default: the body's)."""
    declared = len(body) if length is None else length
    head = f"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {declared}\r\n\r\n"
    return head.encode() + body


def page(path: str) -> bytes:
    """The honest answer for ``path``."""
    return response(f"<html><body><p>the real {path}</p></body></html>".encode())


@dataclass
class RawOrigin:
    scheme: str
    answers: dict[str, tuple[tuple[bytes, ...], tuple[bytes, ...]]] = field(default_factory=dict)
    port: int = 0
    connections: int = 0
    seen: list[tuple[int, str]] = field(default_factory=list)
    release: trio.Event = field(default_factory=trio.Event)
    sent: trio.Event = field(default_factory=trio.Event)

    def url(self, host: str, path: str) -> str:
        return f"{self.scheme}://{host}:{self.port}{path}"

    async def serve(
        self,
        *,
        ssl_context: ssl.SSLContext | None,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve until cancelled; reports started once ``port`` is bound."""
        tcp = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = tcp[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(functools.partial(self._serve_tcp, ssl_context), tcp)

    async def _serve_tcp(self, ssl_context: ssl.SSLContext | None, tcp: trio.SocketStream) -> None:
        corked = _Corked(tcp)
        stream: trio.abc.Stream = corked
        if ssl_context is not None:
            stream = trio.SSLStream(corked, ssl_context, server_side=True, https_compatible=True)
        await self._serve_stream(stream, corked)

    async def _serve_stream(self, stream: trio.abc.Stream, corked: _Corked) -> None:
        self.connections += 1
        number = self.connections
        buffer = b""
        try:
            while True:
                while b"\r\n\r\n" not in buffer:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    buffer += data
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                path = head.split(b" ")[1].decode()
                self.seen.append((number, path))
                await self._answer(stream, corked, path)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(stream)

    async def _answer(self, stream: trio.abc.Stream, corked: _Corked, path: str) -> None:
        now, later = self.answers.get(path, ((page(path),), ()))
        corked.cork()
        for piece in now:
            await stream.send_all(piece)
        await corked.uncork()
        if later:
            await self.release.wait()
            for piece in later:
                await stream.send_all(piece)
            self.sent.set()


class _Corked(trio.abc.Stream):
    """A socket stream whose writes, while corked, are kept and sent at once on ``uncork``."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self._stream = stream
        self._kept: bytearray | None = None

    def cork(self) -> None:
        self._kept = bytearray()

    async def uncork(self) -> None:
        kept, self._kept = self._kept, None
        if kept:
            await self._stream.send_all(kept)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self._kept is None:
            await self._stream.send_all(data)
        else:
            self._kept += data
            await trio.lowlevel.checkpoint()

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self._stream.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def send_eof(self) -> None:
        await self._stream.send_eof()
