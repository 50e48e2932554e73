"""The transport wrappers ``csp-web replay`` puts under the guarded client (its one seam,
``csp_web.net.TransportWrapper``): ``Recorder`` writes down every exchange, ``ReplayTap`` sends
every request to the cassette's local origin instead of its host.

Both sit under the URL gate and over the pinned backend: a request they pass on is still
resolved by the guard's resolver, checked against the deny table and read under the caps.
"""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field

import httpx

from csp_web.cli.cassette import (
    CONNECTION_HEADERS,
    FRAMING_HEADERS,
    Exchange,
    Redactor,
    wire_host,
)
from csp_web.core.api.errors import OpError
from protocol import ErrorCode

# The header the cassette origin marks a miss with; the tap turns it into a FAIL.
MISS_HEADER = "x-csp-cassette-miss"


def diverted(request: httpx.Request, port: int | None) -> httpx.Request:
    """``request`` sent to ``port`` on the same host: the URL's host, the Host header and the
    TLS server name stay as they were, so the guard and the certificate check see the name."""
    if port is None:
        return request
    return httpx.Request(
        request.method,
        request.url.copy_with(port=port),
        headers=request.headers,
        stream=request.stream,
        extensions=request.extensions,
    )


@dataclass
class Recorder:
    """Collects the exchanges of the requests made through ``wrap``'s transports, redacted,
    in the order the requests were sent. ``divert`` (tests only) sends each scheme's requests
    to another port of the same host: a local origin standing in for the live upstream."""

    redactor: Redactor
    divert: Mapping[str, int] = field(default_factory=dict)
    _slots: list[Exchange | None] = field(default_factory=list)
    in_flight: int = 0  # requests sent whose body is not yet read to its end or failed

    @property
    def exchanges(self) -> list[Exchange]:
        """The exchanges whose response was read (a failed connect has none)."""
        return [exchange for exchange in self._slots if exchange is not None]

    def wrap(self, inner: httpx.AsyncBaseTransport) -> httpx.AsyncBaseTransport:
        return _RecordingTransport(inner, self)

    def open_slot(self) -> Callable[[Exchange], None]:
        index = len(self._slots)
        self._slots.append(None)

        def fill(exchange: Exchange) -> None:
            self._slots[index] = exchange

        return fill

    def exchange(
        self, request: httpx.Request, response: httpx.Response, body: bytes, *, complete: bool
    ) -> Exchange:
        """The redacted record of one exchange; ``body`` as read from the wire, to its end
        when ``complete`` (or when it holds all the bytes its Content-Length declares)."""
        complete = complete or response.headers.get("content-length") == str(len(body))
        if complete:
            kept = [(k, v) for k, v in response.headers.multi_items() if k not in FRAMING_HEADERS]
            headers, body = _decoded(response.status_code, kept, body)
        else:
            headers = [
                (k, v) for k, v in response.headers.multi_items() if k not in CONNECTION_HEADERS
            ]
            if "content-encoding" in response.headers:
                body = b""  # cut short and still encoded: it cannot be searched for secrets
        return Exchange(
            method=request.method,
            url=self.redactor.url(str(request.url)),
            request_headers=self.redactor.headers(request.headers.multi_items()),
            request_body=self.redactor.body(request.content),
            status=response.status_code,
            headers=self.redactor.headers(headers),
            body=self.redactor.body(body),
            truncated=not complete,
        )


def _decoded(
    status: int, headers: list[tuple[str, str]], body: bytes
) -> tuple[list[tuple[str, str]], bytes]:
    """The body without its content-encoding (so it reads, and a secret in it is found);
    as it came when it does not decode."""
    if not any(name == "content-encoding" for name, _ in headers):
        return headers, body
    try:
        plain = httpx.Response(status, headers=headers, content=body).read()
    except httpx.DecodingError:
        return headers, body
    return [(name, value) for name, value in headers if name != "content-encoding"], plain


class _RecordingTransport(httpx.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport, recorder: Recorder) -> None:
        self._inner = inner
        self._recorder = recorder

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        fill = self._recorder.open_slot()
        port = self._recorder.divert.get(request.url.scheme)
        self._recorder.in_flight += 1
        try:
            response = await self._inner.handle_async_request(diverted(request, port))
        except BaseException:
            self._recorder.in_flight -= 1
            raise

        def done(body: bytes, complete: bool) -> None:
            self._recorder.in_flight -= 1
            fill(self._recorder.exchange(request, response, body, complete=complete))

        response.stream = _Tee(response.stream, done)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


class _Tee(httpx.AsyncByteStream):
    """Passes the body on and, when it is closed, hands ``done`` what was read and whether
    that was all of it."""

    def __init__(
        self,
        inner: httpx.SyncByteStream | httpx.AsyncByteStream,
        done: Callable[[bytes, bool], None],
    ) -> None:
        assert isinstance(inner, httpx.AsyncByteStream)
        self._inner = inner
        self._done = done
        self._chunks: list[bytes] = []
        self._complete = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._chunks.append(chunk)
            yield chunk
        self._complete = True

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            self._done(b"".join(self._chunks), self._complete)


@dataclass
class ReplayTap:
    """Sends each request to the cassette origin's port for its scheme, if its host is one the
    cassette recorded; otherwise, or when the origin answers a miss, the request fails
    FETCH_FAILED "cassette_miss" and ``misses`` names its method and URL. Never a live request:
    a host the cassette does not name is not passed on at all."""

    redactor: Redactor
    hosts: frozenset[str]
    ports: Mapping[str, int]
    misses: list[str] = field(default_factory=list)

    def wrap(self, inner: httpx.AsyncBaseTransport) -> httpx.AsyncBaseTransport:
        return _ReplayTransport(inner, self)

    def miss(self, method: str, url: str, why: str) -> OpError:
        self.misses.append(f"{method} {self.redactor.url(url)} ({why})")
        return OpError(ErrorCode.FETCH_FAILED, "cassette_miss")

    def port_for(self, url: httpx.URL) -> int | None:
        """The origin's port for ``url``, None for a host the cassette cannot serve (not
        recorded, or an address that is not loopback: the connect would leave the machine)."""
        host = wire_host(url)
        if host not in self.hosts:
            return None
        try:
            if not ipaddress.ip_address(host).is_loopback:
                return None
        except ValueError:
            pass  # a name: the replay's resolver answers it with the origin's address
        return self.ports.get(url.scheme)


class _ReplayTransport(httpx.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport, tap: ReplayTap) -> None:
        self._inner = inner
        self._tap = tap

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        port = self._tap.port_for(request.url)
        if port is None:
            raise self._tap.miss(request.method, str(request.url), "host not in the cassette")
        response = await self._inner.handle_async_request(diverted(request, port))
        if MISS_HEADER in response.headers:
            await response.aclose()
            raise self._tap.miss(
                request.method, str(request.url), "not recorded, or its recorded exchanges all used"
            )
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()
