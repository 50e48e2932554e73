"""``new_episodes``: a recording that keeps its cassette. A request the cassette holds an
exchange for is answered from it (its key's exchanges in recorded order, as a replay serves
them); any other goes to the live upstream through the ``Recorder`` and is appended.

The recorded answers are made here, at the transport wrapper, not by a local origin: the
same client must reach the live upstreams (their DNS and certificates) for the new requests.
So a replayed answer passes the URL gate, the redirect rules and the byte caps, but no
connect.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx

from csp_web.cli.cassette import FRAMING_HEADERS, Cassette, Exchange, Key, request_key
from csp_web.cli.cassette_tap import Recorder


@dataclass
class EpisodeTap:
    """Serves ``kept``'s exchanges and records the rest with ``recorder``."""

    kept: Cassette
    recorder: Recorder
    _queues: dict[Key, deque[Exchange]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for exchange in self.kept.exchanges:
            self._queues.setdefault(exchange.key, deque()).append(exchange)

    def wrap(self, inner: httpx.AsyncBaseTransport) -> httpx.AsyncBaseTransport:
        return _EpisodeTransport(self.recorder.wrap(inner), self)

    def take(self, request: httpx.Request) -> Exchange | None:
        """The next recorded exchange for ``request`` (its key as the recorder writes it),
        or None: a new episode. Call after the request's body is read."""
        redactor = self.recorder.redactor
        key = request_key(
            request.method, redactor.url(str(request.url)), redactor.body(request.content)
        )
        queue = self._queues.get(key)
        return queue.popleft() if queue else None

    def cassette(self, credentials: tuple[str, ...]) -> Cassette:
        """The kept exchanges, then the new ones in the order they were sent."""
        names = tuple(sorted({*self.kept.credentials, *credentials}))
        return Cassette([*self.kept.exchanges, *self.recorder.exchanges], names)


class _EpisodeTransport(httpx.AsyncBaseTransport):
    def __init__(self, recording: httpx.AsyncBaseTransport, tap: EpisodeTap) -> None:
        self._recording = recording
        self._tap = tap

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        exchange = self._tap.take(request)
        if exchange is None:
            return await self._recording.handle_async_request(request)
        return recorded_response(exchange, request)

    async def aclose(self) -> None:
        await self._recording.aclose()


def recorded_response(exchange: Exchange, request: httpx.Request) -> httpx.Response:
    """``exchange``'s response to ``request``: framed anew, or, when it was cut short, its
    recorded head and bytes and then the broken body the client saw."""
    if exchange.truncated:
        headers = list(exchange.headers)
    else:
        headers = [(k, v) for k, v in exchange.headers if k.lower() not in FRAMING_HEADERS]
        headers.append(("content-length", str(len(exchange.body))))
    stream = _RecordedBody(exchange.body, cut=exchange.truncated)
    return httpx.Response(exchange.status, headers=headers, stream=stream, request=request)


class _RecordedBody(httpx.AsyncByteStream):
    def __init__(self, body: bytes, *, cut: bool) -> None:
        self._body = body
        self._cut = cut

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._body:
            yield self._body
        if self._cut:
            raise httpx.RemoteProtocolError(
                "peer closed connection without sending complete message body (recorded so)"
            )
