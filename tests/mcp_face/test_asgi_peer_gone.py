"""The h11 ASGI server when a peer leaves mid-response, or an app starts a second response:
never a second response on the connection, never a traceback for a peer that left."""

from __future__ import annotations

import logging
import socket

import pytest
import trio

from csp_web.mcp_face.asgi import HttpLimits, Message, Receive, Send, serve_connection

REQUEST = b"POST /mcp HTTP/1.1\r\nhost: localhost\r\ncontent-length: 2\r\n\r\nhi"
START = {"type": "http.response.start", "status": 200, "headers": []}
ERROR_START = {"type": "http.response.start", "status": 500, "headers": []}


async def answers_an_error_when_a_write_fails(scope: Message, receive: Receive, send: Send) -> None:
    """As an app's error handler does: a write fails (the peer left), it answers 500."""
    await receive()
    await send(START)
    await send({"type": "http.response.body", "body": b"x", "more_body": True})
    assert (await receive())["type"] == "http.disconnect"
    try:
        while True:  # the first write after the peer closed may still be buffered
            await send({"type": "http.response.body", "body": b"x" * 65536, "more_body": True})
    except OSError:
        await send(ERROR_START)


async def starts_twice(scope: Message, receive: Receive, send: Send) -> None:
    await receive()
    await send(START)
    await send({"type": "http.response.body", "body": b"part", "more_body": True})
    await send(ERROR_START)
    await send({"type": "http.response.body", "body": b" and the rest"})


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_peer_that_leaves_mid_response_is_logged_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client, server = trio.socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    client_stream = trio.SocketStream(client)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                serve_connection,
                trio.SocketStream(server),
                answers_an_error_when_a_write_fails,
                HttpLimits(),
            )
            await client_stream.send_all(REQUEST)
            assert (await client_stream.receive_some(65536)).startswith(b"HTTP/1.1 200")
            await client_stream.aclose()
    assert _errors(caplog) == []


async def test_a_second_response_start_is_dropped_and_the_first_response_ends_whole(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client, server = trio.socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    client_stream = trio.SocketStream(client)
    answer = b""
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                serve_connection, trio.SocketStream(server), starts_twice, HttpLimits()
            )
            await client_stream.send_all(REQUEST)
            while chunk := await client_stream.receive_some(65536):
                answer += chunk
            await client_stream.aclose()
    assert answer.startswith(b"HTTP/1.1 200")
    assert answer.count(b"HTTP/1.1") == 1
    assert answer.endswith(b"part\r\nd\r\n and the rest\r\n0\r\n\r\n")
    assert _errors(caplog) == []
