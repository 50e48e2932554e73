"""The SDK transport for one configured server, with the end of its stream made observable.

The SDK (mcp 2.x) gives no public signal when a server process dies while no request is in
flight: its dispatcher just stops reading. ``open_transport`` wraps the transport's read
stream so the end of the stream calls ``on_end``, which lets the session restart a crashed
server at once instead of failing the next call.

A stdio server's stderr goes to a pipe, never to the daemon's own stderr (where its lines
would break ``--log-json``): each line it writes reaches ``on_stderr``, which logs it.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Generic, TypeVar

import anyio
import httpx2
import trio
from mcp import StdioServerParameters, stdio_client

# The types the public `mcp.client.Transport` protocol is written in; the SDK keeps them in a
# private module (with an __all__), so the import is pinned by pyproject's mcp<3.
from mcp.client._transport import ReadStream as _ReadStream
from mcp.client._transport import TransportStreams
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

from csp_web.core.api.logs import relay_lines
from specialists.tool.mcp.config import HttpServerConfig, ServerConfig, StdioServerConfig

T = TypeVar("T")

_HTTP_TIMEOUT_S = 30.0
_SSE_READ_TIMEOUT_S = 300.0
_STREAM_ENDED = (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError)
# After the server process is reaped, how long its last stderr lines may take to drain (a
# grandchild that kept the pipe open must not hold the session's shutdown).
_STDERR_DRAIN_S = 1.0


class MissingSecretError(LookupError):
    """A variable named by ``env_from`` or ``headers_from_env`` is not set for the daemon."""


class _WatchedReadStream(Generic[T]):
    """A read stream (the SDK's ``ReadStream`` protocol) that reports its own end, once."""

    def __init__(self, inner: _ReadStream[T], on_end: Callable[[], None]) -> None:
        self._inner = inner
        self._on_end: Callable[[], None] | None = on_end

    @property
    def last_context(self) -> object:
        # The dispatcher reads this by getattr to restore the sender's contextvars.
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> T:
        try:
            return await self._inner.receive()
        except _STREAM_ENDED:
            on_end, self._on_end = self._on_end, None
            if on_end is not None:
                on_end()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _WatchedReadStream[T]:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _WatchedReadStream[T]:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.aclose()


@asynccontextmanager
async def open_transport(
    server: ServerConfig,
    *,
    on_end: Callable[[], None],
    on_stderr: Callable[[str], None],
) -> AsyncIterator[TransportStreams]:
    """Open the server's transport; yields the SDK's (read, write) stream pair.

    A stdio server is spawned here and reaped on exit (the SDK closes stdin, then terminates
    its process group, every wait bounded); each line it writes to stderr is passed to
    ``on_stderr``. Raises MissingSecretError before spawning or connecting when a named
    variable is unset; OSError when the command cannot be spawned.
    """
    if isinstance(server, StdioServerConfig):
        async with _open_stdio(server, on_stderr) as (read, write):
            yield _watched(read, on_end), write
        return
    async with _open_http(server) as (read, write):
        yield _watched(read, on_end), write


@asynccontextmanager
async def _open_stdio(
    server: StdioServerConfig, on_stderr: Callable[[str], None]
) -> AsyncIterator[TransportStreams]:
    parameters = _stdio_parameters(server)  # a missing secret fails before the pipe exists
    read_fd, write_fd = os.pipe()
    reader = trio.lowlevel.FdStream(read_fd)  # owns read_fd from here on
    relayed = trio.Event()

    async def relay() -> None:
        try:
            await relay_lines(reader, on_stderr)
        finally:
            relayed.set()

    async with reader, trio.open_nursery() as nursery:
        try:
            with open(write_fd, "w", closefd=True) as errlog:  # noqa: ASYNC230 - a pipe end
                streams = stdio_client(parameters, errlog=errlog)
                nursery.start_soon(relay)
                async with streams as pair:
                    # The child holds its own copy of the write end; with ours closed, the
                    # relay sees the end of the pipe once the child (and its children) exit.
                    errlog.close()
                    yield pair
        finally:
            # The server is reaped: let its last lines (often why it died) reach the log.
            with trio.move_on_after(_STDERR_DRAIN_S) as drain:
                drain.shield = True
                await relayed.wait()
            nursery.cancel_scope.cancel()


def _watched(
    read: _ReadStream[SessionMessage | Exception], on_end: Callable[[], None]
) -> _ReadStream[SessionMessage | Exception]:
    return _WatchedReadStream(read, on_end)


def _stdio_parameters(server: StdioServerConfig) -> StdioServerParameters:
    env = dict(server.env) | _read_env(server.env_from)
    # "replace": a line that is not UTF-8 then fails as JSON, one message the session skips.
    # Strict decoding ended the SDK's reader without ending its stream: the call in flight
    # waited out its whole timeout and was answered call_timeout, a wrong cause.
    return StdioServerParameters(
        command=server.command,
        args=list(server.args),
        env=env,
        cwd=server.cwd,
        encoding_error_handler="replace",
    )


@asynccontextmanager
async def _open_http(server: HttpServerConfig) -> AsyncIterator[TransportStreams]:
    # The SDK speaks httpx2, so csp_web's guarded httpx client cannot serve here. Timeouts are
    # the SDK's own defaults (mcp.shared._httpx_utils: 30 s, 300 s for an SSE read); the
    # pool's deadlines cut any call shorter than these.
    http = httpx2.AsyncClient(
        headers=_read_env(server.headers_from_env),
        timeout=httpx2.Timeout(_HTTP_TIMEOUT_S, read=_SSE_READ_TIMEOUT_S),
    )
    async with http, streamable_http_client(server.url, http_client=http) as streams:
        yield streams


def _read_env(names: Mapping[str, str]) -> dict[str, str]:
    """Map each key to the value of the daemon variable it names; the values are secrets."""
    resolved: dict[str, str] = {}
    for key, variable in names.items():
        value = os.environ.get(variable)
        if value is None:
            raise MissingSecretError(variable)
        resolved[key] = value
    return resolved
